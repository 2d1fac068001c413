"""What is in effect: the policy, the Deployment it targets, and their comparison
(`spillover_operator.assess`)."""

from __future__ import annotations

from spillover_operator.assess import StatusReport, assess
from spillover_operator.client.connection import Connection
from spillover_operator.client.deployments import find_target
from spillover_operator.client.policies import get_policy


def observe(conn: Connection, name: str) -> StatusReport:
    """The status report of policy `name` (NotFound when the policy does not exist; a
    missing Deployment is a finding of the report, not an error)."""
    policy = get_policy(conn, name)
    return assess(policy, find_target(conn, policy))
