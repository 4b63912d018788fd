#!/bin/sh
# failpoint_check.sh SOURCE_DIR: the Release binary (SOURCE_DIR/build/release/steward,
# as scripts/test builds it) holds none of the failpoint names listed in
# common/failpoint.h. Exits 77 (skipped) when there is no Release build.
set -eu
src="$1"
bin="$src/build/release/steward"
if [ ! -x "$bin" ]; then
    echo "no Release build at $bin: skipped (scripts/test builds one)"
    exit 77
fi
names=$(sed -n 's/^ *X("\([a-z_.]*\)", .*/\1/p' "$src/common/failpoint.h")
if [ -z "$names" ]; then
    echo "no failpoint names found in common/failpoint.h" >&2
    exit 1
fi
found=0
for n in $names; do
    if grep -q -a -F "$n" "$bin"; then
        echo "the Release binary contains failpoint $n" >&2
        found=$((found + 1))
    fi
done
[ "$found" -eq 0 ] || exit 1
echo "the Release binary holds none of the $(echo "$names" | wc -w) failpoints"
