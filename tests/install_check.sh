#!/bin/sh
# install_check.sh BUILD_DIR - `cmake --install` into a temporary prefix
# installs a steward that works: the installed binary checks the installed
# example definitions, the unit names the installed binary and passes
# `systemd-analyze verify`, the man pages, rules, their unit tests and the
# dashboard are in place, and the installed rules pass their unit tests.
set -eu
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null

for f in bin/steward bin/steward-sim share/man/man1/steward.1 share/man/man1/steward-sim.1 \
    lib/systemd/system/steward.service share/steward/schema/steward-definition.schema.json \
    share/steward/monitoring/steward-rules.yml share/steward/monitoring/steward-rules.test.yml \
    share/steward/monitoring/steward-dashboard.json; do
    [ -s "$prefix/$f" ] || { echo "install_check: $f not installed" >&2; exit 1; }
done
ls "$prefix"/share/steward/examples/*.json >/dev/null
"$prefix/bin/steward" check "$prefix/share/steward/examples"
"$prefix/bin/steward" version
grep -q "^ExecStart=$prefix/bin/steward run " "$prefix/lib/systemd/system/steward.service" ||
    { echo "install_check: the unit does not run $prefix/bin/steward" >&2; exit 1; }
grep -q '^Type=notify$' "$prefix/lib/systemd/system/steward.service"
# The rules' unit tests run where they are installed (their rule_files
# names the rules beside them).
(cd "$prefix/share/steward/monitoring" && promtool test rules steward-rules.test.yml >/dev/null) ||
    { echo "install_check: the installed rules fail their unit tests" >&2; exit 1; }
# verify wants the binary the unit names to exist: it does, in the prefix.
# MANPATH: its Documentation=man:steward(1) must be the installed page.
# scripts/lib/deps.sh installs systemd-analyze (package systemd).
out=$(MANPATH="$prefix/share/man" systemd-analyze verify \
    "$prefix/lib/systemd/system/steward.service" 2>&1) || {
    echo "$out" >&2
    echo "install_check: systemd-analyze verify refuses steward.service" >&2
    exit 1
}
[ -z "$out" ] || echo "$out"
echo "install_check: installed into $prefix and ran"
