# shellcheck shell=bash
#
# registry.sh - a real Confluent-compatible schema registry for the
# integration tests: Apicurio Registry 2.4.2.Final, in-memory storage (H2),
# on a free loopback port, its log in a temporary directory, stopped at the
# end of the run. Steward talks to its Confluent API,
# http://127.0.0.1:PORT/apis/ccompat/v7. Needs common.sh (and deps.sh for
# Java and Maven).
#
# Apicurio's application module on Maven Central holds only classes: a
# Quarkus application is assembled from it by tests/registry/pom.xml
# (quarkus-maven-plugin's build goal) into .cache/registry/app (git-ignored:
# the runner jar and lib/). A stamp holds the sha256 of everything the
# assembly reads (the pom, its settings and its sources), so later runs
# neither download nor even start Maven. tests/registry/pom.xml says why
# that version and what it changes.
#
# A suite can take the registry away: registry_pause/registry_resume freeze
# and thaw the JVM (connections open but nothing answers: a hung registry),
# registry_stop/registry_start stop it and start it again on the same port
# (connections refused meanwhile; the restarted registry has forgotten every
# schema, its storage being in memory). scripts/registry-ctl runs these for
# a test, which gets the commands in its environment (scripts/test).

REGISTRY_CACHE="$STEWARD_ROOT/.cache/registry"
REGISTRY_SRC="$STEWARD_ROOT/tests/registry"
REGISTRY_JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
REGISTRY_DIR=""
REGISTRY_PORT=""
REGISTRY_PID=""

# The Apicurio version the pom names (for the phase lines).
registry_version() {
    sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$REGISTRY_SRC/pom.xml" | head -n 1
}

# The sha256 of the assembly's inputs, in a fixed order.
registry_sum() {
    (cd "$REGISTRY_SRC" && find pom.xml settings.xml src -type f | LC_ALL=C sort |
        xargs sha256sum) | sha256sum | cut -d ' ' -f 1
}

# True when the assembled application matches tests/registry/.
registry_cache_fresh() {
    [[ -f $REGISTRY_CACHE/stamp && -f $REGISTRY_CACHE/app/registry-runner.jar ]] &&
        [[ "$(cat "$REGISTRY_CACHE/stamp")" == "$(registry_sum)" ]]
}

# Assembles the registry into the cache unless it is fresh. As in
# kafka_fetch: a lock for two runs at once, and the new application replaces
# the old one only when complete. Maven builds in a copy of tests/registry,
# so no target/ appears in the source tree.
registry_fetch() {
    mkdir -p "$REGISTRY_CACHE"
    (
        flock 9
        registry_cache_fresh && exit 0
        local sum t0 work
        t0="$(mark)"
        sum="$(registry_sum)"
        work="$(mktemp -d "$REGISTRY_CACHE/build.XXXXXX")"
        cp -r "$REGISTRY_SRC/pom.xml" "$REGISTRY_SRC/settings.xml" "$REGISTRY_SRC/src" "$work/"
        say "registry: assembling Apicurio Registry $(registry_version) with Maven into .cache/registry/app"
        if ! mvn -B -Dstyle.color=never -s "$work/settings.xml" -f "$work/pom.xml" \
            package -DskipTests >"$REGISTRY_CACHE/maven.log" 2>&1 </dev/null; then
            cat "$REGISTRY_CACHE/maven.log" >&2
            rm -rf "$work"
            die "registry: Maven could not assemble tests/registry/pom.xml"
        fi
        mkdir "$work/app"
        mv "$work/target/steward-test-registry-1-runner.jar" "$work/app/registry-runner.jar"
        mv "$work/target/lib" "$work/app/lib"
        rm -rf "$REGISTRY_CACHE/app" "$REGISTRY_CACHE/stamp"
        mv "$work/app" "$REGISTRY_CACHE/app"
        rm -rf "$work"
        printf '%s\n' "$sum" >"$REGISTRY_CACHE/stamp"
        say "registry: assembled ($(find "$REGISTRY_CACHE/app/lib" -name '*.jar' | wc -l) jars) in $(since "$t0")"
    ) 9>"$REGISTRY_CACHE/lock"
}

# The registry's Confluent-compatible API.
registry_url() {
    printf 'http://127.0.0.1:%s/apis/ccompat/v7' "$REGISTRY_PORT"
}

# Starts the JVM in the background on $REGISTRY_PORT, its output appended
# to $REGISTRY_DIR/registry.log, its PID in $REGISTRY_PID and in
# $REGISTRY_DIR/pid (which registry-ctl, a later process, reads). With
# "detached", in a session of its own with no descriptor of the caller's
# open: a test that restarts it through system() must not wait for it.
registry_start_jvm() {
    local opts=(-Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
        -XX:-UsePerfData -Djava.awt.headless=true
        "-Djava.io.tmpdir=$REGISTRY_DIR/tmp"
        -Dquarkus.http.host=127.0.0.1 "-Dquarkus.http.port=$REGISTRY_PORT"
        -jar "$REGISTRY_CACHE/app/registry-runner.jar")
    mkdir -p "$REGISTRY_DIR/tmp"
    if [[ ${1:-} == detached ]]; then
        setsid "$REGISTRY_JAVA" "${opts[@]}" >>"$REGISTRY_DIR/registry.log" 2>&1 </dev/null &
    else
        # As kafka_launch: started from this shell, so it is our child.
        "$REGISTRY_JAVA" "${opts[@]}" >>"$REGISTRY_DIR/registry.log" 2>&1 </dev/null &
    fi
    REGISTRY_PID=$!
    printf '%s\n' "$REGISTRY_PID" >"$REGISTRY_DIR/pid"
    REGISTRY_STARTED_AT="$(mark)"
}

# registry_launch: starts the registry on a free port in a new temporary
# directory (which also holds its port, PID and log for registry-ctl);
# registry_wait_ready then waits for it. Sets REGISTRY_DIR, REGISTRY_PORT,
# REGISTRY_PID.
registry_launch() {
    REGISTRY_DIR="$(mktemp -d "${TMPDIR:-/tmp}/steward-registry.XXXXXX")"
    at_exit rm -rf "$REGISTRY_DIR"
    pick_free_port REGISTRY_PORT
    printf '%s\n' "$REGISTRY_PORT" >"$REGISTRY_DIR/port"
    registry_start_jvm
    at_exit registry_stop
}

# registry_attach DIR: takes over the registry a registry_launch left in DIR
# (for registry-ctl).
registry_attach() {
    REGISTRY_DIR="$1"
    [[ -f $REGISTRY_DIR/port ]] || die "registry: $REGISTRY_DIR holds no registry (no port file)"
    REGISTRY_PORT="$(cat "$REGISTRY_DIR/port")"
    REGISTRY_PID="$(cat "$REGISTRY_DIR/pid" 2>/dev/null || true)"
}

registry_print_log() {
    warn "registry: log follows ($REGISTRY_DIR/registry.log)"
    tail -n 200 "$REGISTRY_DIR/registry.log" >&2 || true
}

# Waits (at most 60 s) until the Confluent API answers GET /subjects, or
# fails with the registry's log.
registry_wait_ready() {
    local deadline=$((SECONDS + 60))
    while :; do
        if ! kill -0 "$REGISTRY_PID" 2>/dev/null; then
            registry_print_log
            die "registry: Apicurio Registry exited during start-up"
        fi
        if curl -sf -o /dev/null --max-time 2 "$(registry_url)/subjects"; then
            break
        fi
        if ((SECONDS >= deadline)); then
            registry_print_log
            die "registry: no answer on $(registry_url) within 60s"
        fi
        sleep 0.25
    done
    say "registry: Apicurio Registry $(registry_version) at $(registry_url) (pid $REGISTRY_PID)," \
        "ready $(since "$REGISTRY_STARTED_AT") after launch"
}

# Stops the registry (SIGTERM, SIGKILL after 15 s). A paused JVM is thawed
# first, or it could not act on the SIGTERM. Also stops one that
# registry-ctl restarted, whose PID only the pid file knows.
registry_stop() {
    [[ -n $REGISTRY_DIR && -f $REGISTRY_DIR/pid ]] && REGISTRY_PID="$(cat "$REGISTRY_DIR/pid")"
    [[ -n $REGISTRY_PID ]] || return 0
    local t0
    t0="$(mark)"
    kill -CONT "$REGISTRY_PID" 2>/dev/null || true
    stop_pid "$REGISTRY_PID" "schema registry" 15
    rm -f "$REGISTRY_DIR/pid"
    say "registry: stopped (pid $REGISTRY_PID) in $(since "$t0")"
    REGISTRY_PID=""
}

# Starts it again on the same port after registry_stop, and waits for it.
registry_start() {
    if [[ -n $REGISTRY_PID ]] && kill -0 "$REGISTRY_PID" 2>/dev/null; then
        die "registry: already running (pid $REGISTRY_PID)"
    fi
    registry_start_jvm "${1:-}"
    registry_wait_ready
}

# Freezes the JVM (SIGSTOP): the port stays open, nothing answers.
registry_pause() {
    [[ -n $REGISTRY_PID ]] && kill -STOP "$REGISTRY_PID" ||
        die "registry: no running registry to pause"
    say "registry: paused (pid $REGISTRY_PID)"
}

registry_resume() {
    [[ -n $REGISTRY_PID ]] && kill -CONT "$REGISTRY_PID" ||
        die "registry: no registry to resume"
    say "registry: resumed (pid $REGISTRY_PID)"
}
