"""The target (WRC) Deployment of a policy, and what is in effect on it: read through
the client, judged by the domain (`policy.target_of`, `envplan.effective_env`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spillover_operator.client.connection import Connection
from spillover_operator.client.deployments import find_deployment, get_deployment
from spillover_operator.client.errors import NotFound
from spillover_operator.domain.envplan import TargetError, effective_env
from spillover_operator.domain.policy import target_of


def find_target(conn: Connection, policy: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Deployment the policy targets, or None when it names none or it is missing."""
    target = target_of(policy.get("spec"))
    return None if target is None else find_deployment(conn, target.deployment)


def env_in_effect(conn: Connection, name: str, container: str | None) -> dict[str, str | None]:
    """The three spillover variables and the passthrough list on the Deployment's
    container (None: absent); NotFound for a missing Deployment or container."""
    deployment = get_deployment(conn, name)
    try:
        return effective_env(deployment, container)
    except TargetError as exc:
        raise NotFound(str(exc)) from None
