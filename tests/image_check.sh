#!/bin/bash
# image_check.sh SOURCE_DIR - the OCI image (scripts/image) works as a
# container: built from the package on a debootstrapped root, it runs as a
# non-root user with `steward run` as its entry point, takes its config from
# a mounted file and the environment, answers /healthz and /readyz, judges
# the run's Kafka topic into the run's PostgreSQL, raises the alert for an
# instance that stalled, and drains and exits 0 on SIGTERM within 30 s (the
# unit's TimeoutStopSec and the Deployment's grace period).
#
# The container is started by podman, with storage of its own under the
# test's scratch folder, on the host's network (the services are on
# loopback). When no OCI runtime can start a container here, the test says
# what each one answered and runs the image's root file system itself
# (umoci unpack, then chroot as the image's user in mount and PID namespaces
# of its own, scripts/lib/debroot-enter) through the same checks.
#
# STEWARD_TEST_IMAGE_RUNTIME=chroot takes that way without trying podman.
#
# Needs STEWARD_TEST_DATABASE_URL and STEWARD_TEST_KAFKA_BROKERS (scripts/test
# sets them), psql, kcat, curl and python3. Exit 77 (skipped) only when no
# Debian root can be built here, with the reason.
set -euo pipefail
src=$1
: "${STEWARD_TEST_DATABASE_URL:?set by scripts/test}"
: "${STEWARD_TEST_KAFKA_BROKERS:?set by scripts/test}"
t0=$SECONDS

work=$(mktemp -d "${TMPDIR:-/tmp}/image_check.XXXXXX")
run_id=$$_$(date +%s)
db=steward_image_$run_id
topic=image_check_$run_id
name=steward-image-check-$run_id
MODE=""
STEWARD_PID=""
fail() {
    echo "image_check: $*" >&2
    exit 1
}

cleanup() {
    if [[ $MODE == podman ]]; then
        pm rm -af -t 0 >/dev/null 2>&1 || true
        pm rmi -af >/dev/null 2>&1 || true
        # What the storage driver still has mounted below the test's folder
        # (not `podman system reset`: it also removes the machine's networks).
        grep -o " $work/podman[^ ]*" /proc/self/mounts | sort -r | xargs -r umount -l 2>/dev/null || true
    fi
    if [[ -n $STEWARD_PID ]] && kill -0 "$STEWARD_PID" 2>/dev/null; then
        kill -KILL "$STEWARD_PID" 2>/dev/null || true
        wait "$STEWARD_PID" 2>/dev/null || true
    fi
    psql -X -q "$STEWARD_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

for tool in psql kcat curl python3; do
    command -v "$tool" >/dev/null || fail "$tool is needed (scripts/test installs it)"
done

if ! "$src/scripts/debian-root" >/dev/null 2>"$work/root.log"; then
    echo "image_check: SKIPPED: no Debian root can be built here, so no image:"
    sed 's/^/  /' "$work/root.log"
    exit 77
fi
ref=$("$src/scripts/image" 2>"$work/image.log" | tail -n 1) || {
    cat "$work/image.log" >&2
    fail "scripts/image failed (above)"
}
layout=${ref%:steward:*}
tag=steward:${ref##*:steward:}
grep '^== image' "$work/image.log" || true

# What the image says of itself, read from the layout (OCI image config).
python3 - "$layout" "$tag" >"$work/config.env" <<'EOF'
import json, sys, os, shlex
layout, tag = sys.argv[1], sys.argv[2]
def blob(d):
    algo, hexd = d.split(":")
    return json.load(open(os.path.join(layout, "blobs", algo, hexd)))
index = json.load(open(os.path.join(layout, "index.json")))
m = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag][0]
cfg = blob(blob(m["digest"])["config"]["digest"])["config"]
print("IMG_USER=%s" % shlex.quote(cfg.get("User", "")))
print("IMG_ENTRYPOINT=%s" % shlex.quote(" ".join(cfg.get("Entrypoint") or [])))
print("IMG_CMD=%s" % shlex.quote(" ".join(cfg.get("Cmd") or [])))
print("IMG_ENV=(%s)" % " ".join(shlex.quote(e) for e in cfg.get("Env") or []))
print("IMG_PORTS=%s" % shlex.quote(" ".join(sorted(cfg.get("ExposedPorts") or {}))))
print("IMG_STOPSIGNAL=%s" % shlex.quote(cfg.get("StopSignal", "")))
EOF
# shellcheck disable=SC1091
. "$work/config.env"
[[ $IMG_USER =~ ^[0-9]+:[0-9]+$ && ${IMG_USER%%:*} != 0 ]] ||
    fail "the image's user is '$IMG_USER', not a numeric user other than root"
[[ $IMG_ENTRYPOINT == "/usr/bin/steward run" && -z $IMG_CMD ]] ||
    fail "the entry point is '$IMG_ENTRYPOINT' '$IMG_CMD', not /usr/bin/steward run"
[[ " ${IMG_ENV[*]} " == *" STEWARD_CONFIG=/etc/steward/steward.json "* ]] ||
    fail "the image sets no STEWARD_CONFIG: ${IMG_ENV[*]}"
[[ $IMG_PORTS == 9464/tcp && $IMG_STOPSIGNAL == SIGTERM ]] ||
    fail "ports '$IMG_PORTS', stop signal '$IMG_STOPSIGNAL'"
echo "image_check: $ref: user $IMG_USER, entry point $IMG_ENTRYPOINT, ${IMG_ENV[*]}"

# podman with storage of its own, so nothing of the machine's is touched and
# everything goes with the test. This machine's limits: the default
# RLIMIT_NOFILE (1048576) may be above the hard limit a caller without
# CAP_SYS_RESOURCE can set, so the container gets the caller's (at most
# 65536, the unit's LimitNOFILE) and 4096 processes.
nofile=$(ulimit -Hn)
[[ $nofile == unlimited || $nofile -gt 65536 ]] && nofile=65536
PODMAN=(podman --root "$work/podman/storage" --runroot "$work/podman/run" --storage-driver overlay
    --cgroup-manager cgroupfs --events-backend file)
ULIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
pm() { "${PODMAN[@]}" ${RUNTIME:+--runtime "$RUNTIME"} "$@"; }

# Which runtime starts a container here: the first of crun and runc that
# runs the image's steward; what each failure said is printed either way.
RUNTIME=""
why=()
if [[ ${STEWARD_TEST_IMAGE_RUNTIME:-} == chroot ]]; then
    why+=("STEWARD_TEST_IMAGE_RUNTIME=chroot: podman not tried")
elif ! command -v podman >/dev/null; then
    why+=("podman is not installed")
elif ! out=$(pm load -q -i "$(dirname "$layout")/$(tr : - <<<"$tag").oci.tar" 2>&1); then
    why+=("podman load: $out")
elif ! pm image exists "localhost/$tag"; then
    fail "podman load named the image otherwise than localhost/$tag: $out"
else
    for rt in crun runc; do
        if ! command -v "$rt" >/dev/null; then
            why+=("$rt: not installed")
            continue
        fi
        if out=$(pm --runtime "$rt" run --rm --network=host "${ULIMITS[@]}" \
            --entrypoint /usr/bin/steward "localhost/$tag" version 2>&1); then
            RUNTIME=$rt
            break
        fi
        why+=("podman --runtime $rt: $(tail -n 3 <<<"$out" | tr '\n' ' ')")
    done
fi
for w in "${why[@]}"; do
    echo "image_check: $w"
done
if [[ -n $RUNTIME ]]; then
    MODE=podman
    echo "image_check: podman $(podman version --format '{{.Client.Version}}') with $RUNTIME starts the image"
else
    MODE=chroot
    echo "image_check: no container runtime can start a container here (above); running the image's" \
        "root file system with chroot as $IMG_USER in namespaces of its own instead"
    umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
fi

# img_exec CMD...: one command in the image, as its user.
img_exec() {
    if [[ $MODE == podman ]]; then
        pm run --rm --network=host "${ULIMITS[@]}" --entrypoint "$1" "localhost/$tag" "${@:2}"
    else
        local envs=() e
        for e in "${IMG_ENV[@]}"; do envs+=(--env "$e"); done
        rm -rf "$work/exec"
        "$src/scripts/lib/debroot-enter" --chroot --user "$IMG_USER" "${envs[@]}" \
            "$work/bundle/rootfs" "$work/exec" -- "$@"
    fi
}

[[ $(img_exec id -u) == "${IMG_USER%%:*}" ]] || fail "the image does not run as ${IMG_USER%%:*}"
img_exec steward --help | grep -q '^usage: steward ' || fail "steward --help in the image printed no usage"
img_exec steward check /usr/share/steward/examples >/dev/null || fail "steward check in the image refused the examples"

# The run: a definition whose step has a 2 minute deadline, one instance
# started ten minutes ago (stalled) and, on every partition, one started
# now, which moves the watermark past the stalled one's deadline.
psql -X -q "$STEWARD_TEST_DATABASE_URL" -c "CREATE DATABASE $db"
mkdir -p "$work/definitions"
cat >"$work/definitions/image_check.json" <<EOF
{
  "process": "image_check",
  "version": 1,
  "mode": "shadow",
  "owner": "operations",
  "key": "/id",
  "envelope": {"time": "/at"},
  "events": {"JobStarted": {"topic": "$topic"}, "JobFinished": {"topic": "$topic"}},
  "start": {"on": "JobStarted", "to": "running"},
  "states": {
    "running": {"deadline": "2m", "on": {"JobFinished": "finished"}},
    "finished": {"terminal": "success"}
  }
}
EOF
chmod -R a+rX "$work/definitions"
now=$(date -u +%s)
iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }
printf '{"type":"JobStarted","id":"stalled-1","at":"%s"}\n' "$(iso $((now - 600)))" |
    kcat -P -b "$STEWARD_TEST_KAFKA_BROKERS" -t "$topic" -p 0
partitions=""
for _ in $(seq 50); do
    partitions=$(kcat -L -b "$STEWARD_TEST_KAFKA_BROKERS" -t "$topic" 2>/dev/null |
        sed -n 's/.* with \([0-9]*\) partitions.*/\1/p' | head -n 1)
    [[ -n $partitions && $partitions -gt 0 ]] && break
    sleep 0.1
done
[[ -n $partitions && $partitions -gt 0 ]] || fail "topic $topic has no partitions"
for ((p = 0; p < partitions; p++)); do
    printf '{"type":"JobStarted","id":"fresh-%d","at":"%s"}\n' "$p" "$(iso "$now")" |
        kcat -P -b "$STEWARD_TEST_KAFKA_BROKERS" -t "$topic" -p "$p"
done

# Config from a file mounted over the image's (definitions, routes, a
# quicker scheduler) and from the environment (brokers, database, group,
# listener: loopback, on a free port of the host's network).
port=""
for _ in $(seq 200); do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        port=$p
        break
    fi
done
[[ -n $port ]] || fail "no free port"
cat >"$work/steward.json" <<'EOF'
{
  "definitions": "/etc/steward/definitions",
  "scheduler": {"interval": "250ms"},
  "routes": {"default": [{"type": "log"}]}
}
EOF
chmod a+r "$work/steward.json"
envs=(STEWARD_KAFKA_BROKERS="$STEWARD_TEST_KAFKA_BROKERS"
    STEWARD_DATABASE_URL="$STEWARD_TEST_DATABASE_URL dbname=$db"
    STEWARD_GROUP="image_check_$run_id" STEWARD_HTTP_LISTEN="127.0.0.1:$port")
if [[ $MODE == podman ]]; then
    args=()
    for e in "${envs[@]}"; do args+=(-e "$e"); done
    # As the Deployment runs it: a read-only root (podman mounts tmpfs on
    # /tmp and /run), no capabilities, no privilege gained.
    pm run -d --name "$name" --network=host "${ULIMITS[@]}" "${args[@]}" \
        --read-only --cap-drop=ALL --security-opt=no-new-privileges \
        -v "$work/steward.json:/etc/steward/steward.json:ro" \
        -v "$work/definitions:/etc/steward/definitions:ro" "localhost/$tag" >/dev/null
    pid=$(pm inspect --format '{{.State.Pid}}' "$name")
    uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
    [[ $uid == "${IMG_USER%%:*}" ]] || fail "steward runs as uid $uid in the container"
else
    cenvs=()
    for e in "${IMG_ENV[@]}" "${envs[@]}"; do cenvs+=(--env "$e"); done
    # shellcheck disable=SC2086 # the entry point, in its words
    "$src/scripts/lib/debroot-enter" --chroot --user "$IMG_USER" "${cenvs[@]}" \
        --ro-bind "$work/steward.json:/etc/steward/steward.json" \
        --ro-bind "$work/definitions:/etc/steward/definitions" \
        "$work/bundle/rootfs" "$work/run" -- $IMG_ENTRYPOINT >"$work/steward.log" 2>&1 &
    STEWARD_PID=$!
fi
logs() {
    if [[ $MODE == podman ]]; then pm logs "$name" 2>&1; else cat "$work/steward.log"; fi
}
running() {
    if [[ $MODE == podman ]]; then
        [[ $(pm inspect --format '{{.State.Running}}' "$name") == true ]]
    else
        kill -0 "$STEWARD_PID" 2>/dev/null
    fi
}
# wait_for SECONDS WHAT CMD...: CMD until it succeeds, at most SECONDS.
wait_for() {
    local limit=$(($1 * 10)) what=$2 i
    shift 2
    for ((i = 0; i < limit; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        running || {
            logs | tail -n 30 >&2
            fail "steward stopped while waiting for $what"
        }
        sleep 0.1
    done
    logs | tail -n 30 >&2
    fail "no $what within $1 s"
}
base=http://127.0.0.1:$port
wait_for 60 "200 from /readyz" curl -fsS "$base/readyz"
curl -fsS "$base/healthz" | grep -qx ok || fail "/healthz did not answer ok"
echo "image_check: /readyz $(curl -fsS "$base/readyz" | head -c 160)"
stuck_names() { curl -fsS "$base/v1/stuck" | grep -q '"stalled-1"'; }
wait_for 60 "alert for stalled-1 on /v1/stuck" stuck_names
curl -fsS "$base/v1/stuck" >"$work/stuck.json"
! grep -q '"fresh-' "$work/stuck.json" || fail "an instance within its deadline is listed as stuck: $(cat "$work/stuck.json")"
page_logged() { logs | grep '"msg":"alert"' | grep -q '"key":"stalled-1"'; }
wait_for 30 "page for stalled-1 in the log" page_logged
echo "image_check: alert raised for stalled-1 ($MODE)"

# SIGTERM: a drain, exit 0, within the documented 30 s.
t_stop=$SECONDS
if [[ $MODE == podman ]]; then
    pm kill --signal TERM "$name" >/dev/null
    rc=$(timeout 40 "${PODMAN[@]}" --runtime "$RUNTIME" wait "$name") || fail "the container did not stop within 40 s"
else
    kill -TERM "$STEWARD_PID"
    rc=0
    timeout 40 tail --pid="$STEWARD_PID" -f /dev/null || fail "steward did not stop within 40 s"
    wait "$STEWARD_PID" || rc=$?
    STEWARD_PID=""
fi
took=$((SECONDS - t_stop))
logs >"$work/final.log"
[[ $rc == 0 ]] || {
    tail -n 30 "$work/final.log" >&2
    fail "steward exited $rc on SIGTERM"
}
grep -q '"msg":"steward stopped"' "$work/final.log" || fail "no 'steward stopped' in the log"
((took <= 30)) || fail "the stop took ${took}s, more than 30 s"
echo "image_check: SIGTERM: exit 0 in ${took}s; $(grep -c '"partition released"' "$work/final.log") partition release(s) logged"
echo "image_check: passed in $((SECONDS - t0))s ($MODE${RUNTIME:+, $RUNTIME})"
