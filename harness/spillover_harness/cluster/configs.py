"""A configuration of the matrix applied through the operator, verified, and undone.

For each configuration the stage patches the SpilloverPolicy's spec (JSON merge
patch of `enabled`, `thresholdBytes`, `budgetBytes` only), waits with the client
library's wait loop (`wait_until_settled`, the one spilloverctl uses: observedGeneration
== generation, Ready=True, Deployment env as the policy says, rollout complete), then
checks the WRC
Deployment's container itself: its three variables must be exactly the
configuration's. Mapping (docs/reference.md §1):

| matrix env | policy spec | WRC container env |
|---|---|---|
| `ENABLED=false` / `true` | `enabled: false` / `true` | `ENABLED=false` / `true` |
| `ENABLED` unset | `enabled: true` (the field is required) | `ENABLED=true` (unset = on) |
| `THRESHOLD=N` / unset | `thresholdBytes: N` / removed | `THRESHOLD=N` / absent |
| `BUDGET_BYTES=N` / unset | `budgetBytes: N` / removed | `BUDGET_BYTES=N` / absent |

`PolicyGuard` remembers the spec fields before the stage and puts them back at the
end (also after a failure or an interruption), waiting for the operator to apply
them when it can.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spillover_operator.client import ClientError, Connection, get_policy, patch_policy
from spillover_operator.domain.envplan import passthrough_names
from spillover_operator.domain.model import ENV_FIELDS, PASSTHROUGH_VAR, SPILLOVER_VARS
from spillover_operator.observed import WaitProgress, env_in_effect, wait_until_settled

from spillover_harness.cluster.kubeconn import ClusterStageError
from spillover_harness.plan.matrix import Configuration
from spillover_harness.profile import Profile

# The spec fields a configuration sets: one per variable (the policy model owns the mapping).
POLICY_FIELDS = tuple(f.key for f in ENV_FIELDS)
DEFAULT_APPLY_TIMEOUT_S = 600.0


class ConfigApplyError(ClusterStageError):
    """A configuration could not be applied or is not what the cluster runs."""


class Interrupted(ClusterStageError):
    """The wait was cut short by a stop request."""


def policy_fields(config: Configuration) -> dict[str, Any]:
    """The policy spec fields for a configuration (None = remove the field; `enabled`
    is never removed: the CRD requires it). Each variable is read as the mcp-host
    reads it (`EnvField.read`); a value it would replace by its default cannot be
    expressed by the policy."""
    fields: dict[str, Any] = {}
    for f in ENV_FIELDS:
        reading = f.read(config.env.get(f.var))
        if reading.state == "invalid":
            raise ConfigApplyError(
                f"configuration '{config.name}': {f.var}={reading.raw!r} cannot be expressed "
                f"by the policy ({reading.problem}; allowed: {f.allowed})"
            )
        if reading.state == "unset" and f.kind == "bytes":
            fields[f.key] = None
        else:
            # `enabled` is required (no CRD default): unset is the mcp-host default, written
            fields[f.key] = reading.value
    return fields


def expected_env(config: Configuration) -> dict[str, str | None]:
    """The three variables the WRC container must carry for the configuration."""
    fields = policy_fields(config)
    # An unset switch is written as its mcp-host default; an unset size is absent.
    return {
        f.var: f.to_env(fields[f.key]) if fields[f.key] is not None else None for f in ENV_FIELDS
    }


def env_differences(want: Mapping[str, str | None], have: Mapping[str, str | None]) -> list[str]:
    def show(v: str | None) -> str:
        return "absent" if v is None else repr(v)

    return [
        f"{var}: expected {show(want.get(var))}, found {show(have.get(var))}"
        for var in SPILLOVER_VARS
        if want.get(var) != have.get(var)
    ]


def run_env(applied: Mapping[str, str | None]) -> dict[str, str]:
    """The variables as a process environment (absent ones left out)."""
    return {k: v for k, v in applied.items() if v is not None and k in SPILLOVER_VARS}


@dataclass(frozen=True)
class Applied:
    """A configuration in effect: what the WRC container carries, and since when."""

    config: str
    env: dict[str, str | None]
    generation: int | None
    since: datetime


class PolicyApplier:
    """Sets the policy for one configuration at a time and verifies it took effect.

    Thread-safe; after `close()` (the stage's restore) no configuration is applied
    any more (a late call raises ConfigApplyError). `progress` is called while the
    applier waits for the operator (the library's WaitProgress, whenever what it shows
    changes); by default nothing is shown, as the stage logs one line per configuration.
    """

    def __init__(
        self,
        cluster: Connection,
        profile: Profile,
        *,
        timeout_s: float = DEFAULT_APPLY_TIMEOUT_S,
        log: Callable[[str], None] | None = None,
        progress: Callable[[WaitProgress], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.profile = profile
        self.timeout_s = timeout_s
        self._log = log or (lambda _line: None)
        self._progress = progress
        self._lock = threading.Lock()
        self._closed = False
        self.active: Applied | None = None

    # -- reading ---------------------------------------------------------------------

    def read_policy(self) -> dict[str, Any]:
        try:
            return get_policy(self.cluster, self.profile.policy)
        except ClientError as exc:
            raise ConfigApplyError(exc.message) from None

    def wrc_env(self) -> dict[str, str | None]:
        """The spillover variables and the passthrough list on the WRC container."""
        try:
            return env_in_effect(
                self.cluster, self.profile.wrc.deployment, self.profile.wrc.container
            )
        except ClientError as exc:
            raise ConfigApplyError(exc.message) from None

    def verify(self, config: Configuration) -> dict[str, str | None]:
        """The WRC container's env must be exactly the configuration's; returns it."""
        want = expected_env(config)
        have = self.wrc_env()
        diffs = env_differences(want, have)
        missing = [
            v for v in SPILLOVER_VARS if v not in passthrough_names(have.get(PASSTHROUGH_VAR))
        ]
        if missing:
            diffs.append(
                f"{PASSTHROUGH_VAR} does not forward {', '.join(missing)} to the mcp-host pods"
            )
        if diffs:
            ns = self.cluster.namespace
            raise ConfigApplyError(
                f"configuration '{config.name}' is not in effect on Deployment "
                f"{ns}/{self.profile.wrc.deployment}: "
                + "; ".join(diffs)
                + ". Stopped before spending any run of this configuration."
            )
        return {k: have.get(k) for k in SPILLOVER_VARS}

    # -- applying --------------------------------------------------------------------

    def apply(self, config: Configuration, cancel: threading.Event | None = None) -> Applied:
        """Patch the policy, wait until the operator applied it and the rollout is
        complete, verify the Deployment. ConfigApplyError (or Interrupted)."""
        fields = policy_fields(config)
        with self._lock:
            if self._closed:
                raise ConfigApplyError("the stage is over: the policy was restored")
            self._patch(fields, f"configuration '{config.name}'")
            report = self._wait(cancel, f"configuration '{config.name}'")
            env = self.verify(config)
            self.active = Applied(
                config=config.name,
                env=env,
                generation=report,
                since=datetime.now(UTC),
            )
            self._log(
                f"configuration {config.name}: applied (policy generation {report}), "
                f"WRC env verified: {_describe(env)}"
            )
            return self.active

    def _patch(self, fields: Mapping[str, Any], what: str) -> None:
        try:
            patch_policy(self.cluster, self.profile.policy, {"spec": dict(fields)})
        except ClientError as exc:
            raise ConfigApplyError(f"{what}: cannot patch the policy: {exc.message}") from None

    def _wait(self, cancel: threading.Event | None, what: str) -> int | None:
        def sleep(seconds: float) -> None:
            if cancel is None:
                time.sleep(seconds)
            elif cancel.wait(seconds):
                raise Interrupted(f"{what}: interrupted while waiting for the operator")

        try:
            report = wait_until_settled(
                self.cluster,
                self.profile.policy,
                timeout=self.timeout_s,
                progress=self._progress,
                sleep=sleep,
                # The stage checks the values where each run is served (its run record
                # names the serving pod, reference.md §4.4), not every standing pod.
                recipe_pods=False,
            )
        except ClientError as exc:
            raise ConfigApplyError(
                f"{what}: not applied: {exc.message}\n(policy "
                f"{self.cluster.namespace}/{self.profile.policy}; is the operator running? "
                "`spilloverctl status` shows the details)"
            ) from None
        return report.observed_generation

    # -- the stage's start and end ---------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The policy spec fields the stage will change, as they are now (None = absent)."""
        spec = self.read_policy().get("spec") or {}
        return {k: spec.get(k) for k in POLICY_FIELDS}

    def restore(self, fields: Mapping[str, Any], *, wait: bool = True) -> str:
        """Put the fields back (and stop applying configurations). Returns a line for the
        user; never raises for a wait that does not finish (says so instead)."""
        acquired = self._lock.acquire(timeout=30)
        try:
            self._closed = True
            self._patch(fields, "restoring the policy")
            shown = ", ".join(f"{k}={'unset' if v is None else v}" for k, v in fields.items())
            if not wait:
                return f"policy restored to {shown} (not waited for)"
            try:
                self._wait(None, "restoring the policy")
            except ClusterStageError as exc:
                return f"policy restored to {shown}, but the operator has not applied it: {exc}"
            return f"policy restored to {shown} and applied by the operator"
        finally:
            if acquired:
                self._lock.release()


def _describe(env: Mapping[str, str | None]) -> str:
    return ", ".join(
        f"{k.rsplit('_', 1)[-1]}={'unset' if v is None else v}" for k, v in env.items()
    )


class PolicyGuard:
    """`with PolicyGuard(applier):` the policy's spec fields are put back on exit,
    whatever happened (an exception, an interruption)."""

    def __init__(self, applier: PolicyApplier, log: Callable[[str], None]) -> None:
        self.applier = applier
        self.log = log
        self.saved: dict[str, Any] | None = None
        self.restored: str | None = None

    def __enter__(self) -> PolicyGuard:
        self.saved = self.applier.snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            return
        try:
            self.restored = self.applier.restore(self.saved)
        except ClusterStageError as err:
            self.restored = f"could not restore the policy ({err}); put back by hand: {self.saved}"
        self.log(self.restored)
