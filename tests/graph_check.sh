#!/bin/sh
# graph_check.sh STEWARD SOURCE_DIR - `steward graph` on every example
# definition: the SVG is well-formed XML, the DOT is accepted by Graphviz
# when `dot` is installed (scripts/lib/deps.sh installs it), and the Mermaid
# diagrams in docs/definitions.md are exactly what the command prints now
# (regenerate them with STEWARD_GRAPH_UPDATE=1).
set -eu
steward=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for def in "$src"/definitions/examples/*.json; do
    name=$(basename "$def" .json)
    "$steward" graph "$def" --format svg >"$tmp/$name.svg"
    python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$tmp/$name.svg" ||
        { echo "graph_check: $name.svg is not well-formed XML" >&2; exit 1; }
    "$steward" graph "$def" --format dot >"$tmp/$name.dot"
    if command -v dot >/dev/null 2>&1; then
        dot -Tsvg "$tmp/$name.dot" >/dev/null ||
            { echo "graph_check: dot refuses $name.dot" >&2; exit 1; }
    else
        echo "graph_check: no Graphviz here, $name.dot not checked by dot"
    fi
done

# Each diagram in the docs follows a marker naming its file:
#   <!-- steward graph definitions/examples/NAME.json --format mermaid -->
#   ```mermaid
#   ...
#   ```
python3 - "$steward" "$src" <<'PY'
import os, re, subprocess, sys
steward, src = sys.argv[1], sys.argv[2]
path = os.path.join(src, "docs/definitions.md")
text = open(path).read()
pat = re.compile(r"(<!-- steward graph (\S+) --format mermaid -->\n```mermaid\n)(.*?)(```\n)", re.S)
found = 0
stale = []
def redo(m):
    global found
    found += 1
    out = subprocess.run([steward, "graph", os.path.join(src, m.group(2)), "--format", "mermaid"],
                         check=True, capture_output=True, text=True).stdout
    if out != m.group(3):
        stale.append(m.group(2))
    return m.group(1) + out + m.group(4)
new = pat.sub(redo, text)
examples = sorted(f for f in os.listdir(os.path.join(src, "definitions/examples")) if f.endswith(".json"))
missing = [e for e in examples if "definitions/examples/" + e + " --format mermaid -->" not in text]
if os.environ.get("STEWARD_GRAPH_UPDATE") == "1":
    open(path, "w").write(new)
    sys.exit(0)
if missing:
    sys.exit("graph_check: docs/definitions.md has no diagram of " + ", ".join(missing))
if stale:
    sys.exit("graph_check: the diagrams of " + ", ".join(stale) + " in docs/definitions.md "
             "differ from `steward graph`; run STEWARD_GRAPH_UPDATE=1 tests/graph_check.sh")
print("graph_check: %d diagrams match" % found)
PY
