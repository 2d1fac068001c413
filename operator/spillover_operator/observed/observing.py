"""What is in effect: the policy, the Deployment it targets, the recipe mcp-host pods,
and their comparison (`spillover_operator.domain.assess`)."""

from __future__ import annotations

from spillover_operator.client.configmaps import ConfigMapReader
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import ClientError
from spillover_operator.client.policies import get_policy
from spillover_operator.domain.assess import StatusReport, assess, with_recipe_pods
from spillover_operator.observed.deployments import find_target
from spillover_operator.observed.pods import observe_recipe_pods


def observe(conn: Connection, name: str, *, recipe_pods: bool = True) -> StatusReport:
    """The status report of policy `name` (NotFound when the policy does not exist; a
    missing Deployment is a finding of the report, not an error). The WRC container's
    values are resolved through the ConfigMaps it references; with `recipe_pods` the
    pods matched by spec.recipePods.selector are classified too (a failure to list them,
    Forbidden for instance, is a note of the report)."""
    policy = get_policy(conn, name)
    reader = ConfigMapReader(conn)
    lookup = reader.lookup
    report = assess(policy, find_target(conn, policy), config_maps=lookup)
    if not recipe_pods or report.spec is None or report.desired_env is None:
        return report
    try:
        pods = observe_recipe_pods(
            conn, report.spec, report.desired_env, lookup, changed_at=reader.changed_at
        )
    except ClientError as exc:
        return with_recipe_pods(report, None, error=exc.message)
    return with_recipe_pods(report, pods)
