#!/bin/sh
# deploy_check.sh SOURCE_DIR - the operations kit under deploy/:
#   - the Prometheus rules pass `promtool check rules` and their unit tests
#     (`promtool test rules`: input series and the alerts expected);
#   - the Grafana dashboard is valid JSON with panels and queries;
#   - every metric name the rules and the dashboard use is one steward
#     exposes (a name written in manager/api/http_metrics.c, the metrics
#     writer), besides Prometheus's own `up`;
#   - the man page lists every command `steward --help` prints
#     (STEWARD, the binary, as the second argument), and its OPERATOR
#     VERBS section exactly the verbs of the verb table (manager/operator/actions.h),
#     which `steward --help` prints under "operator verbs:".
set -eu
src=$1
steward=$2
cd "$src/deploy/prometheus"
promtool check rules steward-rules.yml
promtool test rules steward-rules.test.yml

python3 - "$src" "$steward" <<'PY'
import json, re, subprocess, sys
src, steward = sys.argv[1], sys.argv[2]
dash = json.load(open(src + "/deploy/grafana/steward-dashboard.json"))
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
if not dash["panels"] or len(exprs) < len(dash["panels"]):
    sys.exit("deploy_check: a dashboard panel has no query")
rules = open(src + "/deploy/prometheus/steward-rules.yml").read()
exprs += re.findall(r"expr: >?\s*\n?(.*(?:\n {10}.*)*)", rules)
used = set()
for e in exprs:
    used |= set(re.findall(r"\b((?:steward|process)_[a-z0-9_]+)\b", e))
http = open(src + "/manager/api/http_metrics.c").read()
exposed = set(re.findall(r'"((?:steward|process)_[a-z0-9_]+)"', http))
def known(n):
    base = re.sub(r"_(bucket|sum|count)$", "", n)
    return n in exposed or (base != n and base in exposed)
missing = sorted(n for n in used if not known(n))
if missing:
    sys.exit("deploy_check: used but not exposed by steward: " + ", ".join(missing))
if "up{" not in rules:
    sys.exit("deploy_check: no rule on up")
print("deploy_check: %d metric names, all exposed" % len(used))

man = open(src + "/deploy/man/steward.1").read()
out = subprocess.run([steward, "--help"], check=True, capture_output=True, text=True).stdout
cmds = re.findall(r"^  ([a-z]+) ", out, re.M)
absent = [c for c in cmds if not re.search(r"^\.B[R]? .*\b%s\b" % c, man, re.M)]
if absent:
    sys.exit("deploy_check: steward.1 does not describe: " + ", ".join(absent))
print("deploy_check: steward.1 lists all %d commands" % len(cmds))

verbs_help = out.split("\noperator verbs:\n", 1)
if len(verbs_help) != 2:
    sys.exit("deploy_check: steward --help lists no operator verbs")
verbs = re.findall(r"^  ([a-z]+) ", verbs_help[1].split("\n\n", 1)[0], re.M)
section = re.search(r"^\.SH OPERATOR VERBS\n(.*?)(?=^\.SH |\Z)", man, re.M | re.S)
if section is None:
    sys.exit("deploy_check: steward.1 has no OPERATOR VERBS section")
listed = re.findall(r"^\.TP\n\.B ([a-z]+)$", section.group(1), re.M)
if sorted(listed) != sorted(verbs) or len(set(listed)) != len(listed):
    sys.exit("deploy_check: steward.1's OPERATOR VERBS list %s; the verb table has %s"
             % (", ".join(listed), ", ".join(verbs)))
print("deploy_check: steward.1 lists the table's %d verbs" % len(verbs))
PY
