# spillover-ops: every workflow a platform operator needs is a make target.
# `make help` lists them.

SHELL := /bin/bash
PYTHON_BOOTSTRAP ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
BIN := $(VENV)/bin
# Renamed when the install recipe changes in a way an existing .venv should get too
# (-2: plain path entries instead of setuptools' editable import hook; -3: the console
# scripts' launchers; -4: exactly requirements.lock).
STAMP := $(VENV)/.installed-4
# Every Python package make install installs, pinned with hashes (make lock writes it and
# operator/requirements.lock, the image's; docs/install.md).
LOCK := requirements.lock

# Kill switch / deploy knobs (override on the command line).
NAMESPACE ?= clerum
POLICY ?= spillover
# kubectl built from the pinned k8s.io/kubernetes module, the control plane's version
# (make kubectl; tests/kubectl/build.sh). KUBECTL=kubectl uses the machine's own instead.
KUBECTL_DIR := $(shell bash tests/kubectl/build.sh --print-bin-dir 2>/dev/null)
KUBECTL ?= $(KUBECTL_DIR)/kubectl
# The targets running $(KUBECTL) build it first, unless KUBECTL was given.
KUBECTL_DEP := $(if $(filter file,$(origin KUBECTL)),kubectl)
MINIKUBE_PROFILE ?= minikube
OVERLAY ?= dev
TIMEOUT ?= 300
# Extra flags for the kill-switch targets, e.g. '--refresh-recipe-pods --reason "INC-1"'.
SPILLOVERCTL_FLAGS ?=

# Harness knobs.
MATRIX ?= harness/matrices/spillover-default.yaml
RESULTS ?= results
STAGE ?= sim
# Adaptive repetitions for demo and the validate-* targets: UNTIL_STABLE=0.9 MAX_REPETITIONS=20
# (run --until-stable; docs/harness.md).
UNTIL_STABLE ?=
MAX_REPETITIONS ?= 20
ADAPTIVE = $(if $(UNTIL_STABLE),--until-stable $(UNTIL_STABLE) --max-repetitions $(MAX_REPETITIONS))

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | sort | \
	  awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml $(LOCK)
	@# The lock was resolved from pyproject.toml as it is now, else: run make lock (offline,
	@# the standard library only).
	$(PYTHON_BOOTSTRAP) tools/lock.py check --quick
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	@# Exactly the lock: every package pinned, every distribution's hash checked, wheels only
	@# (nothing built by a build backend the lock does not pin). Then the project itself with
	@# the lock's setuptools, and nothing the lock does not list (a .venv made before).
	$(BIN)/pip install --quiet --require-hashes --only-binary :all: -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(PYTHON) tools/lock.py prune
	@# The editable install of a tree with two source roots (operator/, harness/) is an
	@# import hook that every Python start pays for (pathlib and importlib.util, some
	@# ms of spilloverctl's start-up): two plain path entries do the same for this tree.
	$(PYTHON) -c "$$EDITABLE_PTH" '$(CURDIR)'
	$(LAUNCHERS)
	$(BYTECODE)
	@touch $(STAMP)

# The project's bytecode, as pip writes it for a regular install (an editable install does
# not). Where PYTHONDONTWRITEBYTECODE is set (the environment the benchmarks ran in, some CI)
# Python never caches it itself, and every command compiles the project's modules again: ~30 ms
# of each `spilloverctl kill`. Cheap when nothing changed (~40 ms).
BYTECODE = $(PYTHON) -m compileall -q operator/spillover_operator harness/spillover_harness

.PHONY: bytecode
bytecode: $(STAMP) ## Compile the project's bytecode (make install does; again after pulling changes when PYTHONDONTWRITEBYTECODE is set)
	$(BYTECODE)

define EDITABLE_PTH
import pathlib, sys, sysconfig
site = pathlib.Path(sysconfig.get_path("purelib"))
found = sorted(site.glob("__editable__.spillover_ops-*.pth"))
root = pathlib.Path(sys.argv[1])
if len(found) == 1:
    found[0].write_text(f"{root / 'operator'}\n{root / 'harness'}\n")
else:
    print(f"note: {len(found)} editable .pth files in {site}; the import hook stays")
endef
export EDITABLE_PTH

# The console scripts (spilloverctl, spillover-harness) as launchers that start Python with
# SIGINT blocked. Python's own Ctrl-C handler is in place from its first moments, but none
# of the project's code runs before the interpreter, `site` and the script's first import
# have loaded (~20 ms): a Ctrl-C there printed a traceback (or "Fatal Python error" in
# `site`). Blocked, it waits until `main` unblocks it inside the try that ends it as exit 130
# (spillover_operator.interrupts.accept_interrupts). The launcher is a shell script that is
# also the Python script pip would write: sh traps Ctrl-C (exit 130) for its own moment,
# then env(1) blocks SIGINT and execs Python on the same file (~1 ms more per command).
# pip install rewrites them as pip's: `make launchers` again. Where env cannot block a
# signal (GNU coreutils before 8.31, BSD), pip's scripts stay and a note says so.
LAUNCHERS = $(PYTHON) -c "$$CONSOLE_LAUNCHERS"

.PHONY: launchers
launchers: $(STAMP) ## Write the console scripts' launchers again (make install does; after a pip install of the project)
	$(LAUNCHERS)

define CONSOLE_LAUNCHERS
import importlib.metadata, os, shlex, shutil, subprocess, sys, sysconfig
from pathlib import Path
env = shutil.which("env")
blocks = env and subprocess.run([env, "--block-signal=INT", "true"], capture_output=True).returncode == 0
if not blocks:
    print("note: env cannot block SIGINT (GNU coreutils 8.31+ can): the console scripts stay"
          " pip's, and a Ctrl-C while Python starts prints a traceback")
elif "=" in sys.executable:
    print(f"note: env would take {sys.executable} for a variable: the console scripts stay pip's")
else:
    scripts = Path(sysconfig.get_path("scripts"))
    dist = importlib.metadata.distribution("spillover-ops")
    for ep in dist.entry_points.select(group="console_scripts"):
        path = scripts / ep.name
        temporary = path.with_name(f".{ep.name}.tmp")
        temporary.write_text(
            "#!/bin/sh\n"
            "''':'\n"
            "# SIGINT blocked while Python starts; main lets it in (Makefile: LAUNCHERS).\n"
            "trap 'exit 130' INT\n"
            f'exec {shlex.quote(env)} --block-signal=INT {shlex.quote(sys.executable)} "$$0" "$$@"\n'
            "'''\n"
            "import sys\n"
            f"from {ep.module} import {ep.attr}\n"
            'if __name__ == "__main__":\n'
            f"    sys.exit({ep.attr}())\n"
        )
        temporary.chmod(0o755)
        os.replace(temporary, path)
endef
export CONSOLE_LAUNCHERS

.PHONY: install
install: $(STAMP) ## Create the virtualenv in .venv and install the project (+dev tools) from requirements.lock

.PHONY: lock
lock: ## Resolve the Python packages again into requirements.lock and operator/requirements.lock, with hashes (uv pinned in tools/uv.txt; locked versions stay where they fit, UPGRADE=1 takes the newest)
	$(PYTHON_BOOTSTRAP) tools/lock.py compile $(if $(UPGRADE),--upgrade)

.PHONY: lock-check
lock-check: $(STAMP) ## The Python locks agree with pyproject.toml and operator/pyproject.toml (offline; .ci/run runs it before the tests; else run make lock)
	$(PYTHON) tools/lock.py check

.PHONY: lint
lint: $(STAMP) ## ruff + mypy + the layer contracts (import-linter, pyproject [tool.importlinter])
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: fmt
fmt: $(STAMP) ## Format the code with ruff
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

.PHONY: test
test: $(STAMP) host-deps controlplane prometheus image kubectl ## The whole test suite (installs host packages, builds the control plane, Prometheus and the image on first use)
	$(BIN)/pytest $(PYTEST_ARGS)

.PHONY: unit
unit: $(STAMP) prometheus kubectl ## Only the tests that need no control plane (promtool, from make prometheus, checks the alert rules)
	$(BIN)/pytest tests/operator tests/harness tests/manifests $(PYTEST_ARGS)

# ---- the harness ------------------------------------------------------------

.PHONY: demo
demo: $(STAMP) ## The whole matrix on the embedded simulator, print the decision (again: finishes or re-evaluates it)
	$(BIN)/spillover-harness run --stage sim --matrix $(MATRIX) --out $(RESULTS)/sim --resume $(ADAPTIVE)

.PHONY: memory
memory: $(STAMP) ## The mcp-host's memory, the 1 MiB budget and N executions at once on the simulator (results/memory)
	$(BIN)/spillover-harness run --stage sim --matrix harness/matrices/memory-budget.yaml --out $(RESULTS)/memory --resume

.PHONY: faults
faults: $(STAMP) ## Prove every check can fail: each simulator fault planted in a stage of its own, `caught` or `MISSED` per switch (exit 6 on a miss)
	$(BIN)/spillover-harness faults

.PHONY: compare
compare: $(STAMP) ## off vs spillover vs the handoff cache on the simulator (harness/matrices/strategies.yaml; results/strategies)
	$(BIN)/spillover-harness run --stage sim --matrix harness/matrices/strategies.yaml --out $(RESULTS)/strategies --resume

.PHONY: sweep
sweep: $(STAMP) ## Threshold sweep on the simulator: every threshold vs off, passing range and plot (results/sweep)
	$(BIN)/spillover-harness sweep --matrix $(MATRIX) --out $(RESULTS)/sweep --resume

.PHONY: sensitivity
sensitivity: $(STAMP) ## Which simulator model parameters flip the simulated decision: table + tornado plot (results/sensitivity)
	$(BIN)/spillover-harness sensitivity --matrix $(MATRIX) --out $(RESULTS)/sensitivity --resume

.PHONY: apply-decision
apply-decision: $(STAMP) ## Set the SpilloverPolicy to the decision of $(RESULTS)/$(STAGE) (APPLY_ARGS=--dry-run, --gitops FILE, ...)
	$(BIN)/spillover-harness apply-decision --results $(RESULTS)/$(STAGE) --policy $(POLICY) -n $(NAMESPACE) $(APPLY_ARGS)

.PHONY: bench
bench: $(STAMP) ## Benchmarks: sim matrix wall time, evaluating 100,000 records, adaptive repetitions vs uniform
	$(PYTHON) -m spillover_harness.bench.bench

.PHONY: calibrate
calibrate: $(STAMP) ## Benchmark: is the verdict's reproduction probability calibrated? Seeded stages per scenario vs fresh ones (CALIBRATE_ARGS=--stages 80)
	$(PYTHON) -m spillover_harness.bench.calibrate $(CALIBRATE_ARGS)

.PHONY: bench-cluster
bench-cluster: $(STAMP) controlplane prometheus ## Benchmark: the cluster stage's overhead per run (reduced matrix, local control plane, simulator, 30 s scrapes)
	$(PYTHON) bench/cluster.py

.PHONY: bench-killswitch
bench-killswitch: bytecode controlplane ## Benchmark: kill switch latency (operator and --direct) on the local control plane
	$(PYTHON) bench/killswitch.py

.PHONY: bench-fleet
bench-fleet: bytecode controlplane ## Benchmark: kill --wait on three local control planes at once vs three direct rollouts at once (ratio fleet_vs_direct_3)
	$(PYTHON) bench/fleet.py

.PHONY: bench-realnode
bench-realnode: $(STAMP) host-deps controlplane image-platform ## Benchmark: the real node's start, kill --wait on real mcp-host processes vs kubectl patch + rollout status, the first change after an API outage (root)
	$(PYTHON) bench/realnode.py

.PHONY: bench-scale
bench-scale: bytecode controlplane ## Benchmark: the operator's API requests per recipe pod (300 pods in 10 Deployments: created, then a kill with refresh) vs the control plane's controllers
	$(PYTHON) bench/scale.py

.PHONY: bench-operator
bench-operator: bytecode controlplane ## Benchmark: the operator vs the direct path (kubectl) on the local control plane
	$(PYTHON) bench/operator_speed.py

# ---- cluster stages (docs/harness.md) ----------------------------------------
# Stage 1 on a Minikube profile: the kube context is the profile's name.
PROFILE_MINIKUBE ?= minikube
PROFILE_DEV ?= dev
DEV_CONTEXT ?=
STAGE1_RESULTS ?= $(RESULTS)/minikube
HARNESS_MATRIX ?=

.PHONY: minikube-preflight
minikube-preflight: $(STAMP) $(KUBECTL_DEP) ## Preflight checklist for Stage 1 (MINIKUBE_PROFILE=name)
	$(BIN)/spillover-harness preflight --stage minikube --profile $(PROFILE_MINIKUBE) \
	  --context $(MINIKUBE_PROFILE) --kubectl $(KUBECTL) $(if $(HARNESS_MATRIX),--matrix $(HARNESS_MATRIX))

.PHONY: validate-minikube
validate-minikube: $(STAMP) $(KUBECTL_DEP) ## Stage 1: preflight, the matrix through the operator, the report (MINIKUBE_PROFILE=name)
	$(BIN)/spillover-harness run --stage minikube --profile $(PROFILE_MINIKUBE) \
	  --context $(MINIKUBE_PROFILE) --kubectl $(KUBECTL) $(if $(HARNESS_MATRIX),--matrix $(HARNESS_MATRIX)) \
	  --out $(RESULTS)/minikube --resume $(ADAPTIVE)

.PHONY: validate-dev
validate-dev: $(STAMP) $(KUBECTL_DEP) ## Stage 2 on the dev cluster (needs Stage 1 accepted, not `false`, in STAGE1_RESULTS; OVERRIDE_STAGE1="reason", OVERRIDE_STAGE1_FALSE=1)
	$(BIN)/spillover-harness preflight --stage dev --profile $(PROFILE_DEV) --kubectl $(KUBECTL) \
	  $(if $(DEV_CONTEXT),--context $(DEV_CONTEXT)) $(if $(HARNESS_MATRIX),--matrix $(HARNESS_MATRIX))
	$(BIN)/spillover-harness run --stage dev --profile $(PROFILE_DEV) --kubectl $(KUBECTL) \
	  $(if $(DEV_CONTEXT),--context $(DEV_CONTEXT)) $(if $(HARNESS_MATRIX),--matrix $(HARNESS_MATRIX)) \
	  --stage1-results $(STAGE1_RESULTS) $(if $(OVERRIDE_STAGE1),--override-stage1 "$(OVERRIDE_STAGE1)") \
	  $(if $(OVERRIDE_STAGE1_FALSE),--override-stage1-false) \
	  --out $(RESULTS)/dev --resume $(ADAPTIVE)

.PHONY: compare-stages
compare-stages: $(STAMP) ## Two stages side by side: decision, stability, criteria, key figures (A=results/minikube B=results/dev)
	$(BIN)/spillover-harness report --compare $(or $(A),$(RESULTS)/minikube) $(or $(B),$(RESULTS)/dev)

# ---- the operator and the kill switch --------------------------------------

IMAGE ?= localhost/spillover-operator:dev

.PHONY: host-deps
host-deps: ## Install what a real node and image builds need from Debian's packages, where missing (containerd, runc, CNI plugins, iptables, podman, mmdebstrap; root)
	bash tests/controlplane/setup-host.sh

.PHONY: image
image: $(STAMP) ## Build the operator image with podman or docker from operator/requirements.lock, and its SBOM in ~/.cache/spillover-ops/image/ (IMAGE=tag; BASE_IMAGE=..., else python:3.11-slim or a Debian base made here)
	SBOM_PYTHON=$(PYTHON) bash operator/image.sh $(IMAGE)

.PHONY: deploy
deploy: $(KUBECTL_DEP) ## Apply CRD, RBAC and the operator to the current kube context (OVERLAY=dev|minikube)
	$(KUBECTL) apply -k manifests/overlays/$(OVERLAY)

.PHONY: deploy-minikube
deploy-minikube: $(KUBECTL_DEP) ## Build the operator image inside Minikube and deploy the minikube overlay
	minikube -p $(MINIKUBE_PROFILE) image build -t spillover-operator:dev operator
	$(KUBECTL) --context $(MINIKUBE_PROFILE) apply -k manifests/overlays/minikube

PLATFORM_IMAGE ?= localhost/spillover-platform:dev

.PHONY: image-platform
image-platform: image ## The local platform stand-ins' image (the simulator as mcp-host, the WRC stand-in): the operator image + the harness sources
	$(IMAGE_BUILD) --build-arg OPERATOR_IMAGE=$(IMAGE) -f harness/Dockerfile.platform -t $(PLATFORM_IMAGE) harness

# podman (with runc, the host's network: no bridge left behind) or docker.
IMAGE_BUILD = $(if $(shell command -v podman),podman build $(if $(shell command -v runc),--runtime runc) --network host,docker build)

.PHONY: platform-local
platform-local: $(KUBECTL_DEP) $(STAMP) image-platform ## The WRC stand-in and its mcp-host pods on the real node (after make deploy-local; RECIPES="r1=2 r2=1", MCP_HOST_MEMORY=512Mi the pods' memory limit)
	$(PYTHON) tests/controlplane/localcluster.py load-image $(PLATFORM_IMAGE) --workdir $(SPILLOVER_CLUSTER_DIR)
	$(PYTHON) -m spillover_harness.sim.platform --namespace $(NAMESPACE) --image $(PLATFORM_IMAGE) \
	  $(foreach r,$(or $(RECIPES),r1=2),--recipe $(r)) \
	  $(if $(MCP_HOST_MEMORY),--mcp-host-memory-limit $(MCP_HOST_MEMORY)) \
	  | KUBECONFIG=$(SPILLOVER_CLUSTER_DIR)/kubeconfig $(KUBECTL) apply -f -

# Stage 1 rehearsal without Minikube (docs/harness.md): the recipes of the default matrix.
LOCAL_RECIPES ?= code-review=1 summarize=1
LOCAL_KUBECTL = KUBECONFIG=$(SPILLOVER_CLUSTER_DIR)/kubeconfig $(KUBECTL)

.PHONY: validate-local
validate-local: $(STAMP) prometheus deploy-local ## Stage 1 rehearsal without Minikube: the reduced matrix through the operator pod on real mcp-host processes, decision + report in $(RESULTS)/local (make cluster-up REAL_NODE=1 first; root)
	$(MAKE) --no-print-directory platform-local RECIPES="$(LOCAL_RECIPES)"
	$(LOCAL_KUBECTL) apply -n $(NAMESPACE) -f manifests/samples/default.yaml
	$(LOCAL_KUBECTL) -n $(NAMESPACE) rollout status deployment/workflow-recipe-controller --timeout=$(TIMEOUT)s
	$(foreach r,$(LOCAL_RECIPES),$(LOCAL_KUBECTL) -n $(NAMESPACE) rollout status deployment/mcp-host-$(firstword $(subst =, ,$(subst :, ,$(r)))) --timeout=$(TIMEOUT)s &&) true
	$(PYTHON) tests/controlplane/validate_local.py --workdir $(SPILLOVER_CLUSTER_DIR) \
	  --namespace $(NAMESPACE) --out $(RESULTS)/local $(if $(HARNESS_MATRIX),--matrix $(HARNESS_MATRIX)) \
	  $(ADAPTIVE)

.PHONY: deploy-local
deploy-local: $(KUBECTL_DEP) $(STAMP) image ## The operator as users deploy it, on the local cluster's real node (make cluster-up REAL_NODE=1 first): image loaded into its containerd, manifests/overlays/local applied
	$(PYTHON) tests/controlplane/localcluster.py load-image $(IMAGE) --workdir $(SPILLOVER_CLUSTER_DIR)
	@# The WRC namespace the base's Role and RoleBinding live in (a real cluster has it).
	KUBECONFIG=$(SPILLOVER_CLUSTER_DIR)/kubeconfig $(KUBECTL) create namespace $(NAMESPACE) --dry-run=client -o yaml \
	  | KUBECONFIG=$(SPILLOVER_CLUSTER_DIR)/kubeconfig $(KUBECTL) apply -f -
	KUBECONFIG=$(SPILLOVER_CLUSTER_DIR)/kubeconfig $(KUBECTL) apply --server-side -k manifests/overlays/local
	KUBECONFIG=$(SPILLOVER_CLUSTER_DIR)/kubeconfig $(KUBECTL) -n spillover-system rollout status deployment/spillover-operator --timeout=$(TIMEOUT)s

.PHONY: undeploy
undeploy: $(KUBECTL_DEP) ## Remove the operator (the CRD and policies stay)
	$(KUBECTL) delete -k manifests/overlays/$(OVERLAY) --ignore-not-found

.PHONY: status
status: $(STAMP) ## What is in effect: policy, WRC Deployment env, rollout
	$(BIN)/spilloverctl -n $(NAMESPACE) status $(POLICY)

.PHONY: kill-switch-engage
kill-switch-engage: $(STAMP) ## Turn spillover OFF through the operator and wait for the rollout
	$(BIN)/spilloverctl -n $(NAMESPACE) kill $(POLICY) --wait --timeout $(TIMEOUT) $(SPILLOVERCTL_FLAGS)

.PHONY: kill-switch-engage-direct
kill-switch-engage-direct: $(STAMP) ## Turn spillover OFF with the operator down (policy + Deployment patched directly)
	$(BIN)/spilloverctl -n $(NAMESPACE) kill $(POLICY) --direct --wait --timeout $(TIMEOUT) $(SPILLOVERCTL_FLAGS)

.PHONY: kill-switch-release
kill-switch-release: $(STAMP) ## Turn spillover back ON and wait for the rollout
	$(BIN)/spilloverctl -n $(NAMESPACE) restore $(POLICY) --wait --timeout $(TIMEOUT) $(SPILLOVERCTL_FLAGS)

.PHONY: kill-switch-release-direct
kill-switch-release-direct: $(STAMP) ## Turn spillover back ON with the operator down
	$(BIN)/spilloverctl -n $(NAMESPACE) restore $(POLICY) --direct --wait --timeout $(TIMEOUT) $(SPILLOVERCTL_FLAGS)

-include tests/controlplane/controlplane.mk
-include tests/prometheus/prometheus.mk
-include tests/kubectl/kubectl.mk
