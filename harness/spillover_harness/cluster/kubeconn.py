"""The connection to the cluster: spilloverctl's (`spillover_operator.cli.cluster`), so
the harness names the kubeconfig, context and permission in its errors the same way."""

from __future__ import annotations

from dataclasses import dataclass

from spillover_operator.cli.cluster import Cluster, connect
from spillover_operator.cli.errors import CliError

from spillover_harness.profile import Profile


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


def connect_profile(profile: Profile, target: Target) -> Cluster:
    """A Cluster for the profile's namespace; ClusterStageError when it cannot connect."""
    try:
        return connect(target.kubeconfig, context_for(profile, target), profile.namespace)
    except CliError as exc:
        raise ClusterStageError(exc.message) from None
