#!/usr/bin/env bash
# Build and run the C tests (native/tests/test_*.c) with AddressSanitizer and
# UndefinedBehaviorSanitizer (`make native-test`). Each test is linked with all of the engine's
# sources; CC (default gcc) and SANITIZE (default address,undefined; empty = none) may be set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CC=${CC:-gcc}
SANITIZE=${SANITIZE-address,undefined}
OUT=${OUT:-build/native-tests}
mkdir -p "$OUT"
FLAGS=(-g -O1 -std=c99 -D_GNU_SOURCE -pthread -Inative/include -Inative/src -fno-omit-frame-pointer)
[ -n "$SANITIZE" ] && FLAGS+=("-fsanitize=$SANITIZE" -fno-sanitize-recover=undefined)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# A test that hangs fails after this many seconds instead of holding CI until its limit.
TEST_TIMEOUT=${TEST_TIMEOUT:-900}
failed=0
# The public header stands alone, as C99 and as C++ (its extern "C" guards), without a warning;
# an area header included on its own is refused.
if printf '#include "infinigram.h"\nint main(void) { return ig_api_version() == IG_API_VERSION ? 0 : 1; }\n' |
    $CC -std=c99 -Wall -Wextra -Wpedantic -Werror -Inative/include -x c -fsyntax-only -; then
    echo "native/tests/run.sh: infinigram.h compiles alone (C99)"
else
    echo "native/tests/run.sh: infinigram.h does not compile alone (C99)" >&2; failed=1
fi
CXX=${CXX:-g++}
if command -v "$CXX" >/dev/null 2>&1; then
    if printf '#include "infinigram.h"\nint main() { return ig_api_version() == IG_API_VERSION ? 0 : 1; }\n' |
        $CXX -std=c++11 -Wall -Wextra -Werror -Inative/include -x c++ -fsyntax-only -; then
        echo "native/tests/run.sh: infinigram.h compiles alone (C++, $CXX)"
    else
        echo "native/tests/run.sh: infinigram.h does not compile as C++" >&2; failed=1
    fi
fi
for area in native/include/infinigram_*.h; do
    if printf '#include "%s"\n' "$(basename "$area")" | $CC -Inative/include -x c -fsyntax-only - 2>/dev/null; then
        echo "native/tests/run.sh: $area was accepted without infinigram.h" >&2; failed=1
    fi
done
for test in native/tests/test_*.c; do
    name=$(basename "${test%.c}")
    $CC "${FLAGS[@]}" "$test" native/src/*.c -lm -o "$OUT/$name"
    start=$(date +%s)
    if timeout "$TEST_TIMEOUT" "$OUT/$name"; then
        echo "native/tests/run.sh: $name passed ($(( $(date +%s) - start )) s, $CC -fsanitize=${SANITIZE:-none})"
    else
        rc=$?
        [ $rc -eq 124 ] && echo "native/tests/run.sh: $name ran past ${TEST_TIMEOUT} s" >&2
        echo "native/tests/run.sh: $name FAILED" >&2
        failed=1
    fi
done
exit $failed
