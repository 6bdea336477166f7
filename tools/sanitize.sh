#!/usr/bin/env bash
# Run the test suite against a build of the C core with AddressSanitizer and
# UndefinedBehaviorSanitizer (gcc or clang; the default is gcc, which needs no extra packages).
#
#   tools/sanitize.sh VENV [pytest arguments...]      (make sanitize does this)
#
# The sanitized core is built from a copy of the sources (build/sanitize/src) and installed
# non-editable into VENV, so the in-tree extension used by the other virtualenvs is never
# replaced. pytest runs from an empty directory with PYTHONSAFEPATH=1, so that neither it nor the
# child processes the tests start (python -c ...) can import the in-tree package instead. The
# sanitizer runtime is preloaded into python (it must come first); leaks are not checked
# (CPython keeps objects alive on purpose), everything else aborts the process.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$(cd "$1" && pwd)
shift
CC=${CC:-gcc}
export CC
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q install)  # (--progress-bar is an install option)
[ -n "${CI:-}" ] && PIP+=(--progress-bar off)

RUNTIME=$($CC -print-file-name=libasan.so)
if [ ! -e "$RUNTIME" ]; then
    echo "tools/sanitize.sh: $CC has no AddressSanitizer runtime (libasan.so); install it (e.g. apt-get install libasan8)" >&2
    exit 1
fi

# 1. the sources, copied (a fresh copy each time: the build below sees exactly the tree's state)
SRC=$ROOT/build/sanitize/src
rm -rf "$ROOT/build/sanitize"
mkdir -p "$SRC" "$ROOT/build/sanitize/run"
(cd "$ROOT" && cp -r infinigram_hf native docs setup.py pyproject.toml MANIFEST.in README.md LICENSE "$SRC/")
find "$SRC" \( -name '*.so' -o -name '_lib.c' \) -delete
find "$SRC" -name __pycache__ -type d -prune -exec rm -rf {} +

# 2. build it with the sanitizers and install it into VENV (dependencies once, on first use)
export INFINIGRAM_CFLAGS="-O1 -g -std=c99 -D_GNU_SOURCE -fvisibility=hidden -fno-omit-frame-pointer -fno-wrapv \
-fsanitize=address,undefined -fno-sanitize-recover=undefined"
export INFINIGRAM_LDFLAGS="-fsanitize=address,undefined"
"${PIP[@]}" "setuptools>=77" wheel "cffi>=1.16"
if [ ! -e "$VENV/.sanitize-deps" ]; then
    "${PIP[@]}" --no-build-isolation "$SRC[test]"
    touch "$VENV/.sanitize-deps"
fi
"${PIP[@]}" --no-build-isolation --no-deps --force-reinstall "$SRC"

# 3. run the suite with the runtime preloaded
# libstdc++ is preloaded too: C++ extensions imported later (matplotlib's ft2font) throw
# exceptions, and ASan's __cxa_throw interceptor aborts if libstdc++ was not there at start-up.
STDCXX=$($CC -print-file-name=libstdc++.so)
if [ -e "$STDCXX" ]; then export LD_PRELOAD="$RUNTIME $STDCXX"; else export LD_PRELOAD=$RUNTIME; fi
# Reports also go to files (log_path), printed again after pytest: CI shows the end of the
# output, and an abort's Python traceback would otherwise push the report out of view.
REPORTS=$ROOT/build/sanitize/reports
mkdir -p "$REPORTS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_odr_violation=0:allocator_may_return_null=1:log_path=$REPORTS/asan}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:log_path=$REPORTS/ubsan}
export PYTHONSAFEPATH=1
cd "$ROOT/build/sanitize/run"
"$VENV/bin/python" - <<'EOF'
import infinigram_hf, infinigram_hf._core._lib as core
assert "site-packages" in infinigram_hf.__file__, f"imported the in-tree package: {infinigram_hf.__file__}"
maps = open("/proc/self/maps").read()
assert "libasan" in maps, "the AddressSanitizer runtime is not loaded"
print(f"tools/sanitize.sh: {core.__file__} (ASan + UBSan)")
EOF
# pytest arguments that name files of the repository are made absolute (we run elsewhere)
args=()
paths=0
for a in "$@"; do
    if [ "${a#-}" = "$a" ] && [ -e "$ROOT/${a%%::*}" ]; then args+=("$ROOT/$a"); paths=1; else args+=("$a"); fi
done
[ $paths -eq 1 ] || args+=("$ROOT/tests")
rc=0
"$VENV/bin/python" -m pytest -p no:cacheprovider -c "$ROOT/pyproject.toml" --rootdir "$ROOT" "${args[@]}" \
    2> >(tee "$REPORTS/pytest-stderr.log" >&2) || rc=$?
if [ $rc -eq 5 ]; then echo "tools/sanitize.sh: pytest collected no tests" >&2; fi
if [ $rc -ne 0 ]; then
    # a sanitizer abort kills pytest mid-test: name the test frames of the fatal traceback
    grep -h 'File ".*/tests/' "$REPORTS/pytest-stderr.log" 2>/dev/null | head -5 \
        | sed 's/^/tools\/sanitize.sh: running when it stopped: /' >&2 || true
    for f in $(ls -t "$REPORTS"/asan.* "$REPORTS"/ubsan.* 2>/dev/null | head -3); do
        [ -e "$f" ] || continue
        echo "tools/sanitize.sh: sanitizer report $f:" >&2
        head -60 "$f" >&2
    done
fi
exit $rc
