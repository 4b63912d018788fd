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
