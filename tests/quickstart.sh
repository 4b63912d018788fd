#!/bin/bash
# quickstart.sh SOURCE_DIR BINARY_DIR - follows docs/quickstart.md verbatim.
#
# Runs every ```sh block of the page, in order, in one shell, so the page
# cannot drift from what works. Blocks whose info string says more than
# "sh" are skipped: `setup` (packages, build, install: this is the build
# under test, first in PATH) and `yours` (the reader's brokers, database,
# group and topics: set here to the run's broker, a fresh database, a
# group and topics of this run, SHIPPING the one whose type is in a
# header). The topics get the simulator's six-service traffic first, as a
# reader's topics would have theirs.
#
# Needs STEWARD_TEST_DATABASE_URL (a user with CREATEDB) and
# STEWARD_TEST_KAFKA_BROKERS, as every integration suite,
# STEWARD_TEST_SCHEMA_REGISTRY_URL (the payments topic is Avro, its
# schemas registered there); psql and python3.
set -euo pipefail
src=$1
bin=$2
: "${STEWARD_TEST_DATABASE_URL:?set by scripts/test}"
: "${STEWARD_TEST_KAFKA_BROKERS:?set by scripts/test}"
: "${STEWARD_TEST_SCHEMA_REGISTRY_URL:?set by scripts/test}"

run_id=$$_$(date +%s)
db=steward_quickstart_$run_id
work=$(mktemp -d "${TMPDIR:-/tmp}/quickstart.XXXXXX")
psql -X -q "$STEWARD_TEST_DATABASE_URL" -c "CREATE DATABASE $db"

cleanup() {
    if [ -n "${STEWARD_PID:-}" ] && kill -0 "$STEWARD_PID" 2>/dev/null; then
        kill "$STEWARD_PID"
        wait "$STEWARD_PID" || true
    fi
    psql -X -q "$STEWARD_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db" || true
    rm -rf "$work"
}
trap cleanup EXIT

# The blocks the page lets the test run, as one script.
awk '
    /^```/ && in_block { in_block = 0; next }
    /^```sh[ \t]*$/ { in_block = 1; next }
    in_block { print }
' "$src/docs/quickstart.md" >"$work/quickstart-blocks.sh"
grep -q 'steward discover' "$work/quickstart-blocks.sh" || {
    echo "quickstart.sh: no steward discover among the page's sh blocks" >&2
    exit 1
}

# A reader's topics: the simulator's orders, compressed into minutes of
# event time just past, as the page describes them: payments in Avro (its
# schemas registered in the registry), shipping's type in the x-event-type
# header, a third of the other events CloudEvents in binary mode, the rest
# plain JSON.
prefix=qs${run_id}_
"$bin/steward-sim" --brokers "$STEWARD_TEST_KAFKA_BROKERS" --topic-prefix "$prefix" \
    --orders 300 --seed 5 --time-mode virtual --time-scale 0.001 --quiet \
    --cloudevents-rate 0.3 --avro-topic "${prefix}payments" \
    --schema-registry "$STEWARD_TEST_SCHEMA_REGISTRY_URL" \
    --type-header "${prefix}shipping=x-event-type"

# The `yours` block, for this run.
export STEWARD_KAFKA_BROKERS=$STEWARD_TEST_KAFKA_BROKERS
export STEWARD_DATABASE_URL="$STEWARD_TEST_DATABASE_URL dbname=$db"
export STEWARD_GROUP=quickstart_$run_id
export STEWARD_SCHEMA_REGISTRY_URL=$STEWARD_TEST_SCHEMA_REGISTRY_URL
export STEWARD_HTTP_LISTEN= # parallel suites: no fixed port
SHIPPING=${prefix}shipping
TOPICS=${prefix}orders,${prefix}payments,${prefix}inventory,$SHIPPING,${prefix}delivery,${prefix}notifications

export PATH="$bin:$PATH"
cd "$work"
STEWARD_PID=
# shellcheck disable=SC1091
. ./quickstart-blocks.sh

# What the page promised happened: a draft was written and checked, and the
# shadow run judged the retained events into the fresh database.
test -s order_fulfilment.json
grep -q '"owner": "fulfilment"' order_fulfilment.json
# The Avro topic was read: the draft says so, and its events were judged.
grep -q '"format": "confluent_avro"' order_fulfilment.json || {
    echo "quickstart.sh: the draft gives the Avro topic no confluent_avro format" >&2
    exit 1
}
# The header topic was read by its own envelope: the draft declares it for
# that topic alone.
python3 - "$SHIPPING" order_fulfilment.json <<'PY' || exit 1
import json, sys
topic, path = sys.argv[1], sys.argv[2]
draft = json.load(open(path))
got = draft.get("topics", {}).get(topic, {}).get("envelope")
if got != {"type": {"header": "x-event-type"}}:
    sys.exit("quickstart.sh: the draft's topics.%s.envelope is %s, not the x-event-type header"
             % (topic, json.dumps(got)))
if draft.get("events", {}).get("ShipmentDispatched", {}).get("topic") != topic:
    sys.exit("quickstart.sh: the draft has no ShipmentDispatched on %s" % topic)
others = [t for t, v in draft.get("topics", {}).items() if t != topic and "envelope" in v]
if others:
    sys.exit("quickstart.sh: the draft gives %s an envelope too" % ", ".join(others))
PY
judged=$(psql -X -At "$STEWARD_DATABASE_URL" -c "SELECT count(*) FROM steward.history")
if [ "$judged" -eq 0 ]; then
    echo "quickstart.sh: steward run judged no event" >&2
    cat steward.log >&2
    exit 1
fi
payments=$(psql -X -At "$STEWARD_DATABASE_URL" -c \
    "SELECT count(*) FROM steward.history WHERE event_type = 'PaymentCaptured'")
if [ "$payments" -eq 0 ]; then
    echo "quickstart.sh: no PaymentCaptured (the Avro topic's) was judged" >&2
    cat steward.log >&2
    exit 1
fi
shipped=$(psql -X -At "$STEWARD_DATABASE_URL" -c \
    "SELECT count(*) FROM steward.history WHERE event_type = 'ShipmentDispatched'")
if [ "$shipped" -eq 0 ]; then
    echo "quickstart.sh: no ShipmentDispatched (the header topic's) was judged" >&2
    cat steward.log >&2
    exit 1
fi
echo "quickstart: every block ran; $judged history rows, $payments of them PaymentCaptured (the Avro topic), $shipped ShipmentDispatched (the header topic)"
