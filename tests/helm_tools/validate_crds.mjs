// Validates rendered Kubernetes objects (a JSON array on stdin) with the kubernetes-models
// packages' validators: the KEDA and Prometheus Operator custom resources, which the Kubernetes
// API schemas of kubernetes-validate do not cover, and the built-in kinds a second time.
// Prints one line per object; exit 1 when one is invalid, 2 when no model knows a kind.
const PACKAGES = {
  "keda.sh": "@kubernetes-models/keda",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

function modelPath({ apiVersion, kind }) {
  const group = apiVersion.includes("/") ? apiVersion.split("/")[0] : "";
  const pkg = PACKAGES[group] ?? (group.includes(".") && !group.endsWith(".k8s.io") ? null : "kubernetes-models");
  return pkg ? `${pkg}/${apiVersion}/${kind}` : null;
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const objects = JSON.parse(Buffer.concat(chunks).toString("utf8"));
let status = 0;
for (const object of objects) {
  const name = `${object.kind}/${object.metadata?.name}`;
  const path = modelPath(object);
  let Model;
  try {
    Model = path && (await import(path))[object.kind];
  } catch {
    Model = undefined;
  }
  if (!Model) {
    console.log(`UNKNOWN ${name} (${object.apiVersion}): no model`);
    status = Math.max(status, 2);
    continue;
  }
  try {
    new Model(object).validate();
    console.log(`OK ${name} (${path})`);
  } catch (error) {
    console.log(`INVALID ${name}: ${error.message}`);
    status = Math.max(status, 1);
  }
}
process.exit(status);
