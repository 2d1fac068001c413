# kubectl from the pinned k8s.io/kubernetes module (tests/kubectl/build.sh).
# Included from the top-level Makefile.

.PHONY: kubectl
kubectl: ## Build (or reuse) kubectl from the pinned k8s.io/kubernetes module, the control plane's version
	bash tests/kubectl/build.sh
