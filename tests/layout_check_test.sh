#!/bin/sh
# layout_check.sh on small trees of its own: an include that breaks the DAG
# from a sub-folder, or from a header, fails it as one from the folder's top
# does, and sources in a sub-folder of a folder the DAG does not name too;
# inside manager/, an include against the sub-folders' DAG, a source at
# manager/'s top or in a sub-folder the DAG does not name fails it.
set -eu
check=$(cd "$(dirname "$0")" && pwd)/layout_check.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/layout_check_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0

# A tree with every folder of the DAG and one lawful include in a sub-folder.
tree() {
    rm -rf "$work/root"
    for folder in common schema registry definitions formats engine sim manager shadow cli; do
        mkdir -p "$work/root/$folder"
    done
    mkdir -p "$work/root/manager/sinks" "$work/root/manager/alerting"
    printf '#include "engine/engine.h"\n' >"$work/root/manager/sinks/log.c"
    printf '#include "manager/sinks/log.h"\n' >"$work/root/manager/alerting/alerts.c"
}

# expect WANT_STATUS WORDS: layout_check.sh on the tree exits so, saying WORDS.
expect() {
    set +e
    out=$(sh "$check" "$work/root" 2>&1)
    got=$?
    set -e
    case $out in
    *"$2"*) words=yes ;;
    *) words=no ;;
    esac
    if [ "$got" -ne "$1" ] || [ $words = no ]; then
        echo "layout_check_test: $3: expected exit $1 and '$2', got exit $got:"
        printf '%s\n' "$out"
        status=1
    fi
}

tree
expect 0 "every include is an edge" "a lawful sub-folder"

tree
printf '#include "manager/sinks/log.h"\n' >"$work/root/engine/engine.c"
mkdir -p "$work/root/engine/rules"
printf '#include "cli/cli.h"\n' >"$work/root/engine/rules/retry.c"
expect 1 "engine/rules/retry.c:1: engine/ may not include cli/cli.h" "a .c in a sub-folder"

tree
mkdir -p "$work/root/engine/rules/deep"
printf '#include "manager/api/http.h"\n' >"$work/root/engine/rules/deep/retry.h"
expect 1 "engine/rules/deep/retry.h:1: engine/ may not include manager/api/http.h" "a header two folders down"

tree
printf '#include "retry.h"\n' >"$work/root/manager/sinks/log.c"
expect 1 "manager/sinks/log.c:1: \"retry.h\" names no folder" "a bare include in a sub-folder"

tree
mkdir -p "$work/root/plugins/sinks"
printf 'int x;\n' >"$work/root/plugins/sinks/a.c"
expect 1 "plugins/ holds sources but is not in the DAG" "sources only in a sub-folder of an unknown folder"

tree
printf '#include "manager/alerting/alerts.h"\n' >"$work/root/manager/sinks/log.c"
expect 1 "manager/sinks/log.c:1: manager/sinks/ may not include manager/alerting/alerts.h" \
    "an include up the manager DAG"

tree
printf '#include "manager/log.h"\n' >"$work/root/manager/alerting/alerts.c"
expect 1 "\"manager/log.h\" names no sub-folder of manager/" "an include naming no sub-folder"

tree
printf 'int x;\n' >"$work/root/manager/loose.c"
expect 1 "manager/loose.c is outside the sub-folders" "a source at manager/'s top"

tree
mkdir -p "$work/root/manager/misc"
printf 'int x;\n' >"$work/root/manager/misc/a.c"
expect 1 "manager/misc/ holds sources but is not in the manager DAG" "an unknown sub-folder of manager/"

[ $status -eq 0 ] && echo "layout_check_test: sub-folders and headers are checked"
exit $status
