// Strict validation of one Kubernetes object against the API's OpenAPI schema, offline.
//
// kubernetes-models ships, for every apiVersion/kind, a validator compiled from the Kubernetes
// OpenAPI schema (types, enums, formats, required fields). Those validators do not reject
// fields the schema does not define, which is how a misspelled key would slip through (the API
// server drops or refuses it later). So the object is handed to the validator behind a Proxy
// that records which keys the validator read: a compiled schema reads every property it
// defines (and every key of a map), so a key of the object that was never read is a key the
// schema does not have — reported as an unknown field, as `kubectl apply --validate=strict`
// would.

import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

// The model class of apiVersion/kind, or an Error saying why there is none.
function modelOf(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") {
    return new Error("apiVersion and kind must be strings");
  }
  let mod;
  try {
    mod = require(`kubernetes-models/${apiVersion}`);
  } catch {
    return new Error(`unknown apiVersion ${apiVersion}`);
  }
  const Model = mod[kind];
  if (typeof Model !== "function" || Model.apiVersion !== apiVersion || Model.kind !== kind) {
    return new Error(`unknown kind ${kind} in ${apiVersion}`);
  }
  return Model;
}

// Returns a list of problems (empty: valid). Never throws for bad input.
export function validateObject(obj) {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return ["not an object"];
  const Model = modelOf(obj.apiVersion, obj.kind);
  if (Model instanceof Error) return [Model.message];

  const read = new WeakMap(); // object -> keys the validator read
  const proxies = new WeakMap();
  const wrap = (value) => {
    if (value === null || typeof value !== "object") return value;
    let p = proxies.get(value);
    if (p) return p;
    if (!Array.isArray(value)) read.set(value, new Set());
    p = new Proxy(value, {
      get(target, key, receiver) {
        if (!Array.isArray(target) && typeof key === "string") read.get(target).add(key);
        return wrap(Reflect.get(target, key, receiver));
      },
    });
    proxies.set(value, p);
    return p;
  };

  const problems = [];
  try {
    Model.prototype.validate.call(wrap(obj));
  } catch (e) {
    problems.push(e.message);
  }
  const walk = (value, path) => {
    if (value === null || typeof value !== "object") return;
    if (Array.isArray(value)) {
      value.forEach((v, i) => walk(v, `${path}[${i}]`));
      return;
    }
    const seen = read.get(value);
    for (const key of Object.keys(value)) {
      if (seen && seen.has(key)) walk(value[key], `${path}.${key}`);
      else problems.push(`unknown field ${path}.${key}`);
    }
  };
  // Only when the schema checks passed: a validator that stopped early read less.
  if (problems.length === 0) walk(obj, "");
  return problems;
}
