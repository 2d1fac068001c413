"""The operator's configuration, read from its environment once, when it starts.

Every setting the operator process takes is here: which Deployments it may configure
(`SPILLOVER_ALLOWED_TARGETS`), which recipe workloads a refresh may restart
(`SPILLOVER_REFRESH_DEPLOYMENTS`, `SPILLOVER_REFRESH_STATEFULSETS`), how often every
policy is reconciled (`SPILLOVER_RESYNC_SECONDS`), its ports (`SPILLOVER_METRICS_PORT`,
`SPILLOVER_LIVENESS_PORT`) and its leader-election identity (`SPILLOVER_LEADER_ID`).

Why once: a malformed value is a mistake of whoever deployed the operator, not of a
policy; read at start-up, it stops the operator with one line naming the variable and
the fix (`spillover_operator.main`), instead of failing every policy at every
reconcile. Pure: `from_environ` takes the mapping, the caller decides when to read it.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass

from spillover_operator.domain import allowlist, leadership
from spillover_operator.domain.allowlist import AllowList, AllowListError, RefreshAllowList
from spillover_operator.domain.recipe_pods import Owner

RESYNC_VAR = "SPILLOVER_RESYNC_SECONDS"
METRICS_PORT_VAR = "SPILLOVER_METRICS_PORT"
LIVENESS_PORT_VAR = "SPILLOVER_LIVENESS_PORT"
DEFAULT_RESYNC_SECONDS = 300.0
DEFAULT_METRICS_PORT = 9090
DEFAULT_LIVENESS_PORT = 8081  # /livez (handlers/liveness.py)


class SettingsError(ValueError):
    """A setting of the operator's environment that cannot be used; the message is one
    line naming the variable, what is wrong and how to fix it."""


@dataclass(frozen=True)
class OperatorSettings:
    """What the operator process was configured with (see the module doc)."""

    allowed_targets: AllowList = allowlist.DEFAULT
    refresh: RefreshAllowList = allowlist.NO_REFRESH
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    metrics_port: int = DEFAULT_METRICS_PORT
    liveness_port: int = DEFAULT_LIVENESS_PORT
    leader_id: str | None = None  # None: the host name (a pod's name)

    def target_refusal(self, deployment: str) -> str | None:
        """None if the operator may configure Deployment `deployment`, else why not."""
        return allowlist.target_refusal(deployment, self.allowed_targets)

    def refresh_refusal(self, owner: Owner) -> str | None:
        """None if a refresh may restart `owner`, else why not."""
        return allowlist.owner_refusal(owner, self.refresh)

    def identity(self) -> str:
        """The leader Lease's holderIdentity: SPILLOVER_LEADER_ID, else the host name."""
        return self.leader_id or socket.gethostname()


def _number(environ: Mapping[str, str], var: str, default: float, *, minimum: float) -> float:
    raw = environ.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{var} must be a number, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{var} must be at least {minimum:g}, got {raw!r}")
    return value


def resync_seconds(environ: Mapping[str, str]) -> float:
    """How often every policy is reconciled even without a change (drift safety net)."""
    return _number(environ, RESYNC_VAR, DEFAULT_RESYNC_SECONDS, minimum=1)


def from_environ(environ: Mapping[str, str]) -> OperatorSettings:
    """The settings `environ` gives; SettingsError (one line) for the first bad one."""
    try:
        allowed = allowlist.from_environ(environ)
        refresh = allowlist.refresh_allow_list(environ)
    except AllowListError as exc:
        raise SettingsError(str(exc)) from None
    return OperatorSettings(
        allowed_targets=allowed,
        refresh=refresh,
        resync_seconds=resync_seconds(environ),
        metrics_port=int(_number(environ, METRICS_PORT_VAR, DEFAULT_METRICS_PORT, minimum=0)),
        liveness_port=int(_number(environ, LIVENESS_PORT_VAR, DEFAULT_LIVENESS_PORT, minimum=0)),
        leader_id=environ.get(leadership.ID_VAR, "").strip() or None,
    )
