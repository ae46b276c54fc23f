#!/usr/bin/env node
// Validates Kubernetes objects against Kubernetes' published OpenAPI schemas,
// offline, with the npm package kubernetes-models (installed by install.sh):
// every object is checked by its kind's model (`new Kind(obj).validate()`:
// types, required fields, enums, formats), and strictly: a field that is not
// in its schema (a misspelt `readinesProbe`, a `port` under the wrong parent)
// is an error, as with `kubectl apply --validate=strict`. An apiVersion/kind
// without a model (a CRD) is an error too: this validator cannot vouch for it.
//
//   node k8s_validate.js [--models DIR] [FILE.json]
//
// Input: a JSON array of objects (a rendered kustomization converted from
// YAML), from FILE or stdin. Output: one line per object, "ok   Kind/name" or
// "FAIL Kind/name: reason"; exit status 0 when every object is valid, 1 when
// one is not, 2 on bad usage or when the models are missing.
//
// DIR holds node_modules/kubernetes-models (default: env TESSEL_NPM_DIR, else
// /var/cache/tessel-npm).
"use strict";

const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

function usage(msg) {
  process.stderr.write(
    `k8s_validate: ${msg}\nusage: node k8s_validate.js [--models DIR] [FILE.json]\n`);
  process.exit(2);
}

let modelsDir = process.env.TESSEL_NPM_DIR || "/var/cache/tessel-npm";
let input = null;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; ++i) {
  if (argv[i] === "--models") {
    if (i + 1 >= argv.length) usage("--models needs a directory");
    modelsDir = argv[++i];
  } else if (argv[i].startsWith("--models=")) {
    modelsDir = argv[i].slice("--models=".length);
  } else if (argv[i].startsWith("-")) {
    usage(`unknown flag ${argv[i]}`);
  } else if (input === null) {
    input = argv[i];
  } else {
    usage("one input file at most");
  }
}

const pkg = path.join(modelsDir, "node_modules", "kubernetes-models", "package.json");
if (!fs.existsSync(pkg)) {
  process.stderr.write(
    `k8s_validate: kubernetes-models not found in ${modelsDir} (no ${pkg}); ` +
      "run scripts/install_deps.sh (or deploy/validate/install.sh) first\n");
  process.exit(2);
}
const modelsRequire = createRequire(pkg);
const modelsVersion = JSON.parse(fs.readFileSync(pkg, "utf8")).version;

// kubernetes-models/<group>/<version>/<Kind>; the core group is "v1".
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[A-Za-z0-9]+$/.test(kind)) {
    return { error: "no apiVersion/kind" };
  }
  // "v1" (the core group) or "GROUP/VERSION".
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion)) {
    return { error: `malformed apiVersion "${apiVersion}"` };
  }
  // The Prometheus Operator's CRDs (ServiceMonitor, PodMonitor) have their
  // own package; everything else is in kubernetes-models.
  const id = apiVersion.startsWith("monitoring.coreos.com/")
    ? `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`
    : `kubernetes-models/${apiVersion}/${kind}`;
  let mod;
  try {
    mod = modelsRequire(id);
  } catch (e) {
    return {
      error: `no schema for ${apiVersion} ${kind} in kubernetes-models ${modelsVersion} ` +
        "(a CRD or an API this version does not know); cannot validate it",
    };
  }
  const Model = mod[kind];
  if (typeof Model !== "function") return { error: `${id} exports no ${kind}` };
  return { Model };
}

// Wraps `root` so that every property the schema's validator reads is
// recorded. The generated validators read each property their schema names
// (`data.spec`, `data.replicas`, ...) and enumerate the keys of maps
// (labels, resources.limits); a key of an object the validator neither read
// nor enumerated is not in the schema.
function traced(root) {
  const records = [];
  const proxies = new WeakMap();
  function wrap(value, where) {
    if (value === null || typeof value !== "object") return value;
    if (proxies.has(value)) return proxies.get(value);
    const isArray = Array.isArray(value);
    const rec = isArray ? null : { obj: value, where, read: new Set(), enumerated: false };
    if (rec) records.push(rec);
    const proxy = new Proxy(value, {
      get(target, key, receiver) {
        const v = Reflect.get(target, key, receiver);
        if (typeof key !== "string") return v;
        if (rec) rec.read.add(key);
        if (!Object.prototype.hasOwnProperty.call(target, key)) return v;
        return wrap(v, `${where}/${key}`);
      },
      has(target, key) {
        if (rec && typeof key === "string") rec.read.add(key);
        return Reflect.has(target, key);
      },
      ownKeys(target) {
        if (rec) rec.enumerated = true;
        return Reflect.ownKeys(target);
      },
      getOwnPropertyDescriptor(target, key) {
        if (rec && typeof key === "string") rec.read.add(key);
        return Reflect.getOwnPropertyDescriptor(target, key);
      },
    });
    proxies.set(value, proxy);
    return proxy;
  }
  return { proxy: wrap(root, ""), records };
}

function unknownFields(records) {
  const out = [];
  for (const rec of records) {
    if (rec.enumerated) continue;
    for (const key of Object.keys(rec.obj)) {
      if (!rec.read.has(key)) out.push(`${rec.where}/${key}`);
    }
  }
  return out;
}

function validate(obj) {
  const name = `${obj && obj.kind}/${obj && obj.metadata && obj.metadata.name}`;
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    return { name, error: "not an object" };
  }
  const found = modelFor(obj.apiVersion, obj.kind);
  if (found.error) return { name, error: found.error };
  // The model's own check, as documented.
  try {
    new found.Model(obj).validate();
  } catch (e) {
    return { name, error: `schema: ${e.message}` };
  }
  // The same check over a traced copy, for fields the schema does not have.
  const { proxy, records } = traced(JSON.parse(JSON.stringify(obj)));
  try {
    found.Model.prototype.validate.call(proxy);
  } catch (e) {
    return { name, error: `schema: ${e.message}` };
  }
  const unknown = unknownFields(records);
  if (unknown.length) return { name, error: `unknown field(s) ${unknown.join(", ")}` };
  return { name };
}

let text;
try {
  text = fs.readFileSync(input === null ? 0 : input, "utf8");
} catch (e) {
  usage(`cannot read ${input === null ? "stdin" : input}: ${e.message}`);
}
let objects;
try {
  objects = JSON.parse(text);
} catch (e) {
  usage(`input is not JSON: ${e.message}`);
}
if (!Array.isArray(objects)) usage("input must be a JSON array of objects");

let failed = 0;
for (const obj of objects) {
  const r = validate(obj);
  if (r.error) {
    ++failed;
    console.log(`FAIL ${r.name}: ${r.error}`);
  } else {
    console.log(`ok   ${r.name}`);
  }
}
console.log(
  `${objects.length - failed}/${objects.length} valid (kubernetes-models ${modelsVersion})`);
process.exit(failed ? 1 : 0);
