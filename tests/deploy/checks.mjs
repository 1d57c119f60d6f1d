// What deploy/kubernetes must hold beyond the schema (issue 22, docs/cluster.md):
// each check takes the rendered objects of one kustomization and returns a list of problems
// (empty: it holds). validate.mjs runs them on every rendering, and also on broken copies to
// prove that each one can fail.

import { validateObject } from "./schema.mjs";

export const NAMESPACE = "space";
const CLUSTER_SCOPED = new Set(["Namespace"]);

// ---- lookups -------------------------------------------------------------------------------

export function find(objs, kind, name) {
  return objs.find((o) => o.kind === kind && o.metadata?.name === name);
}

function byKind(objs, kind) {
  return objs.filter((o) => o.kind === kind);
}

function podSpecOf(workload) {
  return workload?.spec?.template?.spec;
}

function labelsMatch(selector, labels) {
  return Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
}

// The keys a Secret or ConfigMap holds.
function keysOf(obj) {
  return new Set([
    ...Object.keys(obj?.data ?? {}),
    ...Object.keys(obj?.stringData ?? {}),
    ...Object.keys(obj?.binaryData ?? {}),
  ]);
}

// The content of key in a ConfigMap or Secret, as text.
export function contentOf(obj, key) {
  if (obj?.stringData?.[key] !== undefined) return obj.stringData[key];
  if (obj?.kind === "Secret" && obj?.data?.[key] !== undefined) {
    return Buffer.from(obj.data[key], "base64").toString("utf8");
  }
  return obj?.data?.[key];
}

// The Secrets/ConfigMaps a volume takes its files from: [{kind, name, items}].
function sourcesOfVolume(vol) {
  const out = [];
  if (vol.secret)
    out.push({ kind: "Secret", name: vol.secret.secretName, items: vol.secret.items });
  if (vol.configMap)
    out.push({ kind: "ConfigMap", name: vol.configMap.name, items: vol.configMap.items });
  for (const s of vol.projected?.sources ?? []) {
    if (s.secret) out.push({ kind: "Secret", name: s.secret.name, items: s.secret.items });
    if (s.configMap)
      out.push({ kind: "ConfigMap", name: s.configMap.name, items: s.configMap.items });
  }
  return out;
}

// Which rendered object and key serve the file `path` in `container` of `pod`: null, or
// {volume, object, key}. Follows mountPath (+ subPath) and the volume's items.
function fileSource(objs, pod, container, path) {
  const mounts = [...(container.volumeMounts ?? [])].sort(
    (a, b) => b.mountPath.length - a.mountPath.length,
  );
  for (const m of mounts) {
    let rel;
    if (m.subPath !== undefined) {
      if (path !== m.mountPath) continue;
      rel = m.subPath;
    } else if (path.startsWith(m.mountPath.replace(/\/$/, "") + "/")) {
      rel = path.slice(m.mountPath.replace(/\/$/, "").length + 1);
    } else {
      continue;
    }
    const vol = (pod.volumes ?? []).find((v) => v.name === m.name);
    if (!vol) return null;
    for (const src of sourcesOfVolume(vol)) {
      const obj = find(objs, src.kind, src.name);
      if (!obj) continue;
      const item = src.items?.find((i) => i.path === rel);
      const key = src.items ? item?.key : rel;
      if (key !== undefined && keysOf(obj).has(key)) return { volume: vol, object: obj, key };
    }
    return null;
  }
  return null;
}

function portOf(listen) {
  const m = /:(\d+)$/.exec(listen ?? "");
  return m ? Number(m[1]) : NaN;
}

function parseJson(text, what, problems) {
  try {
    return JSON.parse(text);
  } catch (e) {
    problems.push(`${what}: not JSON (${e.message})`);
    return null;
  }
}

// The object as the API server decodes it: kustomize wraps the base64 of a Secret's data at
// 76 columns, and Go's base64 decoder skips the newlines, which the schema's "byte" format
// does not.
function apiServerView(o) {
  if (o?.kind !== "Secret" || !o.data || typeof o.data !== "object") return o;
  const data = Object.fromEntries(
    Object.entries(o.data).map(([k, v]) => [
      k,
      typeof v === "string" ? v.replace(/[\r\n]/g, "") : v,
    ]),
  );
  return { ...o, data };
}

// ---- the checks ----------------------------------------------------------------------------

// Every object valid against the Kubernetes schema, named, in the namespace, and unique.
export function checkSchema(objs) {
  const problems = [];
  const ids = new Set();
  for (const o of objs) {
    const id = `${o?.kind}/${o?.metadata?.name}`;
    for (const p of validateObject(apiServerView(o))) problems.push(`${id}: ${p}`);
    if (!o?.metadata?.name) problems.push(`${id}: no metadata.name`);
    if (CLUSTER_SCOPED.has(o?.kind)) {
      if (o.metadata?.namespace !== undefined)
        problems.push(`${id}: cluster-scoped, has a namespace`);
    } else if (o?.metadata?.namespace !== NAMESPACE) {
      problems.push(`${id}: namespace ${o?.metadata?.namespace}, want ${NAMESPACE}`);
    }
    if (ids.has(id)) problems.push(`${id}: twice`);
    ids.add(id);
  }
  if (!find(objs, "Namespace", NAMESPACE)) problems.push(`no Namespace ${NAMESPACE}`);
  return problems;
}

// Every Secret, ConfigMap and ServiceAccount a pod refers to is in the rendered output, with
// the keys it asks for.
export function checkReferences(objs) {
  const problems = [];
  for (const w of [...byKind(objs, "DaemonSet"), ...byKind(objs, "Deployment")]) {
    const id = `${w.kind}/${w.metadata.name}`;
    const pod = podSpecOf(w) ?? {};
    if (pod.serviceAccountName && !find(objs, "ServiceAccount", pod.serviceAccountName)) {
      problems.push(`${id}: ServiceAccount ${pod.serviceAccountName} missing`);
    }
    for (const vol of pod.volumes ?? []) {
      for (const src of sourcesOfVolume(vol)) {
        const obj = find(objs, src.kind, src.name);
        if (!obj) {
          problems.push(`${id}: volume ${vol.name}: ${src.kind} ${src.name} missing`);
          continue;
        }
        for (const item of src.items ?? []) {
          if (!keysOf(obj).has(item.key)) {
            problems.push(
              `${id}: volume ${vol.name}: ${src.kind} ${src.name} has no key ${item.key}`,
            );
          }
        }
      }
    }
    for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
      for (const m of c.volumeMounts ?? []) {
        const vol = (pod.volumes ?? []).find((v) => v.name === m.name);
        if (!vol) {
          problems.push(`${id}: ${c.name} mounts volume ${m.name}, which the pod does not have`);
        } else if (
          m.subPath !== undefined &&
          sourcesOfVolume(vol).length > 0 &&
          !fileSource(objs, pod, c, m.mountPath)
        ) {
          problems.push(`${id}: ${c.name}: no key ${m.subPath} behind ${m.mountPath}`);
        }
      }
      for (const e of c.env ?? []) {
        const ref = e.valueFrom?.secretKeyRef ?? e.valueFrom?.configMapKeyRef;
        const kind = e.valueFrom?.secretKeyRef ? "Secret" : "ConfigMap";
        if (ref && !ref.optional && !keysOf(find(objs, kind, ref.name)).has(ref.key)) {
          problems.push(`${id}: env ${e.name}: ${kind} ${ref.name} key ${ref.key} missing`);
        }
      }
      for (const e of c.envFrom ?? []) {
        const ref = e.secretRef ?? e.configMapRef;
        const kind = e.secretRef ? "Secret" : "ConfigMap";
        if (ref && !ref.optional && !find(objs, kind, ref.name)) {
          problems.push(`${id}: envFrom: ${kind} ${ref.name} missing`);
        }
      }
    }
  }
  for (const rb of byKind(objs, "RoleBinding")) {
    if (!find(objs, rb.roleRef.kind, rb.roleRef.name)) {
      problems.push(
        `RoleBinding/${rb.metadata.name}: ${rb.roleRef.kind} ${rb.roleRef.name} missing`,
      );
    }
    for (const s of rb.subjects ?? []) {
      if (s.kind === "ServiceAccount" && !find(objs, "ServiceAccount", s.name)) {
        problems.push(`RoleBinding/${rb.metadata.name}: ServiceAccount ${s.name} missing`);
      }
    }
  }
  return problems;
}

// spaced: privileged, on KVM nodes, with /dev/kvm, its state and socket directories from the
// host, its identity from the downward API, and a drain before it stops.
export function checkNode(objs) {
  const problems = [];
  const ds = find(objs, "DaemonSet", "space-node");
  if (!ds) return ["no DaemonSet space-node"];
  const pod = podSpecOf(ds) ?? {};
  const c = (pod.containers ?? []).find((x) => x.name === "spaced");
  if (!c) return ["DaemonSet space-node: no container spaced"];
  const want = (cond, msg) => {
    if (!cond) problems.push(`DaemonSet space-node: ${msg}`);
  };

  want(c.securityContext?.privileged === true, "container not privileged");
  want(pod.hostPID !== true, "hostPID");
  want(pod.hostNetwork !== true, "hostNetwork");
  want(pod.nodeSelector?.["space.dev/kvm"] === "true", 'no nodeSelector space.dev/kvm: "true"');
  want(
    (pod.tolerations ?? []).some(
      (t) => t.key === "space.dev/dedicated" && (t.operator === "Exists" || t.operator === "Equal"),
    ),
    "no toleration of the space.dev/dedicated taint",
  );

  const hostPathAt = (mountPath) => {
    const m = (c.volumeMounts ?? []).find((x) => x.mountPath === mountPath);
    return m && (pod.volumes ?? []).find((v) => v.name === m.name)?.hostPath;
  };
  const kvm = hostPathAt("/dev/kvm");
  want(
    kvm?.path === "/dev/kvm" && kvm?.type === "CharDevice",
    "/dev/kvm is not the host's /dev/kvm (hostPath, type CharDevice)",
  );
  const state = hostPathAt("/var/lib/space");
  want(
    state?.path === "/var/lib/space" && state?.type === "DirectoryOrCreate",
    "/var/lib/space is not a hostPath DirectoryOrCreate",
  );
  want(hostPathAt("/run/space")?.path === "/run/space", "/run/space is not a hostPath");
  // The cgroup2 filesystem is the container's own (privileged: writable, in its cgroup
  // namespace); the host's in its place would put sandboxes outside the pod (node-daemonset.yaml).
  want(
    !(pod.volumes ?? []).some((v) => v.hostPath?.path?.startsWith("/sys/fs/cgroup")),
    "mounts the host's /sys/fs/cgroup",
  );

  const env = Object.fromEntries(
    (c.env ?? []).map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath]),
  );
  want(env.SPACE_NODE_NAME === "spec.nodeName", "SPACE_NODE_NAME is not spec.nodeName");
  want(env.SPACE_NODE_IP === "status.podIP", "SPACE_NODE_IP is not status.podIP");
  const argv = [...(c.command ?? []), ...(c.args ?? [])].join(" ");
  want(argv.startsWith("spaced --config /etc/space/spaced.json"), `command is "${argv}"`);
  want(argv.includes("--node-name=$(SPACE_NODE_NAME)"), "no --node-name=$(SPACE_NODE_NAME)");
  want(
    argv.includes("--node-url=https://$(SPACE_NODE_IP):7443"),
    "no --node-url=https://$(SPACE_NODE_IP):7443",
  );
  want(
    (c.ports ?? []).some((p) => p.name === "api" && p.containerPort === 7443),
    "no containerPort 7443 named api",
  );

  const health = ["spaced", "health"].join(" ");
  for (const probe of ["readinessProbe", "livenessProbe"]) {
    want(c[probe]?.exec?.command?.join(" ") === health, `${probe} is not exec "${health}"`);
  }
  want(
    c.lifecycle?.preStop?.exec?.command?.join(" ") === "spaced drain",
    'no preStop exec "spaced drain"',
  );
  want((pod.terminationGracePeriodSeconds ?? 30) >= 600, "terminationGracePeriodSeconds < 600");
  want(
    ds.spec.updateStrategy?.type === "RollingUpdate" &&
      ds.spec.updateStrategy?.rollingUpdate?.maxUnavailable === 1,
    "updateStrategy is not RollingUpdate with maxUnavailable 1",
  );
  want(c.resources?.requests?.cpu && c.resources?.requests?.memory, "no cpu and memory requests");

  const sa = find(objs, "ServiceAccount", pod.serviceAccountName);
  want(
    pod.serviceAccountName === "space-node" &&
      sa?.automountServiceAccountToken === false &&
      pod.automountServiceAccountToken !== true,
    "not ServiceAccount space-node without an API token",
  );

  // spaced refuses a private key that group or others may read (src/tls/x509.cc).
  for (const v of pod.volumes ?? []) {
    const mode = v.secret?.defaultMode ?? v.projected?.defaultMode;
    if ((v.secret || v.projected) && (mode === undefined || (mode & 0o077) !== 0)) {
      problems.push(
        `DaemonSet space-node: volume ${v.name}: secret files mode ${mode?.toString(8)}, ` +
          "want 0400 or 0600",
      );
    }
  }

  // spaced.json (docs/configuration.md, docs/cluster.md): every file it names comes
  // from a rendered Secret, its listener is the api port, its directories the host's.
  const cfgSrc = fileSource(objs, pod, c, "/etc/space/spaced.json");
  if (!cfgSrc) return [...problems, "DaemonSet space-node: nothing serves /etc/space/spaced.json"];
  const cfg = parseJson(contentOf(cfgSrc.object, cfgSrc.key), "spaced.json", problems);
  if (!cfg) return problems;
  want(cfg.state_dir === "/var/lib/space", "spaced.json state_dir is not /var/lib/space");
  want(cfg.socket === "/run/space/space.sock", "spaced.json socket is not /run/space/space.sock");
  want(
    portOf(cfg.api_listen) === 7443 && cfg.api_listen.startsWith("0.0.0.0:"),
    "spaced.json api_listen is not 0.0.0.0:7443",
  );
  want(
    typeof cfg.api_tls === "object" && cfg.api_tls.client_ca,
    "spaced.json api_tls has no client_ca",
  );
  want(cfg.cluster?.push_snapshots === true, "spaced.json cluster.push_snapshots is not true");
  want(
    /^(s3|file):\/\//.test(cfg.cluster?.store ?? ""),
    "spaced.json cluster.store is no s3:// or file:// URL",
  );
  for (const [what, path] of [
    ["api_tls.cert", cfg.api_tls?.cert],
    ["api_tls.key", cfg.api_tls?.key],
    ["api_tls.client_ca", cfg.api_tls?.client_ca],
    ["cluster.snapshot_key_file", cfg.cluster?.snapshot_key_file],
    ["cluster.store_credentials_file", cfg.cluster?.store_credentials_file],
  ]) {
    const src = typeof path === "string" && fileSource(objs, pod, c, path);
    want(
      src && src.object.kind === "Secret",
      `spaced.json ${what} (${path}) is in no mounted Secret`,
    );
  }
  return problems;
}

// The headless Service the gateway discovers nodes through.
export function checkNodeService(objs) {
  const problems = [];
  const svc = find(objs, "Service", "space-nodes");
  const ds = find(objs, "DaemonSet", "space-node");
  if (!svc) return ["no Service space-nodes"];
  const want = (cond, msg) => {
    if (!cond) problems.push(`Service space-nodes: ${msg}`);
  };
  want(svc.spec.clusterIP === "None", "not headless (clusterIP: None)");
  want(svc.spec.publishNotReadyAddresses !== true, "publishes not-ready addresses");
  want(
    (svc.spec.ports ?? []).some((p) => p.name === "api" && p.port === 7443),
    "no port 7443 named api",
  );
  want(
    ds &&
      Object.keys(svc.spec.selector ?? {}).length > 0 &&
      labelsMatch(svc.spec.selector, ds.spec.template.metadata.labels),
    "selector does not select the space-node pods",
  );
  return problems;
}

// The gateway's permissions: read EndpointSlices in its namespace, nothing else.
export function checkRbac(objs) {
  const problems = [];
  for (const kind of ["ClusterRole", "ClusterRoleBinding"]) {
    for (const o of byKind(objs, kind)) problems.push(`${kind}/${o.metadata.name}: none wanted`);
  }
  const roles = byKind(objs, "Role");
  if (roles.length !== 1 || roles[0].metadata.name !== "space-gateway") {
    problems.push(
      `want exactly one Role, space-gateway; have ${roles.map((r) => r.metadata.name)}`,
    );
  }
  for (const r of roles) {
    const rules = r.rules ?? [];
    const ok =
      rules.length === 1 &&
      JSON.stringify(rules[0].apiGroups) === JSON.stringify(["discovery.k8s.io"]) &&
      JSON.stringify(rules[0].resources) === JSON.stringify(["endpointslices"]) &&
      JSON.stringify([...(rules[0].verbs ?? [])].sort()) ===
        JSON.stringify(["get", "list", "watch"]) &&
      rules[0].resourceNames === undefined &&
      rules[0].nonResourceURLs === undefined;
    if (!ok) {
      const have = JSON.stringify(rules);
      problems.push(`Role/${r.metadata.name}: not get/list/watch on endpointslices only: ${have}`);
    }
  }
  const rb = find(objs, "RoleBinding", "space-gateway");
  const okBinding =
    rb &&
    rb.roleRef.kind === "Role" &&
    rb.roleRef.name === "space-gateway" &&
    rb.subjects?.length === 1 &&
    rb.subjects[0].kind === "ServiceAccount" &&
    rb.subjects[0].name === "space-gateway" &&
    rb.subjects[0].namespace === NAMESPACE;
  if (!okBinding) {
    problems.push("RoleBinding space-gateway: not its Role to its ServiceAccount alone");
  }
  return problems;
}

// Disruption budgets for both sets of pods.
export function checkPdbs(objs) {
  const problems = [];
  const pdbs = byKind(objs, "PodDisruptionBudget");
  const selecting = (workload) =>
    pdbs.filter(
      (p) =>
        workload &&
        labelsMatch(p.spec.selector?.matchLabels, workload.spec.template.metadata.labels) &&
        Object.keys(p.spec.selector?.matchLabels ?? {}).length > 0,
    );
  const gw = selecting(find(objs, "Deployment", "space-gateway"));
  if (!(gw.length === 1 && gw[0].spec.minAvailable === 1)) {
    problems.push("no PodDisruptionBudget with minAvailable 1 for the space-gateway pods");
  }
  const node = selecting(find(objs, "DaemonSet", "space-node"));
  if (!(node.length === 1 && node[0].spec.maxUnavailable === 1)) {
    problems.push("no PodDisruptionBudget with maxUnavailable 1 for the space-node pods");
  }
  return problems;
}

// The gateway: no privilege at all, HTTPS probes, discovery through space-nodes.
export function checkGateway(objs) {
  const problems = [];
  const d = find(objs, "Deployment", "space-gateway");
  if (!d) return ["no Deployment space-gateway"];
  const pod = podSpecOf(d) ?? {};
  const want = (cond, msg) => {
    if (!cond) problems.push(`Deployment space-gateway: ${msg}`);
  };
  want(d.spec.replicas >= 2, "fewer than 2 replicas");
  want(pod.serviceAccountName === "space-gateway", "ServiceAccount is not space-gateway");
  want(
    pod.securityContext?.seccompProfile?.type === "RuntimeDefault",
    "seccomp is not RuntimeDefault",
  );
  want(
    pod.hostPID !== true && pod.hostNetwork !== true && pod.hostIPC !== true,
    "shares a host namespace",
  );
  want(!(pod.volumes ?? []).some((v) => v.hostPath), "has a hostPath volume");
  want(pod.affinity?.podAntiAffinity, "no pod anti-affinity");
  const c = (pod.containers ?? []).find((x) => x.name === "gateway");
  if (!c) return [...problems, "Deployment space-gateway: no container gateway"];
  const sc = { ...pod.securityContext, ...c.securityContext };
  want(sc.runAsNonRoot === true, "runAsNonRoot is not true");
  want(Number.isInteger(sc.runAsUser) && sc.runAsUser !== 0, "runAsUser is root or unset");
  want(
    c.securityContext?.allowPrivilegeEscalation === false,
    "allowPrivilegeEscalation is not false",
  );
  want(c.securityContext?.readOnlyRootFilesystem === true, "root filesystem is writable");
  want(c.securityContext?.privileged !== true, "privileged");
  want(
    (c.securityContext?.capabilities?.drop ?? []).includes("ALL") &&
      (c.securityContext?.capabilities?.add ?? []).length === 0,
    "capabilities not dropped (ALL)",
  );
  const argv = [...(c.command ?? []), ...(c.args ?? [])].join(" ");
  want(argv === "space-gateway --config /etc/space/gateway.json", `command is "${argv}"`);
  want(
    (c.ports ?? []).some((p) => p.name === "https" && p.containerPort === 8443),
    "no containerPort 8443 named https",
  );
  for (const probe of ["readinessProbe", "livenessProbe"]) {
    const g = c[probe]?.httpGet;
    want(
      g?.path === "/v1/health" && g?.port === "https" && g?.scheme === "HTTPS",
      `${probe} is not httpGet /v1/health on https (HTTPS)`,
    );
  }
  const svc = find(objs, "Service", "space-gateway");
  want(
    svc &&
      svc.spec.type !== "LoadBalancer" &&
      labelsMatch(svc.spec.selector, d.spec.template.metadata.labels) &&
      (svc.spec.ports ?? []).some((p) => p.port === 443 && p.targetPort === "https"),
    "no Service space-gateway 443 -> https selecting its pods",
  );

  const cfgSrc = fileSource(objs, pod, c, "/etc/space/gateway.json");
  if (!cfgSrc)
    return [...problems, "Deployment space-gateway: nothing serves /etc/space/gateway.json"];
  const cfg = parseJson(contentOf(cfgSrc.object, cfgSrc.key), "gateway.json", problems);
  if (!cfg) return problems;
  want(portOf(cfg.listen) === 8443, "gateway.json listen is not on 8443");
  const k8s = cfg.discovery?.kubernetes;
  const nodeSvc = find(objs, "Service", k8s?.service);
  want(
    k8s &&
      nodeSvc?.spec?.clusterIP === "None" &&
      k8s.namespace === NAMESPACE &&
      (nodeSvc.spec.ports ?? []).some((p) => p.name === k8s.port_name),
    "gateway.json discovery.kubernetes does not name the headless Service and its port",
  );
  for (const [what, path] of [
    ["tls.cert", cfg.tls?.cert],
    ["tls.key", cfg.tls?.key],
    ["node_tls.cert", cfg.node_tls?.cert],
    ["node_tls.key", cfg.node_tls?.key],
    ["node_tls.ca", cfg.node_tls?.ca],
    ["tokens_file", cfg.tokens_file],
    ["store_credentials_file", cfg.store_credentials_file],
  ]) {
    const src = typeof path === "string" && fileSource(objs, pod, c, path);
    want(
      src && src.object.kind === "Secret",
      `gateway.json ${what} (${path}) is in no mounted Secret`,
    );
  }
  // The same store as the nodes, and never the nodes' sealing key.
  const ds = find(objs, "DaemonSet", "space-node");
  const dsc = podSpecOf(ds)?.containers?.find((x) => x.name === "spaced");
  const nodeSrc = dsc && fileSource(objs, podSpecOf(ds), dsc, "/etc/space/spaced.json");
  const nodeCfg =
    nodeSrc && parseJson(contentOf(nodeSrc.object, nodeSrc.key), "spaced.json", problems);
  want(
    nodeCfg && nodeCfg.cluster?.store === cfg.store,
    "gateway.json store differs from the nodes'",
  );
  want(
    !(pod.volumes ?? []).some((v) =>
      sourcesOfVolume(v).some((s) => s.name === "space-snapshot-key"),
    ),
    "mounts the snapshot sealing key",
  );
  return problems;
}

// Secrets: the base holds only REPLACE_ME templates; an overlay real PEM files and a 32-byte
// sealing key.
export function checkSecrets(objs, { templates }) {
  const problems = [];
  for (const s of byKind(objs, "Secret")) {
    for (const key of keysOf(s)) {
      const text = contentOf(s, key);
      const id = `Secret/${s.metadata.name} ${key}`;
      if (templates) {
        if (text !== "REPLACE_ME") problems.push(`${id}: a template must hold REPLACE_ME`);
      } else if (/\.(pem|key)$/.test(key) && key !== "snapshot.key") {
        if (!/^-----BEGIN [A-Z ]+-----\n/.test(text)) problems.push(`${id}: not PEM`);
      } else if (key === "snapshot.key") {
        if (Buffer.from(s.data?.[key] ?? "", "base64").length !== 32)
          problems.push(`${id}: not 32 bytes`);
      }
    }
  }
  return problems;
}

export const ALL_CHECKS = {
  checkSchema,
  checkReferences,
  checkNode,
  checkNodeService,
  checkRbac,
  checkPdbs,
  checkGateway,
};
