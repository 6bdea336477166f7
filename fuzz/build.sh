#!/usr/bin/env bash
# Build the C fuzz targets into build/fuzz/ (or $FUZZ_OUT), with AddressSanitizer and
# UndefinedBehaviorSanitizer:
#   - clang with libFuzzer (coverage-guided) when one is found: $FUZZ_CC, clang, clang-19..14;
#   - otherwise gcc with fuzz/standalone.c (random mutations of the seeds, same sanitizers);
#     FUZZ_ENGINE=standalone picks this one even where clang is installed.
# Prints the engine used ("libfuzzer" or "standalone") on its last line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${FUZZ_OUT:-build/fuzz}
mkdir -p "$OUT/obj"

has_libfuzzer() { # can $1 link a libFuzzer target?
    local tmp
    tmp=$(mktemp -d)
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$tmp/t.c"
    "$1" -fsanitize=fuzzer,address,undefined "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1
    local rc=$?
    rm -rf "$tmp"
    return $rc
}

CC=""
[ "${FUZZ_ENGINE:-}" = standalone ] || for cand in ${FUZZ_CC:-} clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
    if command -v "$cand" >/dev/null 2>&1 && has_libfuzzer "$cand"; then CC=$cand; break; fi
done
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
COMMON="-g -O1 -std=c99 -D_GNU_SOURCE -pthread -Inative/include -Inative/src -Inative/tests $SAN"
if [ -n "$CC" ]; then
    ENGINE=libfuzzer
    CFLAGS_ENGINE="$COMMON -fsanitize=fuzzer-no-link"
    LINK="-fsanitize=fuzzer"
else
    ENGINE=standalone
    CC=${CC_FALLBACK:-gcc}
    CFLAGS_ENGINE="$COMMON"
    LINK=""
fi
echo "fuzz/build.sh: $CC ($ENGINE)" >&2

# The engine's sources, compiled once (a target links them all, as the Python extension does).
objs=()
for src in native/src/*.c; do
    obj="$OUT/obj/$(basename "${src%.c}").o"
    $CC $CFLAGS_ENGINE -c "$src" -o "$obj"
    objs+=("$obj")
done
for target in fuzz/fuzz_*.c; do
    name=$(basename "${target%.c}")
    extra=()
    [ "$ENGINE" = standalone ] && extra=(fuzz/standalone.c)
    $CC $CFLAGS_ENGINE $LINK "$target" "${extra[@]}" "${objs[@]}" -lm -o "$OUT/$name"
done
echo "$ENGINE"
