# The Prometheus server the tests start (tests/prometheus/README.md).
# Included from the top-level Makefile.

PROMETHEUS_DIR := tests/prometheus

.PHONY: prometheus
prometheus: ## Build (or reuse) Prometheus and promtool from their pinned Go module, for the tests
	bash $(PROMETHEUS_DIR)/build.sh
