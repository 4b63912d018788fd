# shellcheck shell=bash
#
# kafka.sh - a real Apache Kafka 4.x broker for the integration tests:
# single node, KRaft mode (one process with both the broker and the
# controller role), on free loopback ports, its data and log in a temporary
# directory, stopped and removed at the end of the run. Needs common.sh and
# deps.sh.
#
# The broker is Maven Central's org.apache.kafka:kafka_2.13 (tests/kafka/
# pom.xml), copied with its runtime dependencies into .cache/kafka/libs
# (git-ignored). A stamp file holds the pom's sha256, so later runs neither
# download nor even start Maven.

KAFKA_CACHE="$STEWARD_ROOT/.cache/kafka"
KAFKA_POM="$STEWARD_ROOT/tests/kafka/pom.xml"
KAFKA_PID=""
KAFKA_PORT=""
KAFKA_CONTROLLER_PORT=""

# The java binary, called directly (not through a function) so that the
# broker started with `&` is itself the child whose PID $! gives: a
# function in the background would be a subshell, and stopping that would
# leave the JVM running.
KAFKA_JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

# The Kafka version the pom names (for the phase line).
kafka_version() {
    sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_POM" | head -n 1
}

# True when the jar cache matches the pom.
kafka_cache_fresh() {
    [[ -f $KAFKA_CACHE/stamp && -d $KAFKA_CACHE/libs ]] &&
        [[ "$(cat "$KAFKA_CACHE/stamp")" == "$(sha256sum "$KAFKA_POM" | cut -d ' ' -f 1)" ]]
}

# Resolves the broker's jars into the cache unless it is fresh. Two runs at
# once (developers share the tree) take turns through a lock; the copy goes
# to a new directory that replaces the old one only when complete, so an
# interrupted download never leaves a half-filled cache behind a stamp.
kafka_fetch() {
    mkdir -p "$KAFKA_CACHE"
    (
        flock 9
        kafka_cache_fresh && exit 0
        local sum t0 new
        t0="$(mark)"
        sum="$(sha256sum "$KAFKA_POM" | cut -d ' ' -f 1)"
        new="$(mktemp -d "$KAFKA_CACHE/libs.new.XXXXXX")"
        say "kafka: resolving kafka_2.13 $(kafka_version) with Maven into .cache/kafka/libs"
        if ! mvn -B -Dstyle.color=never -f "$KAFKA_POM" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$new" \
            >"$KAFKA_CACHE/maven.log" 2>&1 </dev/null; then
            cat "$KAFKA_CACHE/maven.log" >&2
            rm -rf "$new"
            die "kafka: Maven could not resolve tests/kafka/pom.xml"
        fi
        rm -rf "$KAFKA_CACHE/libs" "$KAFKA_CACHE/stamp"
        mv "$new" "$KAFKA_CACHE/libs"
        printf '%s\n' "$sum" >"$KAFKA_CACHE/stamp"
        say "kafka: $(find "$KAFKA_CACHE/libs" -name '*.jar' | wc -l) jars resolved in $(since "$t0")"
    ) 9>"$KAFKA_CACHE/lock"
}

# A KRaft cluster id: 16 random bytes, base64url without padding (what
# `kafka-storage random-uuid` prints), not starting with '-' so that no
# argument parser takes it for an option. Saves a JVM start.
kafka_cluster_id() {
    local id
    while :; do
        id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
        [[ $id != -* ]] && break
    done
    printf '%s' "$id"
}

# Writes server.properties and log4j2.properties into DIR.
kafka_write_config() {
    local dir="$1" port="$2" cport="$3"
    cat >"$dir/server.properties" <<EOF
# Single-node KRaft cluster for Steward's tests (scripts/lib/kafka.sh).
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=4
auto.create.topics.enable=true
# One broker: every internal topic has one replica. Fewer partitions than
# the defaults (50) make the first consumer group start in well under a
# second instead of creating 50 partitions.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
    cat >"$dir/log4j2.properties" <<EOF
# The broker's log goes to a file; scripts/test prints it if the broker
# fails to start.
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $dir/broker.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
}

# kafka_launch: formats the storage and starts the broker in the background
# (so the caller can build meanwhile); kafka_wait_ready then waits for it.
# Sets KAFKA_DIR, KAFKA_PORT, KAFKA_PID.
kafka_launch() {
    KAFKA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/steward-kafka.XXXXXX")"
    at_exit rm -rf "$KAFKA_DIR"
    mkdir -p "$KAFKA_DIR/tmp"
    pick_free_port KAFKA_PORT
    pick_free_port KAFKA_CONTROLLER_PORT
    kafka_write_config "$KAFKA_DIR" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"

    # A modest heap for a 2-core machine; no perf-data file in /tmp; the
    # JVM's own temporary files (native libraries unpacked by the
    # compression codecs) inside the run's directory.
    KAFKA_JVM_OPTS=(-Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20
        -XX:-UsePerfData -Djava.awt.headless=true
        "-Djava.io.tmpdir=$KAFKA_DIR/tmp"
        "-Dlog4j2.configurationFile=$KAFKA_DIR/log4j2.properties"
        -cp "$KAFKA_CACHE/libs/*")

    KAFKA_STARTED_AT="$(mark)"
    if ! "$KAFKA_JAVA" "${KAFKA_JVM_OPTS[@]}" kafka.tools.StorageTool format \
        -t "$(kafka_cluster_id)" -c "$KAFKA_DIR/server.properties" --standalone \
        >"$KAFKA_DIR/format.log" 2>&1 </dev/null; then
        cat "$KAFKA_DIR/format.log" >&2
        die "kafka: formatting the broker's storage failed"
    fi

    # Started from this shell (not a subshell) so it is our child: the
    # clean-up can wait for it. A background job of a non-interactive shell
    # ignores SIGINT, so Ctrl-C reaches the script, whose trap stops it.
    "$KAFKA_JAVA" "${KAFKA_JVM_OPTS[@]}" kafka.Kafka "$KAFKA_DIR/server.properties" \
        >"$KAFKA_DIR/stdout.log" 2>&1 </dev/null &
    KAFKA_PID=$!
    at_exit kafka_stop
}

# Prints the broker's output and log (on a failed start).
kafka_print_log() {
    warn "kafka: broker output follows"
    cat "$KAFKA_DIR/stdout.log" >&2 || true
    tail -n 200 "$KAFKA_DIR/broker.log" >&2 || true
}

# Waits (at most 60 s) until the broker answers a metadata request listing
# itself (kcat -L), or fails with the broker's log.
kafka_wait_ready() {
    local deadline=$((SECONDS + 60)) md
    while :; do
        if ! kill -0 "$KAFKA_PID" 2>/dev/null; then
            kafka_print_log
            die "kafka: the broker exited during start-up"
        fi
        if md="$(kcat -b "127.0.0.1:$KAFKA_PORT" -L -m 2 2>/dev/null)" &&
            [[ $md == *"broker 1 at 127.0.0.1:$KAFKA_PORT"* ]]; then
            break
        fi
        if ((SECONDS >= deadline)); then
            kafka_print_log
            die "kafka: the broker did not answer on 127.0.0.1:$KAFKA_PORT within 60s"
        fi
        sleep 0.5
    done
    say "kafka: broker $(kafka_version) on 127.0.0.1:$KAFKA_PORT (pid $KAFKA_PID)," \
        "ready $(since "$KAFKA_STARTED_AT") after launch"
}

# Stops the broker this run started: SIGTERM (a controlled shutdown takes a
# few seconds), SIGKILL after 30 s, then reaps it. Its directory goes with
# the clean-up registered before this one.
kafka_stop() {
    [[ -n $KAFKA_PID ]] || return 0
    local t0
    t0="$(mark)"
    stop_pid "$KAFKA_PID" "kafka broker" 30
    say "kafka: broker (pid $KAFKA_PID) stopped in $(since "$t0")"
    KAFKA_PID=""
}
