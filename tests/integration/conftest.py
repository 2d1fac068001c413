"""Integration tests meet real parts: the local Kubernetes control plane built from
upstream sources by `make controlplane` (see tests/controlplane/) and a real
Prometheus server built from the pinned upstream Go module by `make prometheus` (see
tests/prometheus/; the report header and summary name the binary and version used)."""

from controlplane.pytest_plugin import control_plane, namespace, real_node_cluster
from prometheus.pytest_plugin import (
    prometheus_binary,
    prometheus_factory,
    pytest_report_header,
    pytest_terminal_summary,
)

__all__ = [
    "control_plane",
    "namespace",
    "prometheus_binary",
    "prometheus_factory",
    "pytest_report_header",
    "pytest_terminal_summary",
    "real_node_cluster",
]
