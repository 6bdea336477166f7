#!/usr/bin/env bash
# A bounded fuzzing run (`make fuzz`, CI):
#   1. build the C targets with ASan + UBSan (fuzz/build.sh: libFuzzer, or the gcc driver);
#   2. replay every saved finding (fuzz/regressions/<target>/*): each must now run clean;
#   3. fuzz each target for SECONDS, from the committed seeds (fuzz/corpus/<target>/) plus what
#      earlier local runs kept (build/fuzz/work/<target>/, not committed), JOBS targets at a time;
#   4. the same for the Python targets (fuzz/fuzz_python.py, atheris) when PYTHON can import
#      atheris (skipped with a note otherwise).
#
#   fuzz/run.sh [-t SECONDS] [-j JOBS] [-p PYTHON] [TARGET...]    targets: open query build py_cnf py_api
#
# One summary line per target ("fuzz: query: 41740 executions in 60 s, no finding"); the exit
# status is nonzero if any target found something (input and log under build/fuzz/artifacts/ and
# build/fuzz/logs/). A longer run is the same with a larger -t (see fuzz/README.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECONDS_PER=60
JOBS=$(nproc 2>/dev/null || echo 2)
[ "$JOBS" -gt 2 ] && JOBS=2
PYTHON=${PYTHON:-python3}
while getopts "t:j:p:" opt; do
    case $opt in
    t) SECONDS_PER=$OPTARG ;;
    j) JOBS=$OPTARG ;;
    p) PYTHON=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(open query build py_cnf py_api)
B=build/fuzz
mkdir -p "$B/logs" "$B/artifacts"

engine=$(bash fuzz/build.sh | tail -1) || { echo "fuzz: building the targets failed" >&2; exit 1; }
have_atheris=0
"$PYTHON" -c "import atheris, infinigram_hf" 2>/dev/null && have_atheris=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# target -> command prefix and extra flags
cmd_of() {
    case $1 in
    open) echo "$B/fuzz_open -max_len=16384 -dict=fuzz/open.dict" ;;
    query) echo "$B/fuzz_query -max_len=4096" ;;
    build) echo "$B/fuzz_build -max_len=8192" ;;
    py_cnf) echo "$PYTHON fuzz/fuzz_python.py cnf -max_len=256" ;;
    py_api) echo "$PYTHON fuzz/fuzz_python.py api -max_len=512 -rss_limit_mb=3072" ;;
    esac
}

status=0
# 2. regressions
for t in "${TARGETS[@]}"; do
    dir=fuzz/regressions/$t
    compgen -G "$dir/*" >/dev/null || continue
    case $t in py_*) [ $have_atheris -eq 1 ] || continue ;; esac
    if $(cmd_of "$t") "$dir"/* > "$B/logs/$t-regressions.log" 2>&1; then
        echo "fuzz: $t: $(ls "$dir" | wc -l) saved findings replayed, all clean"
    else
        echo "fuzz: $t: a saved finding fails again (see $B/logs/$t-regressions.log)" >&2
        status=1
    fi
done

# 3./4. bounded runs
run_one() {
    local t=$1 log=$B/logs/$1.log work=$B/work/$1 seeds=fuzz/corpus/$1
    mkdir -p "$work"
    [ -d "$seeds" ] || seeds=""
    local start=$(date +%s)
    $(cmd_of "$t") -max_total_time="$SECONDS_PER" -timeout=20 -print_final_stats=1 \
        -artifact_prefix="$B/artifacts/$t-" "$work" $seeds > "$log" 2>&1
    local rc=$? took=$(( $(date +%s) - start ))
    local runs
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    [ -n "$runs" ] || runs=$(grep -o '^Done [0-9]* runs' "$log" | grep -o '[0-9]*' | tail -1)
    if [ $rc -eq 0 ]; then
        echo "fuzz: $t: ${runs:-?} executions in $took s, no finding ($engine)"
    else
        echo "fuzz: $t: FINDING after ${runs:-?} executions (exit $rc); see $log and $B/artifacts/" >&2
        grep -m3 -E 'ERROR|runtime error|invariant|Uncaught|Traceback' "$log" >&2
        touch "$B/logs/$t.failed"
    fi
}

rm -f "$B"/logs/*.failed
for t in "${TARGETS[@]}"; do
    case $t in
    py_*) if [ $have_atheris -eq 0 ]; then echo "fuzz: $t: skipped ($PYTHON cannot import atheris)"; continue; fi ;;
    esac
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
    run_one "$t" &
done
wait
compgen -G "$B/logs/*.failed" >/dev/null && status=1
exit $status
