# shellcheck shell=bash
#
# build.sh - configures and builds Steward in a build directory below
# build/ (git-ignored). Needs common.sh.

# steward_build DIR CMAKE_ARGS...: configure and build with one job per
# core, quietly: the logs (DIR/configure.log, DIR/build.log) are printed
# only when a step fails. Every scripted build (scripts/test, the fuzz
# build, scripts/demo) turns STEWARD_WERROR on, so a warning is a failure
# here; CMAKE_ARGS may turn it off again.
# Two runs sharing DIR at once (developers in the same tree) take turns
# through a lock file in DIR rather than corrupting each other's objects.
steward_build() {
    local dir="$1"
    shift
    mkdir -p "$dir"
    local jobs
    jobs="$(nproc 2>/dev/null || echo 2)"
    (
        flock 9
        if ! cmake -S "$STEWARD_ROOT" -B "$dir" -DSTEWARD_WERROR=ON "$@" >"$dir/configure.log" 2>&1; then
            cat "$dir/configure.log" >&2
            die "build: cmake configure failed (above; also in ${dir#"$STEWARD_ROOT"/}/configure.log)"
        fi
        if ! cmake --build "$dir" -j "$jobs" >"$dir/build.log" 2>&1; then
            cat "$dir/build.log" >&2
            die "build: compiling failed (above; also in ${dir#"$STEWARD_ROOT"/}/build.log)"
        fi
    ) 9>"$dir/.steward-build.lock"
}
