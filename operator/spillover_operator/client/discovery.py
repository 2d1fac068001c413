"""What the API server is and serves: its version, and whether the SpilloverPolicy CRD
is installed."""

from __future__ import annotations

import dataclasses

from spillover_operator.client._api import api_call, request
from spillover_operator.client.connection import Connection
from spillover_operator.client.custom import CustomResource, is_served
from spillover_operator.client.errors import ApiError
from spillover_operator.domain.resource import GROUP, KIND, PLURAL, VERSION

SPILLOVER_POLICIES = CustomResource(GROUP, VERSION, PLURAL, KIND)


def server_version(conn: Connection) -> str:
    """The API server's version (`v1.31.0`); ApiUnavailable when it cannot be reached."""
    from kubernetes import client

    with api_call(conn, "get", "version", "the API server version"):
        info = client.VersionApi(conn.api_client).get_code(_request_timeout=conn.request_timeout)
    return str(info.git_version)


def check_reachable(conn: Connection, timeout: float = 2.0) -> str:
    """GET /version within `timeout` seconds: the server's version, else ApiUnavailable
    (or the API error). Needs no permission beyond what every user has."""
    quick = dataclasses.replace(conn, request_timeout=(timeout, timeout))
    info = request(quick, "GET", "/version", verb="get", resource="version", what="/version")
    return str(info.get("gitVersion", "unknown"))


def policy_crd_installed(conn: Connection) -> bool:
    """Whether spilloverpolicies.spillover.clerum.io is served: the CRD is read when the
    user may read CRDs (cluster-scoped), else the policies of the namespace are listed."""
    from kubernetes import client

    try:
        with api_call(conn, "get", "customresourcedefinitions", "the SpilloverPolicy CRD"):
            client.ApiextensionsV1Api(conn.api_client).read_custom_resource_definition(
                SPILLOVER_POLICIES.resource, _request_timeout=conn.request_timeout
            )
        return True
    except ApiError:
        try:
            return is_served(conn, SPILLOVER_POLICIES)
        except ApiError:
            return False
