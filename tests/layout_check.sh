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
#   common/  <-  schema/  <-  shadow/, manager/
#   common/, definitions/  <-  sim/
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}

allowed() {
    case $1 in
    common) echo "common" ;;
    schema) echo "common schema" ;;
    definitions) echo "common definitions" ;;
    engine) echo "common definitions engine" ;;
    sim) echo "common definitions sim" ;;
    manager) echo "common definitions engine schema shadow manager" ;;
    shadow) echo "common definitions engine schema shadow" ;;
    cli) echo "common definitions engine schema manager shadow cli" ;;
    *) echo "" ;;
    esac
}

status=0
for folder in common schema definitions engine sim manager shadow cli; do
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
                ;;
            esac
        done
    done
done >"${TMPDIR:-/tmp}/layout_check.$$"
if grep -q '^fail$' "${TMPDIR:-/tmp}/layout_check.$$"; then
    grep -v '^fail$' "${TMPDIR:-/tmp}/layout_check.$$"
    status=1
fi
rm -f "${TMPDIR:-/tmp}/layout_check.$$"

# Any folder of sources not named above is a folder the DAG forgot.
for dir in "$root"/*/; do
    name=$(basename "$dir")
    case $name in
    build | tests | bench | docs | scripts | definitions | schema | common | engine | sim | manager | shadow | cli) ;;
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
