# shellcheck shell=bash
#
# common.sh - what every Steward script shares: the repository root, short
# phase lines, and a stack of clean-up actions that runs exactly once when
# the script ends, however it ends (success, failure, Ctrl-C, SIGTERM).
#
# Sourced, not run. The scripts that source it use `set -euo pipefail`.

STEWARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export STEWARD_ROOT

# One line per phase, so a long run reads as a list of what happened.
say() { printf '== %s\n' "$*"; }
warn() { printf '!! %s\n' "$*" >&2; }
die() {
    warn "$*"
    exit 1
}

# Seconds since the script started, for the timing lines.
elapsed() { printf '%ds' "$SECONDS"; }

# A wall-clock mark (microseconds), and the seconds since one with a
# decimal ("5.2s"), for the timings of short phases.
mark() { local t="$EPOCHREALTIME"; printf '%s' "${t//[!0-9]/}"; }
since() {
    local ds=$((($(mark) - $1) / 100000))
    printf '%d.%ds' $((ds / 10)) $((ds % 10))
}

# The clean-up stack. Each entry is a command (a function or program and
# its arguments, shell-quoted here, evaluated at the end); they run
# last-registered first, so a service is stopped before the directory it
# lives in is removed.
STEWARD_CLEANUPS=()

at_exit() {
    local cmd
    printf -v cmd '%q ' "$@"
    STEWARD_CLEANUPS+=("$cmd")
}

# Runs and empties the stack. Safe to call more than once: the script calls
# it itself before printing its closing summary (so the summary is the last
# thing printed), and the EXIT trap calls it again for the other endings.
run_cleanups() {
    # A second Ctrl-C must not cut a clean-up short and leave a broker or a
    # database behind; every clean-up step bounds its own waits instead.
    trap '' INT TERM
    local i
    for ((i = ${#STEWARD_CLEANUPS[@]} - 1; i >= 0; i--)); do
        eval "${STEWARD_CLEANUPS[i]}" || warn "clean-up step failed: ${STEWARD_CLEANUPS[i]}"
    done
    STEWARD_CLEANUPS=()
    trap - INT TERM
}

# EXIT covers normal ends and `set -e` failures; INT and TERM turn into an
# exit (130/143) so that EXIT runs the clean-ups as well.
install_traps() {
    trap 'steward_on_exit' EXIT
    trap 'warn "interrupted"; exit 130' INT
    trap 'warn "terminated"; exit 143' TERM
}

steward_on_exit() {
    local rc=$?
    trap - EXIT
    run_cleanups
    exit "$rc"
}

# A private scratch directory for this run, removed at the end. Services put
# their data, configuration and logs below it.
make_run_tmp() {
    STEWARD_RUN_TMP="$(mktemp -d "${TMPDIR:-/tmp}/steward-run.XXXXXX")"
    at_exit rm -rf "$STEWARD_RUN_TMP"
}

# Ports handed out by pick_free_port in this run, so two picks made before
# either service listens never collide.
STEWARD_TAKEN_PORTS=" "

# pick_free_port VAR: stores in VAR a loopback TCP port nothing listens on.
# Picked below Linux's ephemeral range (32768+) so an outgoing connection
# does not grab it between the pick and the bind; checked with bash's
# /dev/tcp (a refused connect means nobody listens), no python needed.
pick_free_port() {
    local -n _port_out="$1"
    local p i
    for ((i = 0; i < 500; i++)); do
        p=$((20000 + RANDOM % 12000))
        [[ $STEWARD_TAKEN_PORTS == *" $p "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            STEWARD_TAKEN_PORTS+="$p "
            _port_out="$p"
            return 0
        fi
    done
    die "no free loopback port found"
}

# stop_pid PID NAME SECONDS: SIGTERM, then SIGKILL after SECONDS, then reap.
# Only ever called with the PID of a process this script started.
stop_pid() {
    local pid=$1 name=$2 grace=$3 i
    kill -0 "$pid" 2>/dev/null || {
        wait "$pid" 2>/dev/null || true
        return 0
    }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        warn "$name (pid $pid) did not stop in ${grace}s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
