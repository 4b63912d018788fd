# shellcheck shell=bash
#
# fuzz.sh - the libFuzzer targets of tests/fuzz/: installing clang,
# building them (build/fuzz, CMake option STEWARD_FUZZ) and running them.
# Needs common.sh, deps.sh and build.sh.
#
# A target runs in two ways: over its corpus (tests/fuzz/corpus/<target>/),
# every file once, as a regression test; and fuzzing, for a bounded time,
# from that corpus, writing what it finds to a scratch corpus and any crash
# to build/fuzz/crashes/<target>/.

# Debian's clang 14 and its runtime libraries (libclang_rt.fuzzer and the
# sanitizers' runtimes).
STEWARD_FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)

FUZZ_BUILD_DIR="$STEWARD_ROOT/build/fuzz"
FUZZ_CORPUS_DIR="$STEWARD_ROOT/tests/fuzz/corpus"

install_fuzz_deps() {
    install_packages "${STEWARD_FUZZ_PACKAGES[@]}"
}

# The clang to build with; empty when none (or no libFuzzer beside it).
fuzz_cc() {
    local cc dir
    for cc in clang-14 clang; do
        command -v "$cc" >/dev/null 2>&1 || continue
        dir="$("$cc" -print-resource-dir 2>/dev/null)" || continue
        if compgen -G "$dir/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null; then
            command -v "$cc"
            return 0
        fi
    done
    return 0
}

# The targets, from the sources: tests/fuzz/fuzz_NAME.c is target NAME.
fuzz_targets() {
    local f
    for f in "$STEWARD_ROOT"/tests/fuzz/fuzz_*.c; do
        f="${f##*/fuzz_}"
        printf '%s\n' "${f%.c}"
    done
}

fuzz_build() {
    local cc
    cc="$(fuzz_cc)"
    [[ -n $cc ]] || die "fuzz: no clang with libFuzzer (install ${STEWARD_FUZZ_PACKAGES[*]})"
    steward_build "$FUZZ_BUILD_DIR" -DSTEWARD_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_C_COMPILER="$cc"
}

# The environment every run gets: UBSan findings abort (libFuzzer records
# the input), leaks are findings too.
fuzz_env() {
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    export ASAN_OPTIONS="detect_leaks=1"
}

# fuzz_regress TARGET LOG: runs every corpus file once. Returns non-zero
# when one crashes, leaks or breaks an invariant.
fuzz_regress() {
    local target="$1" log="$2"
    mkdir -p "$FUZZ_BUILD_DIR/crashes/$target"
    "$FUZZ_BUILD_DIR/fuzz/fuzz_$target" -runs=0 -timeout=10 \
        -artifact_prefix="$FUZZ_BUILD_DIR/crashes/$target/" \
        "$FUZZ_CORPUS_DIR/$target" >"$log" 2>&1 </dev/null
}

# fuzz_run TARGET SECONDS SCRATCH LOG: fuzzes for SECONDS from the corpus,
# new inputs into SCRATCH (a directory). Returns non-zero on a finding.
# Niced: fuzzing takes the CPU nobody else wants.
fuzz_run() {
    local target="$1" seconds="$2" scratch="$3" log="$4"
    mkdir -p "$scratch" "$FUZZ_BUILD_DIR/crashes/$target"
    nice -n 19 "$FUZZ_BUILD_DIR/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$FUZZ_BUILD_DIR/crashes/$target/" \
        "$scratch" "$FUZZ_CORPUS_DIR/$target" >"$log" 2>&1 </dev/null
}

# fuzz_stats LOG: "N execs, N corpus" from a run's final stats and last
# status line.
fuzz_stats() {
    local log="$1" execs corpus
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    corpus="$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -n 1 | sed 's/corp: //')"
    printf '%s execs, corpus %s' "${execs:-?}" "${corpus:-?}"
}

# fuzz_finding LOG: the first line that says what went wrong.
fuzz_finding() {
    grep -m 1 -E 'invariant broken|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' \
        "$1" || tail -n 5 "$1"
}

FUZZ_PIDS=()
FUZZ_PASSED=0
FUZZ_FAILED=0

# Stops the runs fuzz_suite started, if it was interrupted.
fuzz_stop() {
    local pid
    for pid in "${FUZZ_PIDS[@]}"; do
        pkill -TERM -P "$pid" 2>/dev/null || true # the target, under its subshell
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    FUZZ_PIDS=()
}

# fuzz_result NAME RC LOG WHAT: counts one test and says how it went.
fuzz_result() {
    local name="$1" rc="$2" log="$3" what="$4"
    if ((rc == 0)); then
        FUZZ_PASSED=$((FUZZ_PASSED + 1))
        say "$name: ok ($what)"
    else
        FUZZ_FAILED=$((FUZZ_FAILED + 1))
        warn "$name: FAILED: $(fuzz_finding "$log")"
        tail -n 40 "$log" >&2
        grep -E '^Test unit written to' "$log" >&2 || true
    fi
}

# fuzz_suite SECONDS SCRATCH: what scripts/test runs. Builds the targets,
# runs each over its corpus (every file once: the regression test), then
# fuzzes each for SECONDS from it, two targets at a time (one per core).
# Each target counts as two tests, fuzz.TARGET.corpus and fuzz.TARGET.run,
# in FUZZ_PASSED and FUZZ_FAILED. Returns non-zero if any failed; a crash
# is left in build/fuzz/crashes/TARGET/ to be added to the corpus.
fuzz_suite() {
    local seconds="$1" scratch="$2" t0=$SECONDS targets t i rc=0
    mkdir -p "$scratch"
    fuzz_build
    say "fuzz: built in $((SECONDS - t0))s"
    fuzz_env
    mapfile -t targets < <(fuzz_targets)

    for t in "${targets[@]}"; do
        local log="$scratch/$t.corpus.log" r=0 n
        n="$(find "$FUZZ_CORPUS_DIR/$t" -type f | wc -l)"
        fuzz_regress "$t" "$log" || r=$?
        fuzz_result "fuzz.$t.corpus" "$r" "$log" "$n files"
        ((r == 0)) || rc=1
    done

    for ((i = 0; i < ${#targets[@]}; i += 2)); do
        local pair=("${targets[@]:i:2}") pids=()
        for t in "${pair[@]}"; do
            fuzz_run "$t" "$seconds" "$scratch/corpus-$t" "$scratch/$t.run.log" &
            pids+=($!)
        done
        FUZZ_PIDS=("${pids[@]}")
        local k
        for k in "${!pair[@]}"; do
            local r=0
            wait "${pids[k]}" || r=$?
            t="${pair[k]}"
            fuzz_result "fuzz.$t.run" "$r" "$scratch/$t.run.log" \
                "${seconds}s: $(fuzz_stats "$scratch/$t.run.log")"
            ((r == 0)) || rc=1
        done
        FUZZ_PIDS=()
    done
    say "fuzz: done in $((SECONDS - t0))s"
    return "$rc"
}
