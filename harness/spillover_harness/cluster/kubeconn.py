"""The connection to the cluster, through the client library (`spillover_operator.client`),
so the harness names the kubeconfig, context and permission in its errors the same way
spilloverctl does."""

from __future__ import annotations

from dataclasses import dataclass

from spillover_operator.client import ClientError, Connection, connect

from spillover_harness.profile import Profile

# Shown in managedFields of what the harness patches (the policy) and creates (runs).
FIELD_MANAGER = "spillover-harness"


class ClusterStageError(Exception):
    """The stage cannot go on (cannot connect, a configuration could not be applied or
    verified...). The message says what and, where there is one, the fix."""


@dataclass(frozen=True)
class Target:
    """Where the stage connects: kubeconfig (None = $KUBECONFIG or ~/.kube/config) and
    context (None = the profile's `kube_context`, else the current one)."""

    kubeconfig: str | None = None
    context: str | None = None


def context_for(profile: Profile, target: Target) -> str | None:
    return target.context if target.context is not None else profile.kube_context


def connect_profile(profile: Profile, target: Target) -> Connection:
    """A Connection for the profile's namespace; ClusterStageError when it cannot connect."""
    try:
        return connect(
            target.kubeconfig,
            context_for(profile, target),
            profile.namespace,
            field_manager=FIELD_MANAGER,
        )
    except ClientError as exc:
        raise ClusterStageError(exc.message) from None
