#!/usr/bin/env bash
# Fuzzing, in one of two modes:
#
#   fixed seed (-s SEED; `make fuzz`, CI): deterministic and bounded. Every target starts from the
#     committed seeds only (fuzz/corpus/<target>/, in a fresh work directory; nothing from earlier
#     runs is used or kept) and runs a fixed number of executions (its default below, or -n RUNS)
#     with -seed=SEED (libFuzzer, atheris and the gcc driver alike) and PYTHONHASHSEED=0, so a
#     run finds what the same run finds anywhere, not what chance turns up. SECONDS is only a
#     safety cap (a line says so if it cut a run short).
#   random (no -s; `make fuzz-long`): a random seed per run, for SECONDS per target, growing the
#     corpus kept in build/fuzz/work/<target>/ (not committed) -- for finding new bugs, whose
#     inputs then go to fuzz/regressions/ (fuzz/README.md).
#
# Both: 1. build the C targets with ASan + UBSan (fuzz/build.sh: libFuzzer, or the gcc driver);
#       2. replay every saved finding (fuzz/regressions/<target>/*): each must run clean;
#       3. fuzz each target, JOBS targets at a time; the Python targets (fuzz/fuzz_python.py,
#          atheris) only when PYTHON can import atheris (skipped with a note otherwise).
#
#   fuzz/run.sh [-s SEED [-n RUNS]] [-t SECONDS] [-j JOBS] [-p PYTHON] [TARGET...]
#   targets: open query build py_cnf py_api
#
# One summary line per target ("fuzz: query: 41740 executions in 60 s, no finding"); the exit
# status is nonzero if any target found something (input and log under build/fuzz/artifacts/ and
# build/fuzz/logs/).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECONDS_PER=60
SEED=""
RUNS=""
JOBS=$(nproc 2>/dev/null || echo 2)
[ "$JOBS" -gt 2 ] && JOBS=2
PYTHON=${PYTHON:-python3}
while getopts "t:s:n:j:p:" opt; do
    case $opt in
    t) SECONDS_PER=$OPTARG ;;
    s) SEED=$OPTARG ;;
    n) RUNS=$OPTARG ;;
    j) JOBS=$OPTARG ;;
    p) PYTHON=$OPTARG ;;
    *) exit 2 ;;
    esac
done
[ -n "$RUNS" ] && [ -z "$SEED" ] && { echo "fuzz/run.sh: -n RUNS goes with -s SEED" >&2; exit 2; }
[ -n "$SEED" ] && export PYTHONHASHSEED=0  # (set and dict orders, hence coverage, as in every run)
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

# Executions of a fixed-seed run per target: 20-40 s each on 2 shared cores (RELIABILITY.md has
# the measured times). libFuzzer's coverage-guided executions cost more than the gcc driver's.
runs_of() {
    if [ -n "$RUNS" ]; then echo "$RUNS"; return; fi
    case $1:$engine in
    open:libfuzzer) echo 6000 ;;
    open:*) echo 30000 ;;
    query:libfuzzer) echo 3000 ;;
    query:*) echo 40000 ;;
    build:libfuzzer) echo 1500 ;;
    build:*) echo 5000 ;;
    py_cnf:*) echo 1200 ;;
    py_api:*) echo 20000 ;;
    esac
}

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
    local t=$1 log=$B/logs/$1.log work=$B/work/$1 seeds=fuzz/corpus/$1 mode=() what="random seed"
    if [ -n "$SEED" ]; then  # a fresh work directory: the committed seeds alone
        work=$B/seeded-work/$1
        rm -rf "$work"
        mode=(-seed="$SEED" -runs="$(runs_of "$t")")
        what="seed $SEED"
    fi
    mkdir -p "$work"
    [ -d "$seeds" ] || seeds=""
    local start=$(date +%s)
    $(cmd_of "$t") "${mode[@]}" -max_total_time="$SECONDS_PER" -timeout=20 -print_final_stats=1 \
        -artifact_prefix="$B/artifacts/$t-" "$work" $seeds > "$log" 2>&1
    local rc=$? took=$(( $(date +%s) - start ))
    local runs
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    [ -n "$runs" ] || runs=$(grep -o '^Done [0-9]* runs' "$log" | grep -o '[0-9]*' | tail -1)
    [ -n "$SEED" ] && rm -rf "$work"
    local eng=$engine
    case $t in py_*) eng=atheris ;; esac
    if [ $rc -eq 0 ]; then
        echo "fuzz: $t: ${runs:-?} executions in $took s, no finding ($eng, $what)"
        if [ -n "$SEED" ] && [ "${runs:-0}" -lt "$(runs_of "$t")" ]; then
            echo "fuzz: $t: the ${SECONDS_PER} s cap stopped it before its $(runs_of "$t") executions" >&2
        fi
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
