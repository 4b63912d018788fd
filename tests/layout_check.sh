#!/bin/sh
# The folder graph is a DAG (docs/architecture.md): each folder may include
# only the folders listed for it below. Fails, naming the file and the
# include, on any #include "folder/..." that is not an edge of it, so a
# cycle cannot come back unnoticed. A folder's sub-folders are part of it:
# manager/sinks/x.c is checked as manager/ is, and an include names its top
# folder first ("manager/sinks/x.h" is an edge to manager/). Tests and
# benchmarks may include anything and are not checked.
#
#   common/  <-  definitions/  <-  engine/  <-  shadow/  <-  manager/  <-  cli/
#   common/  <-  definitions/  <-  formats/  <-  manager/, cli/
#   common/  <-  schema/  <-  shadow/, manager/
#   common/  <-  registry/  <-  manager/, cli/
#   common/, definitions/  <-  sim/
#
# manager/ keeps its sources in sub-folders, one per concern, and they form
# a DAG of their own (manager_allowed below): an include of
# "manager/<sub>/x.h" from manager/<other>/ must be an edge of it.
#
#   sinks <- runtime <- alerting <- commands <- intake, timing, operator
#         <- api <- config
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}

allowed() {
    case $1 in
    common) echo "common" ;;
    schema) echo "common schema" ;;
    registry) echo "common registry" ;;
    definitions) echo "common definitions" ;;
    engine) echo "common definitions engine" ;;
    formats) echo "common definitions formats" ;;
    sim) echo "common definitions sim" ;;
    manager) echo "common definitions formats engine schema shadow registry manager" ;;
    shadow) echo "common definitions engine schema shadow" ;;
    cli) echo "common definitions formats engine schema manager shadow registry cli" ;;
    *) echo "" ;;
    esac
}

# The sub-folders of manager/ and what each may include of manager/.
manager_allowed() {
    case $1 in
    sinks) echo "sinks" ;;
    runtime) echo "sinks runtime" ;;
    alerting) echo "sinks runtime alerting" ;;
    commands) echo "sinks runtime alerting commands" ;;
    intake) echo "sinks runtime alerting commands intake" ;;
    timing) echo "sinks runtime alerting commands timing" ;;
    operator) echo "sinks runtime alerting commands operator" ;;
    api) echo "sinks runtime alerting commands operator api" ;;
    config) echo "sinks runtime alerting commands intake timing operator api config" ;;
    *) echo "" ;;
    esac
}

status=0
for folder in common schema registry definitions formats engine sim manager shadow cli; do
    [ -d "$root/$folder" ] || { echo "layout_check: $folder/ is missing"; status=1; continue; }
    ok=$(allowed "$folder")
    find "$root/$folder" -type f \( -name '*.c' -o -name '*.h' \) | sort | while IFS= read -r file; do
        # Every quoted include names its folder: a bare "x.h" would hide an edge.
        grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" | while IFS= read -r line; do
            target=$(printf '%s\n' "$line" | sed 's/.*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/')
            case $target in
            */*) dep=${target%%/*} ;;
            *)
                echo "${file#"$root"/}:${line%%:*}: \"$target\" names no folder"
                echo fail
                continue
                ;;
            esac
            case " $ok " in
            *" $dep "*) ;;
            *)
                echo "${file#"$root"/}:${line%%:*}: $folder/ may not include $target ($folder -> $dep is not an edge of the DAG)"
                echo fail
                continue
                ;;
            esac
            # Inside manager/ (and from cli/ into it) an include names its
            # sub-folder; from one sub-folder to another it is an edge.
            [ "$dep" = manager ] || continue
            rest=${target#manager/}
            case $rest in
            */*) to=${rest%%/*} ;;
            *)
                echo "${file#"$root"/}:${line%%:*}: \"$target\" names no sub-folder of manager/"
                echo fail
                continue
                ;;
            esac
            if [ -z "$(manager_allowed "$to")" ]; then
                echo "${file#"$root"/}:${line%%:*}: manager/$to/ is not a sub-folder of the manager DAG (tests/layout_check.sh)"
                echo fail
                continue
            fi
            [ "$folder" = manager ] || continue
            from=${file#"$root"/manager/}
            from=${from%%/*}
            case " $(manager_allowed "$from") " in
            *" $to "*) ;;
            *)
                echo "${file#"$root"/}:${line%%:*}: manager/$from/ may not include $target (manager/$from -> manager/$to is not an edge of the DAG)"
                echo fail
                ;;
            esac
        done
    done
done >"${TMPDIR:-/tmp}/layout_check.$$"

# manager/'s sources live in the sub-folders the DAG names, none at its top.
if [ -d "$root/manager" ]; then
    for entry in "$root"/manager/*; do
        [ -e "$entry" ] || continue
        name=$(basename "$entry")
        if [ -f "$entry" ]; then
            case $name in
            *.c | *.h)
                echo "layout_check: manager/$name is outside the sub-folders of manager/ (tests/layout_check.sh)"
                status=1
                ;;
            esac
        elif [ -z "$(manager_allowed "$name")" ] &&
            [ -n "$(find "$entry" -type f \( -name '*.c' -o -name '*.h' \) | head -n 1)" ]; then
            echo "layout_check: manager/$name/ holds sources but is not in the manager DAG (tests/layout_check.sh)"
            status=1
        fi
    done
fi
if grep -q '^fail$' "${TMPDIR:-/tmp}/layout_check.$$"; then
    grep -v '^fail$' "${TMPDIR:-/tmp}/layout_check.$$"
    status=1
fi
rm -f "${TMPDIR:-/tmp}/layout_check.$$"

# Any folder of sources not named above is a folder the DAG forgot.
for dir in "$root"/*/; do
    name=$(basename "$dir")
    case $name in
    build | tests | bench | docs | scripts | definitions | schema | registry | common | formats | engine | sim | manager | shadow | cli) ;;
    *)
        if [ -n "$(find "$dir" -type f \( -name '*.c' -o -name '*.h' \) | head -n 1)" ]; then
            echo "layout_check: $name/ holds sources but is not in the DAG (tests/layout_check.sh)"
            status=1
        fi
        ;;
    esac
done
[ $status -eq 0 ] && echo "layout_check: every include is an edge of the DAG"
exit $status
