# The local Kubernetes control plane (tests/controlplane/README.md).
# Included from the top-level Makefile, which defines PYTHON and the `install` target.

CONTROLPLANE_DIR := tests/controlplane
SPILLOVER_CLUSTER_DIR ?= /tmp/spillover-ops-cluster
export SPILLOVER_CLUSTER_DIR

.PHONY: controlplane
controlplane: ## Build (or reuse) etcd, kube-apiserver, -controller-manager, -scheduler, kwok
	bash $(CONTROLPLANE_DIR)/build.sh

.PHONY: cluster-up
cluster-up: install controlplane $(if $(REAL_NODE),host-deps) ## Start the local control plane on 127.0.0.1 (detached; REAL_NODE=1 adds a real kubelet node, as root)
	$(PYTHON) $(CONTROLPLANE_DIR)/localcluster.py up --workdir $(SPILLOVER_CLUSTER_DIR) $(if $(REAL_NODE),--real-node)

.PHONY: cluster-down
cluster-down: ## Stop the local control plane started by cluster-up (by PID) and undo what its real node changed on the host
	$(PYTHON) $(CONTROLPLANE_DIR)/localcluster.py down --workdir $(SPILLOVER_CLUSTER_DIR)

.PHONY: cluster-env
cluster-env: ## Print `export KUBECONFIG=...` for the running local control plane
	@$(PYTHON) $(CONTROLPLANE_DIR)/localcluster.py env --workdir $(SPILLOVER_CLUSTER_DIR)
