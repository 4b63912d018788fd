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
#     which `steward --help` prints under "operator verbs:";
#   - every option each command's -h lists is in the man page;
#   - docs/quickstart.md installs the packages scripts/lib/deps.sh builds with.
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

# Each command's options, as its -h lists them, are in the man page: in the
# command's own entry, under COMMON OPTIONS, or (for an operator verb) in
# the OPERATOR VERBS preamble (--reason, --actor).
def plain(t):
    return re.sub(r"\\f[BIRP]", "", t).replace("\\-", "-")
def section_text(name):
    m = re.search(r"^\.SH %s\n(.*?)(?=^\.SH |\Z)" % name, man, re.M | re.S)
    return plain(m.group(1)) if m else ""
common = section_text("COMMON OPTIONS")
preamble = section_text("OPERATOR VERBS").split("\n.TP\n", 1)[0]
def has(text, opt):
    return re.search(re.escape(opt) + r"(?![a-z-])", text) is not None
lagging, n = [], 0
for c in dict.fromkeys(cmds + verbs):  # cmds holds the verbs too
    h = subprocess.run([steward, c, "-h"], capture_output=True, text=True)
    if h.returncode != 0 or not h.stdout.startswith("usage: steward " + c):
        sys.exit("deploy_check: steward %s -h: exit %d, no usage" % (c, h.returncode))
    entry = re.search(r"^\.TP\n\.B %s\n(.*?)(?=^\.(?:TP|PP|SH)\b)" % c, man, re.M | re.S)
    if entry is None:
        sys.exit("deploy_check: steward.1 has no entry for " + c)
    entry = plain(entry.group(1))
    for o in re.findall(r"^  (?:-[a-zA-Z], )?(--[a-z][a-z-]*)", h.stdout, re.M):
        n += 1
        if not (has(entry, o) or has(common, o) or (c in verbs and has(preamble, o))):
            lagging.append("%s %s" % (c, o))
if lagging:
    sys.exit("deploy_check: steward.1 lacks options their -h lists: " + ", ".join(lagging))
print("deploy_check: steward.1 holds the %d options the commands' -h list" % n)

# docs/quickstart.md's package list is the build's (scripts/lib/deps.sh).
deps = open(src + "/scripts/lib/deps.sh").read()
m = re.search(r"^STEWARD_BUILD_PACKAGES=\((.*?)\)", deps, re.M | re.S)
build = m.group(1).split()
quick = open(src + "/docs/quickstart.md").read()
m = re.search(r"sudo apt-get install -y ((?:.*\\\n)*.*)", quick)
qpkgs = m.group(1).replace("\\\n", " ").split()
m = re.search(r"^\| Debian packages to build \| `([^`]*)`", quick, re.M)
tpkgs = m.group(1).split() if m else []
for what, got in (("build block", qpkgs), ("table", tpkgs)):
    if sorted(got) != sorted(build):
        sys.exit("deploy_check: docs/quickstart.md's %s installs %s; scripts/lib/deps.sh builds with %s"
                 % (what, " ".join(got), " ".join(build)))
print("deploy_check: the quick start installs the %d build packages" % len(build))
PY
