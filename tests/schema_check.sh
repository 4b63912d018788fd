#!/bin/sh
# schema_check.sh STEWARD ROOT - keeps definitions/schema/steward-definition.schema.json
# in step with `steward check`.
#
# Every definition the repository ships or tests with is judged by both:
#   definitions/examples, definitions/demo, tests/data/definitions/*.json and
#   tests/data/definitions/valid/    both must accept;
#   tests/data/definitions/invalid/  both must refuse;
#   tests/data/definitions/invalid/check-only/
#                                    the schema accepts, `steward check` refuses:
#                                    what JSON Schema cannot say (references,
#                                    reachability, limits; docs/definitions.md).
# And for every file: accepted by `steward check` => accepted by the schema,
# so an editor never flags a definition Steward would run.
#
# The schema side needs Python's jsonschema (Debian: python3-jsonschema, which
# scripts/test installs); without it the test is skipped (exit 77).
set -u
steward=$1
root=$2
schema=$root/definitions/schema/steward-definition.schema.json
data=$root/tests/data/definitions

python=
for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
        "$candidate" -c 'import jsonschema; jsonschema.Draft202012Validator' >/dev/null 2>&1; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "schema_check: no Python with jsonschema (apt-get install python3-jsonschema): skipped"
    exit 77
fi

# Prints "valid FILE" or "invalid FILE: first error" for each file, by the schema.
schema_verdicts() {
    "$python" - "$schema" "$@" <<'PY'
import json, sys
import jsonschema
with open(sys.argv[1]) as f:
    schema = json.load(f)
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
for path in sys.argv[2:]:
    try:
        with open(path) as f:
            doc = json.load(f)
    except ValueError as e:
        print("invalid %s: not JSON: %s" % (path, e))
        continue
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        print("invalid %s: /%s: %s" % (path, "/".join(str(p) for p in e.absolute_path), e.message[:200]))
    else:
        print("valid %s" % path)
PY
}

status=0
checked=0
# judge EXPECT_CHECK EXPECT_SCHEMA FILE...
judge() {
    want_check=$1
    want_schema=$2
    shift 2
    schema_verdicts "$@" >"${TMPDIR:-/tmp}/schema_check.$$" || {
        echo "schema_check: the schema itself is not a valid draft 2020-12 schema"
        status=1
        return
    }
    while IFS= read -r line; do
        verdict=${line%% *}
        rest=${line#* }
        file=${rest%%: *}
        if "$steward" check "$file" >/dev/null 2>"${TMPDIR:-/tmp}/schema_check_err.$$"; then
            check=valid
        else
            check=invalid
        fi
        checked=$((checked + 1))
        if [ "$check" = valid ] && [ "$verdict" != valid ]; then
            echo "FAIL $file: steward check accepts it, the schema refuses it: $line"
            status=1
        elif [ "$check" != "$want_check" ]; then
            echo "FAIL $file: steward check says $check, expected $want_check:"
            sed 's/^/    /' "${TMPDIR:-/tmp}/schema_check_err.$$"
            status=1
        elif [ "$verdict" != "$want_schema" ]; then
            echo "FAIL $file: the schema says $verdict, expected $want_schema ($line)"
            status=1
        else
            echo "ok   $file: check $check, schema $verdict"
        fi
    done <"${TMPDIR:-/tmp}/schema_check.$$"
    rm -f "${TMPDIR:-/tmp}/schema_check.$$" "${TMPDIR:-/tmp}/schema_check_err.$$"
}

judge valid valid "$root"/definitions/examples/*.json "$root"/definitions/demo/*.json \
    "$data"/*.json "$data"/valid/*.json
judge invalid invalid "$data"/invalid/*.json
judge invalid valid "$data"/invalid/check-only/*.json

echo "schema_check: $checked files"
exit $status
