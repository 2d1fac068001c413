"""Integration tests meet real parts: the local Kubernetes control plane built from
upstream sources by `make controlplane` (see tests/controlplane/) and a real
Prometheus server (Debian's package, see tests/prometheus/install.sh)."""

from controlplane.pytest_plugin import control_plane, namespace
from prometheus.pytest_plugin import prometheus_binary, prometheus_factory

__all__ = ["control_plane", "namespace", "prometheus_binary", "prometheus_factory"]
