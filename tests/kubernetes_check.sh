#!/bin/bash
# kubernetes_check.sh SOURCE_DIR STEWARD - deploy/kubernetes, judged offline:
# the base and every overlay rendered by `kubectl kustomize`, each object
# validated against the Kubernetes API schemas and the Prometheus
# Operator's (tests/kubernetes/validate.js, with the validator npm installed
# from tests/kubernetes/package-lock.json: scripts/test's install_deps), the
# cross-object rules validate.js lists, the PrometheusRule up to date with
# deploy/prometheus/steward-rules.yml, and the definitions each ConfigMap
# carries accepted by `steward check`.
#
# Fails, never skips, when the validator or kubectl is missing.
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
command -v kubectl >/dev/null || fail "kubectl is needed to render the overlays (kubectl kustomize, kustomize v4 or newer)"
kustomize=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\{0,1\}\([0-9]*\).*/\1/p')
[[ -n $kustomize && $kustomize -ge 4 ]] ||
    fail "kubectl's kustomize is v${kustomize:-?}: the overlays need v4 or newer ($(kubectl version --client 2>&1 | tr '\n' ' '))"

"$src/scripts/kubernetes-rules" --check
# The base's definition is the example, as it is.
cmp "$src/deploy/kubernetes/base/definitions/order_fulfilment.json" \
    "$src/definitions/examples/order_fulfilment.json" ||
    fail "deploy/kubernetes/base/definitions/order_fulfilment.json differs from definitions/examples/"

work=$(mktemp -d "${TMPDIR:-/tmp}/kubernetes_check.XXXXXX")
trap 'rm -rf "$work"' EXIT
k8s=$src/deploy/kubernetes
dirs=(base)
for d in "$k8s"/overlays/*/; do
    dirs+=("overlays/$(basename "$d")")
done
((${#dirs[@]} >= 3)) || fail "expected the base and at least two overlays, found ${dirs[*]}"
for d in "${dirs[@]}"; do
    out=$work/${d//\//_}
    kubectl kustomize "$k8s/$d" >"$out.yaml" 2>"$out.err" || {
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
