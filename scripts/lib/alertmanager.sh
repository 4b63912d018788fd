# shellcheck shell=bash
#
# alertmanager.sh - a real Prometheus Alertmanager for the alerting tests:
# Debian's prometheus-alertmanager (0.25), one instance with clustering off,
# on a free loopback port, its data, configuration and log in a temporary
# directory, stopped and removed at the end of the run. Needs common.sh
# (and deps.sh, for the package and curl).
#
# The tests only talk to its API (POST and GET /api/v2/alerts), so the
# configuration routes everything to a receiver with no integrations:
# nothing is ever sent anywhere, and an alert is visible in the API as soon
# as it is posted.

ALERTMANAGER_BIN="${ALERTMANAGER_BIN:-prometheus-alertmanager}"
ALERTMANAGER_PID=""
ALERTMANAGER_PORT=""
ALERTMANAGER_DIR=""

# The installed version ("0.25.0"), for the phase line.
alertmanager_version() {
    "$ALERTMANAGER_BIN" --version 2>&1 | sed -n 's/^alertmanager, version \([^ ]*\).*/\1/p'
}

# Writes alertmanager.yml into DIR. group_wait 0s: a new alert's group is
# flushed at once; group_interval 1s: changes (a resolved alert) are
# flushed within a second; repeat_interval 1h: no re-sends during a run.
alertmanager_write_config() {
    local dir="$1"
    cat >"$dir/alertmanager.yml" <<EOF
# Steward's tests (scripts/lib/alertmanager.sh): one route, to a receiver
# with no integrations; the tests read alerts back through the API.
route:
  receiver: "null"
  group_by: ["..."]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: "null"
EOF
}

# alertmanager_launch: starts Alertmanager in the background; then
# alertmanager_wait_ready waits for it. Sets ALERTMANAGER_DIR,
# ALERTMANAGER_PORT and ALERTMANAGER_PID.
alertmanager_launch() {
    command -v "$ALERTMANAGER_BIN" >/dev/null ||
        die "alertmanager: $ALERTMANAGER_BIN not found (Debian package prometheus-alertmanager)"
    ALERTMANAGER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/steward-alertmanager.XXXXXX")"
    at_exit rm -rf "$ALERTMANAGER_DIR"
    mkdir -p "$ALERTMANAGER_DIR/data"
    alertmanager_write_config "$ALERTMANAGER_DIR"
    pick_free_port ALERTMANAGER_PORT

    # --cluster.listen-address= (empty) turns the gossip cluster off: no
    # second port, no 15 s wait for peers before notifying. --web.ui-path
    # points at the data directory: Debian ships no UI, and the tests need
    # none. Started from this shell (not a subshell) so that $! is
    # Alertmanager itself and the clean-up can wait for it.
    ALERTMANAGER_STARTED_AT="$(mark)"
    "$ALERTMANAGER_BIN" \
        --config.file="$ALERTMANAGER_DIR/alertmanager.yml" \
        --storage.path="$ALERTMANAGER_DIR/data" \
        --web.listen-address="127.0.0.1:$ALERTMANAGER_PORT" \
        --web.ui-path="$ALERTMANAGER_DIR/data" \
        --cluster.listen-address= \
        >"$ALERTMANAGER_DIR/alertmanager.log" 2>&1 </dev/null &
    ALERTMANAGER_PID=$!
    at_exit alertmanager_stop
}

alertmanager_print_log() {
    warn "alertmanager: log follows"
    tail -n 100 "$ALERTMANAGER_DIR/alertmanager.log" >&2 || true
}

# Waits (at most 30 s) until GET /-/ready answers 200, then exports
# STEWARD_TEST_ALERTMANAGER_URL; fails with the log.
alertmanager_wait_ready() {
    local deadline=$((SECONDS + 30)) url="http://127.0.0.1:$ALERTMANAGER_PORT"
    while :; do
        if ! kill -0 "$ALERTMANAGER_PID" 2>/dev/null; then
            alertmanager_print_log
            die "alertmanager: exited during start-up"
        fi
        if curl -fsS -o /dev/null --max-time 2 "$url/-/ready" 2>/dev/null; then
            break
        fi
        if ((SECONDS >= deadline)); then
            alertmanager_print_log
            die "alertmanager: not ready on 127.0.0.1:$ALERTMANAGER_PORT within 30s"
        fi
        sleep 0.2
    done
    STEWARD_TEST_ALERTMANAGER_URL="$url"
    export STEWARD_TEST_ALERTMANAGER_URL
    say "alertmanager: $(alertmanager_version) on 127.0.0.1:$ALERTMANAGER_PORT" \
        "(pid $ALERTMANAGER_PID), ready $(since "$ALERTMANAGER_STARTED_AT") after launch"
}

# Both steps, for a script with nothing to do in between.
alertmanager_start() {
    alertmanager_launch
    alertmanager_wait_ready
}

# Stops the Alertmanager this run started (SIGTERM, SIGKILL after 10 s)
# and reaps it. Its directory goes with the clean-up registered before.
alertmanager_stop() {
    [[ -n $ALERTMANAGER_PID ]] || return 0
    stop_pid "$ALERTMANAGER_PID" alertmanager 10
    say "alertmanager: stopped (pid $ALERTMANAGER_PID)"
    ALERTMANAGER_PID=""
}
