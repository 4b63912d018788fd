#!/bin/bash
# registry_check.sh - the schema registry the Avro suites use answers as a
# Confluent Schema Registry does, on the calls Steward and the simulator
# make:
#   POST /subjects/S/versions  registers an Avro schema: {"id":N}
#   GET  /schemas/ids/N        gives it back: {"schema":"..."}, the same schema
#   the same schema again      the same id; an unknown id: 404, error_code 40403
#   a schema that is not Avro  422, error_code 42201
# and, when scripts/test started the registry and gave its outage commands
# (STEWARD_TEST_SCHEMA_REGISTRY_PAUSE, _RESUME, _STOP, _START), that they
# work: paused, a request times out; stopped, it is refused; started
# again, the registry answers on the same URL. Last, given steward-sim
# (argument 1) and STEWARD_TEST_KAFKA_BROKERS: `steward-sim --avro-topic`
# registers each event type's schema under <topic>-value, writes the same
# ids as <id>.avsc, and frames the topic's values (magic 0, the id
# big-endian) while the other topics stay JSON.
#
# Skipped (77), saying so, when no registry is given
# (STEWARD_TEST_SCHEMA_REGISTRY_URL); needs curl and python3.
set -euo pipefail

sim=${1:-}
url=${STEWARD_TEST_SCHEMA_REGISTRY_URL:-}
if [ -z "$url" ]; then
    echo "registry_check: skipped: STEWARD_TEST_SCHEMA_REGISTRY_URL is not set" \
        "(scripts/test starts Apicurio Registry and sets it)"
    exit 77
fi
ct='Content-Type: application/vnd.schemaregistry.v1+json'
# A subject of this run only: an external registry may be shared.
subject="steward-registry-check-$$-$(date +%s)-value"
schema='{"type":"record","name":"A","fields":[{"name":"x","type":"long"}]}'
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# json_get JSON KEY: the value of KEY in the object JSON ("" when absent or
# not an object).
json_get() {
    python3 -c '
import json, sys
try:
    v = json.loads(sys.argv[1]).get(sys.argv[2], "")
except Exception:
    v = ""
print(v if isinstance(v, str) else json.dumps(v))' "$1" "$2"
}

# request METHOD PATH [BODY]: sets BODY and CODE (000 when no answer).
request() {
    local out
    if [ $# -ge 3 ]; then
        out=$(curl -s --max-time 10 -w '\n%{http_code}' -X "$1" -H "$ct" --data "$3" "$url$2") || true
    else
        out=$(curl -s --max-time 10 -w '\n%{http_code}' -X "$1" "$url$2") || true
    fi
    CODE=${out##*$'\n'}
    BODY=${out%$'\n'*}
    [ "$BODY" != "$CODE" ] || BODY=""
}

register_body=$(python3 -c 'import json, sys; print(json.dumps({"schema": sys.argv[1]}))' "$schema")

request POST "/subjects/$subject/versions" "$register_body"
id=$(json_get "$BODY" id)
case $id in
'' | *[!0-9]*) fail "register: HTTP $CODE, body '$BODY': no numeric id" ;;
*) echo "ok: registered under $subject: id $id" ;;
esac

if [ -n "$id" ]; then
    request GET "/schemas/ids/$id"
    got=$(json_get "$BODY" schema)
    same=$(python3 -c 'import json, sys
try:
    print(json.loads(sys.argv[1]) == json.loads(sys.argv[2]))
except Exception:
    print(False)' "$got" "$schema")
    if [ "$CODE" = 200 ] && [ "$same" = True ]; then
        echo "ok: /schemas/ids/$id gives the schema back"
    else
        fail "/schemas/ids/$id: HTTP $CODE, body '$BODY': not the registered schema"
    fi

    request POST "/subjects/$subject/versions" "$register_body"
    again=$(json_get "$BODY" id)
    [ "$again" = "$id" ] && echo "ok: the same schema again: id $id" ||
        fail "the same schema again: HTTP $CODE, body '$BODY', expected id $id"
fi

request GET "/schemas/ids/2000000000"
code=$(json_get "$BODY" error_code)
[ "$CODE" = 404 ] && [ "$code" = 40403 ] && echo "ok: an unknown id: 404, 40403" ||
    fail "an unknown id: HTTP $CODE, body '$BODY', expected 404 with error_code 40403"

request POST "/subjects/$subject-bad/versions" '{"schema":"{\"type\":\"recrd\"}"}'
code=$(json_get "$BODY" error_code)
[ "$CODE" = 422 ] && [ "$code" = 42201 ] && echo "ok: an invalid schema: 422, 42201" ||
    fail "an invalid schema: HTTP $CODE, body '$BODY', expected 422 with error_code 42201"

if [ -n "${STEWARD_TEST_SCHEMA_REGISTRY_STOP:-}" ]; then
    sh -c "$STEWARD_TEST_SCHEMA_REGISTRY_PAUSE"
    if curl -s -o /dev/null --max-time 2 "$url/subjects"; then
        fail "paused, the registry still answered"
    else
        echo "ok: paused, a request times out"
    fi
    sh -c "$STEWARD_TEST_SCHEMA_REGISTRY_RESUME"
    request GET /subjects
    [ "$CODE" = 200 ] && echo "ok: resumed, it answers" || fail "resumed: HTTP $CODE"

    sh -c "$STEWARD_TEST_SCHEMA_REGISTRY_STOP"
    rc=0
    curl -s -o /dev/null --max-time 5 "$url/subjects" || rc=$?
    # 7: connection refused.
    [ "$rc" = 7 ] && echo "ok: stopped, connections are refused" ||
        fail "stopped: curl exited $rc, expected 7 (refused)"
    start=$(date +%s)
    sh -c "$STEWARD_TEST_SCHEMA_REGISTRY_START"
    request GET /subjects
    [ "$CODE" = 200 ] && echo "ok: started again in $(($(date +%s) - start))s, it answers" ||
        fail "started again: HTTP $CODE"
else
    echo "registry_check: the outage commands are not set (an external registry): not tried"
fi

if [ -n "$sim" ] && [ -n "${STEWARD_TEST_KAFKA_BROKERS:-}" ] && command -v kcat >/dev/null; then
    prefix="regcheck$$."
    dir=$(mktemp -d "${TMPDIR:-/tmp}/registry_check.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
    if "$sim" --brokers "$STEWARD_TEST_KAFKA_BROKERS" --time-mode virtual --orders 20 --seed 3 \
        --topic-prefix "$prefix" --avro-topic "${prefix}payments" --schema-registry "$url" \
        --avro-schema-dir "$dir/avsc" --quiet >"$dir/sim.log" 2>&1; then
        request GET "/subjects/${prefix}payments-value/versions"
        versions=$BODY
        files=$(cd "$dir/avsc" && ls | sort | tr '\n' ' ')
        [ "$CODE" = 200 ] && [ -n "$files" ] && echo "ok: steward-sim registered ${prefix}payments-value (versions $versions; files $files)" ||
            fail "steward-sim: versions of ${prefix}payments-value: HTTP $CODE '$BODY', files '$files'"
        first=$(ls "$dir/avsc" | sort -n | head -n 1)
        first_id=${first%.avsc}
        request GET "/schemas/ids/$first_id"
        same=$(python3 -c 'import json, sys
try:
    print(json.loads(json.loads(sys.argv[1])["schema"]) == json.load(open(sys.argv[2])))
except Exception:
    print(False)' "$BODY" "$dir/avsc/$first")
        [ "$same" = True ] && echo "ok: $first is the schema the registry has under id $first_id" ||
            fail "$first differs from the registry's schema $first_id ('$BODY')"
        # The first bytes of each value: Avro ones start 00 and a 4-byte id.
        kcat -b "$STEWARD_TEST_KAFKA_BROKERS" -C -t "${prefix}payments" -e -o beginning -q \
            -f '%s\n--\n' >"$dir/payments" 2>/dev/null || true
        framed=$(python3 -c 'import sys
data = open(sys.argv[1], "rb").read().split(b"\n--\n")
print(sum(1 for v in data if len(v) > 5 and v[0] == 0))' "$dir/payments")
        kcat -b "$STEWARD_TEST_KAFKA_BROKERS" -C -t "${prefix}orders" -e -o beginning -q -c 1 \
            -f '%s' >"$dir/orders" 2>/dev/null || true
        [ "$framed" -gt 0 ] && echo "ok: $framed values on ${prefix}payments in the wire format" ||
            fail "no value on ${prefix}payments starts with magic byte 0"
        [ "$(head -c 1 "$dir/orders")" = "{" ] && echo "ok: ${prefix}orders stays JSON" ||
            fail "${prefix}orders: the first value is not JSON"
    else
        fail "steward-sim --avro-topic failed: $(cat "$dir/sim.log")"
    fi
else
    echo "registry_check: steward-sim, STEWARD_TEST_KAFKA_BROKERS or kcat missing: steward-sim's Avro not tried"
fi

if [ "$failures" -gt 0 ]; then
    echo "registry_check: $failures failure(s) against $url"
    exit 1
fi
echo "registry_check: $url answers as a Confluent Schema Registry"
