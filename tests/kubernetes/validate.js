// validate.js --rules RULES_YML --extract DIR RENDERED_YAML - the objects
// `kubectl kustomize` rendered from deploy/kubernetes, judged offline:
//
// 1. each against its Kubernetes API schema (kubernetes-models: the
//    OpenAPI schemas of Kubernetes 1.27 compiled into validators; the
//    Prometheus Operator's ServiceMonitor and PrometheusRule from
//    @kubernetes-models/prometheus-operator). A kind without a schema fails.
// 2. what no schema says but the API server or Steward would refuse: the
//    selectors select the replicas' pods (and not the migration Job's), the
//    ports and probes name the container's port, the ConfigMaps referred to
//    exist, every Secret reference is to the Secret `steward` with a key
//    deploy/README.md lists, the replicas run as the runtime role with
//    --no-migrate and the Job `steward migrate` as the owner, the
//    PrometheusRule holds deploy/prometheus/steward-rules.yml's groups as
//    they are, steward.json's paths are where the volumes are mounted.
//
// The ConfigMaps' files are written under DIR/NAME/KEY, for `steward check`.
// Prints one line per object; exits 1 on the first problem of each, after
// all of them are judged.
"use strict";
const fs = require("fs");
const path = require("path");
const YAML = require("yaml");

const args = process.argv.slice(2);
let rulesPath = null;
let extractDir = null;
const files = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === "--rules") rulesPath = args[++i];
    else if (args[i] === "--extract") extractDir = args[++i];
    else files.push(args[i]);
}
if (files.length !== 1 || !rulesPath || !extractDir) {
    console.error("usage: validate.js --rules RULES_YML --extract DIR RENDERED_YAML");
    process.exit(2);
}
const source = files[0];

const SECRET = "steward";
const SECRET_KEYS = ["database-url", "owner-database-url", "tokens", "scrape-token"];
const problems = [];
function problem(obj, text) {
    problems.push(`${source}: ${obj ? `${obj.kind} ${obj.metadata && obj.metadata.name}: ` : ""}${text}`);
}

// The model class of an apiVersion and kind, or null.
function modelOf(apiVersion, kind) {
    const slash = apiVersion.indexOf("/");
    const group = slash < 0 ? "" : apiVersion.slice(0, slash);
    const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
    const candidates =
        group === "monitoring.coreos.com"
            ? [`@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`]
            : [`kubernetes-models/${group ? `${group}/` : ""}${version}/${kind}`];
    for (const c of candidates) {
        try {
            const mod = require(c);
            if (mod[kind]) return mod[kind];
        } catch (e) {
            if (e.code !== "MODULE_NOT_FOUND") throw e;
        }
    }
    return null;
}

const docs = YAML.parseAllDocuments(fs.readFileSync(source, "utf8"));
const objects = [];
for (const doc of docs) {
    if (doc.errors.length) {
        problem(null, `YAML: ${doc.errors.map((e) => e.message).join("; ")}`);
        continue;
    }
    const obj = doc.toJS();
    if (obj === null) continue;
    objects.push(obj);
    const Model = modelOf(obj.apiVersion || "", obj.kind || "");
    if (!Model) {
        problem(obj, `no schema for ${obj.apiVersion} ${obj.kind}`);
        continue;
    }
    try {
        new Model(obj).validate();
        console.log(`valid: ${obj.apiVersion} ${obj.kind} ${obj.metadata.name}`);
    } catch (e) {
        problem(obj, `${obj.apiVersion} ${obj.kind} against its schema: ${e.message}`);
    }
}

const byKind = (kind) => objects.filter((o) => o.kind === kind);
const one = (kind) => {
    const all = byKind(kind);
    if (all.length !== 1) problem(null, `${all.length} ${kind} objects, not one`);
    return all[0];
};
const selects = (selector, labels) =>
    !!selector && Object.keys(selector).length > 0 &&
    Object.entries(selector).every(([k, v]) => labels && labels[k] === v);

const deployment = one("Deployment");
const job = one("Job");
const service = one("Service");
const pdb = one("PodDisruptionBudget");
const monitor = one("ServiceMonitor");
const rule = one("PrometheusRule");
const configMaps = byKind("ConfigMap");

function podSpec(w) {
    return (w && w.spec && w.spec.template && w.spec.template.spec) || {};
}
function podLabels(w) {
    return (w && w.spec && w.spec.template && w.spec.template.metadata && w.spec.template.metadata.labels) || {};
}
function container(w, name) {
    return (podSpec(w).containers || []).find((c) => c.name === name);
}
function envFrom(c, name) {
    const e = ((c && c.env) || []).find((v) => v.name === name);
    return e && e.valueFrom && e.valueFrom.secretKeyRef;
}

// Every Secret and ConfigMap a pod refers to.
for (const w of [deployment, job].filter(Boolean)) {
    const spec = podSpec(w);
    for (const c of [...(spec.initContainers || []), ...(spec.containers || [])]) {
        for (const e of c.env || []) {
            const ref = e.valueFrom && e.valueFrom.secretKeyRef;
            if (ref && (ref.name !== SECRET || !SECRET_KEYS.includes(ref.key)))
                problem(w, `${c.name}: env ${e.name} from Secret ${ref.name} key ${ref.key}: not one of ${SECRET}'s keys (${SECRET_KEYS.join(", ")})`);
        }
        for (const m of c.volumeMounts || []) {
            if (!(spec.volumes || []).some((v) => v.name === m.name))
                problem(w, `${c.name} mounts ${m.name}, which is no volume`);
        }
    }
    for (const v of spec.volumes || []) {
        if (v.configMap && !configMaps.some((cm) => cm.metadata.name === v.configMap.name))
            problem(w, `volume ${v.name}: no ConfigMap ${v.configMap.name}`);
        if (v.secret) {
            if (v.secret.secretName !== SECRET) problem(w, `volume ${v.name}: Secret ${v.secret.secretName}, not ${SECRET}`);
            for (const item of v.secret.items || [])
                if (!SECRET_KEYS.includes(item.key)) problem(w, `volume ${v.name}: key ${item.key} is not one of ${SECRET}'s`);
        }
    }
}

if (deployment) {
    const labels = podLabels(deployment);
    if (!selects(deployment.spec.selector.matchLabels, labels))
        problem(deployment, "its selector does not select its own pods");
    if (job && selects(deployment.spec.selector.matchLabels, podLabels(job)))
        problem(deployment, "its selector also selects the migration Job's pod");
    const c = container(deployment, "steward");
    if (!c) problem(deployment, "no container steward");
    else {
        const port = (c.ports || []).find((p) => p.name === "http");
        if (!port || port.containerPort !== 9464) problem(deployment, "no port http (9464)");
        const probe = (p, pathWanted) =>
            p && p.httpGet && p.httpGet.path === pathWanted && p.httpGet.port === "http";
        if (!probe(c.livenessProbe, "/healthz")) problem(deployment, "liveness is not GET /healthz on http");
        if (!probe(c.readinessProbe, "/readyz")) problem(deployment, "readiness is not GET /readyz on http");
        const r = c.resources || {};
        if (!r.requests || !r.requests.cpu || !r.requests.memory || !r.limits || !r.limits.memory)
            problem(deployment, "resources: cpu and memory requests and a memory limit are needed");
        if (!(c.args || []).includes("--no-migrate")) problem(deployment, "the replicas may migrate (no --no-migrate)");
        if (c.command) problem(deployment, "the container overrides the image's entry point (steward run)");
        const db = envFrom(c, "STEWARD_DATABASE_URL");
        if (!db || db.key !== "database-url") problem(deployment, "STEWARD_DATABASE_URL is not the Secret's database-url (the runtime role)");
    }
    const init = (podSpec(deployment).initContainers || [])[0];
    if (!init || !(init.command || []).join(" ").includes("steward migrate --status"))
        problem(deployment, "no init container waiting for the schema (steward migrate --status)");
    else if ((envFrom(init, "STEWARD_DATABASE_URL") || {}).key !== "database-url")
        problem(deployment, "the init container does not log in as the runtime role");
    const sc = podSpec(deployment).securityContext || {};
    if (sc.runAsNonRoot !== true) problem(deployment, "runAsNonRoot is not set");
    const grace = podSpec(deployment).terminationGracePeriodSeconds;
    if (!(grace >= 30)) problem(deployment, `terminationGracePeriodSeconds ${grace}: a stop needs up to 30 s`);
    if (service && !selects(service.spec.selector, labels)) problem(service, "its selector does not select the replicas");
    if (service && job && selects(service.spec.selector, podLabels(job))) problem(service, "it selects the migration Job's pod");
    for (const p of (service && service.spec.ports) || [])
        if (typeof p.targetPort === "string" && !((c && c.ports) || []).some((cp) => cp.name === p.targetPort))
            problem(service, `port ${p.name}: target ${p.targetPort} is no container port`);
    if (pdb && !selects(pdb.spec.selector.matchLabels, labels)) problem(pdb, "its selector does not select the replicas");
    if (pdb && pdb.spec.maxUnavailable === undefined && pdb.spec.minAvailable === undefined)
        problem(pdb, "neither maxUnavailable nor minAvailable");
}

if (job) {
    const c = (podSpec(job).containers || [])[0] || {};
    if ((c.command || []).join(" ") !== "steward migrate") problem(job, `runs ${(c.command || []).join(" ")}, not steward migrate`);
    if ((envFrom(c, "STEWARD_DATABASE_URL") || {}).key !== "owner-database-url")
        problem(job, "STEWARD_DATABASE_URL is not the Secret's owner-database-url (the owner role)");
    if (!["OnFailure", "Never"].includes(podSpec(job).restartPolicy)) problem(job, "restartPolicy must be OnFailure or Never");
    if ((podSpec(job).securityContext || {}).runAsNonRoot !== true) problem(job, "runAsNonRoot is not set");
}

if (monitor && service) {
    if (!selects(monitor.spec.selector.matchLabels, service.metadata.labels))
        problem(monitor, "its selector does not select the Service");
    for (const e of monitor.spec.endpoints || []) {
        if (!(service.spec.ports || []).some((p) => p.name === e.port)) problem(monitor, `endpoint port ${e.port} is no Service port`);
        const cred = e.authorization && e.authorization.credentials;
        if (!cred || cred.name !== SECRET || cred.key !== "scrape-token")
            problem(monitor, "the scrape does not send the Secret's scrape-token (the API needs a token off loopback)");
    }
    // The rules' StewardDown asks for up{job="steward"}.
    if (!monitor.spec.jobLabel || service.metadata.labels[monitor.spec.jobLabel] !== "steward")
        problem(monitor, `jobLabel ${monitor.spec.jobLabel} does not make job="steward"`);
}

// JSON with every object's keys sorted: kustomize sorts them.
function canonical(v) {
    if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
    if (v && typeof v === "object")
        return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
    return JSON.stringify(v);
}
if (rule) {
    const rules = YAML.parse(fs.readFileSync(rulesPath, "utf8"));
    if (canonical(rule.spec) !== canonical({ groups: rules.groups }))
        problem(rule, `its groups differ from ${rulesPath} (run scripts/kubernetes-rules)`);
}

// steward.json: the paths it names are where the pods mount them.
const configMap = configMaps.find((cm) => cm.metadata.name.startsWith("steward-config"));
if (!configMap || !configMap.data || !configMap.data["steward.json"]) problem(null, "no ConfigMap steward-config with steward.json");
else if (deployment) {
    let cfg = null;
    try {
        cfg = JSON.parse(configMap.data["steward.json"]);
    } catch (e) {
        problem(configMap, `steward.json: ${e.message}`);
    }
    const c = container(deployment, "steward") || {};
    const mountOf = (volume) => ((c.volumeMounts || []).find((m) => m.name === volume) || {}).mountPath;
    const configEnv = (c.env || []).find((e) => e.name === "STEWARD_CONFIG");
    if (!configEnv || configEnv.value !== `${mountOf("config")}/steward.json`)
        problem(deployment, "STEWARD_CONFIG does not name the mounted steward.json");
    if (cfg) {
        if (cfg.definitions !== mountOf("definitions")) problem(configMap, `definitions ${cfg.definitions} is not where the definitions are mounted`);
        const http = cfg.http || {};
        if (!http.listen || !/^(0\.0\.0\.0)?:9464$/.test(http.listen)) problem(configMap, `http.listen ${http.listen}: the probes need 0.0.0.0:9464`);
        if (http.tokens_file !== `${mountOf("secrets")}/tokens`) problem(configMap, `http.tokens_file ${http.tokens_file} is not the mounted tokens`);
        if (cfg.database || cfg.database_file) problem(configMap, "the database comes from the Secret, by STEWARD_DATABASE_URL, not steward.json");
        if (!cfg.brokers) problem(configMap, "no brokers");
    }
}

fs.mkdirSync(extractDir, { recursive: true });
for (const cm of configMaps) {
    const dir = path.join(extractDir, cm.metadata.name);
    fs.mkdirSync(dir, { recursive: true });
    for (const [key, value] of Object.entries(cm.data || {})) fs.writeFileSync(path.join(dir, key), value);
}

for (const p of problems) console.error(p);
console.log(`${source}: ${objects.length} objects, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
