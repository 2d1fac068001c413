"""What a node's kubelet reports, through the API server's node proxy (`nodes/proxy`
get): its Summary API (`/stats/summary`), the working set of every container it runs,
fresh at the kubelet's own housekeeping interval rather than Prometheus' scrape one."""

from __future__ import annotations

import dataclasses

from spillover_operator.client._api import JsonDict, request
from spillover_operator.client.connection import Connection


def node_summary(conn: Connection, node: str, *, timeout: float = 2.0) -> JsonDict:
    """GET /api/v1/nodes/{node}/proxy/stats/summary within `timeout` seconds: the
    kubelet's Summary (`node`, `pods[].containers[].memory.workingSetBytes`...).
    Forbidden without `nodes/proxy` get; NotFound (or another ApiError) where the node
    has no kubelet that serves it (a kwok node); ApiUnavailable when unreachable."""
    quick = dataclasses.replace(conn, request_timeout=(timeout, timeout))
    return request(
        quick,
        "GET",
        f"/api/v1/nodes/{node}/proxy/stats/summary",
        verb="get",
        resource="nodes/proxy",
        what=f"the kubelet Summary of Node '{node}'",
    )
