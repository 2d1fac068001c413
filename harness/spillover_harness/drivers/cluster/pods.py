"""The recipe's mcp-host pods around a run: that they carry the configuration before it
(pod currency), every pod seen during it, and which pod served it (the one the disk and
quality checks exec into)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spillover_operator.client import ClientError

from spillover_harness.cluster.configs import Interrupted, PolicyApplier, expected_env
from spillover_harness.cluster.recipe_pods import (
    PodValues,
    RecipePodsStale,
    pods_condition,
    read_pods,
    stale,
    wait_current,
)
from spillover_harness.drivers.base import RunJob, StageAbort
from spillover_harness.drivers.cluster.status import first
from spillover_harness.profile import Profile


@dataclass
class PodWatch:
    """One run's view of the recipe's mcp-host pods: every live pod seen (by UID), the
    ones that did not carry the configuration, and notes."""

    seen: dict[str, PodValues]
    changed: dict[str, tuple[PodValues, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)  # the UIDs of the last read


class RecipePods:
    """The recipe's mcp-host pods, read through the policy's connection."""

    def __init__(
        self, profile: Profile, applier: PolicyApplier, log: Callable[[str], None]
    ) -> None:
        self.profile = profile
        self.applier = applier
        self._log = log
        self._logged: set[tuple[str, str]] = set()

    def read(self, recipe: str) -> list[PodValues]:
        pods = self.profile.pods
        return read_pods(
            self.applier.cluster, pods.mcp_host_selector(recipe), pods.mcp_host.container
        )

    def _policy_condition(self) -> Any:
        return pods_condition(self.applier.read_policy())

    def current(self, job: RunJob, cancel: threading.Event) -> list[PodValues]:
        """Before the run: every mcp-host pod of the recipe carries the configuration
        (waiting for the operator within pods.current_timeout_s); StageAbort otherwise."""
        want = expected_env(job.config)

        def sleep(seconds: float) -> None:
            if cancel.wait(seconds):
                raise Interrupted(f"configuration '{job.config.name}': interrupted")

        try:
            pods = wait_current(
                lambda: self.read(job.recipe),
                want,
                what=(
                    f"configuration '{job.config.name}', recipe {job.recipe} (mcp-host pods "
                    f"{self.profile.pods.mcp_host_selector(job.recipe)})"
                ),
                timeout_s=self.profile.pods.current_timeout_s,
                condition=self._policy_condition,
                sleep=sleep,
            )
        except RecipePodsStale as exc:
            raise StageAbort(str(exc)) from None
        key = (job.config.name, job.recipe)
        if key not in self._logged:
            self._logged.add(key)
            shown = "; ".join(f"{p.name} ({p.shown()})" for p in pods) or "none yet"
            self._log(
                f"configuration {job.config.name}: mcp-host pods of {job.recipe} carry it: {shown}"
            )
        return pods

    def watch(self, job: RunJob, watch: PodWatch) -> None:
        """During and after the run: remember every live pod of the recipe; a pod that
        does not carry the configuration is kept in `watch.changed`."""
        try:
            pods = self.read(job.recipe)
        except ClientError as exc:
            watch.notes.append(f"mcp-host pods: cannot list them: {exc.message}")
            return
        watch.live = {pod.uid for pod in pods}
        for pod in pods:
            watch.seen[pod.uid] = pod
        for pod, why in stale(expected_env(job.config), pods):
            watch.changed[pod.uid] = (pod, why)

    def served(
        self, status: dict[str, Any] | None, seen: dict[str, PodValues], notes: list[str]
    ) -> list[PodValues]:
        """The pod(s) that served the run: the one the status names (fields.mcp_host_pod),
        else every live pod of the recipe seen during the run (all carried the
        configuration)."""
        named = first(self.profile.fields.mcp_host_pod, status or {})
        if isinstance(named, str) and named:
            match = [p for p in seen.values() if p.name == named]
            if match:
                return match
            notes.append(
                f"mcp-host pod: the status names {named[:80]}, which the harness did not see "
                "among the recipe's pods (its values are not recorded)"
            )
            return []
        pods = sorted(seen.values(), key=lambda p: p.name)
        if len(pods) > 1:
            notes.append(
                f"mcp-host pods: {len(pods)} pods of the recipe could have served the run "
                "(all carried the configuration)"
            )
        return pods

    def exec_target(self, pods: list[PodValues]) -> tuple[str, str] | None:
        """(pod, container) for the disk and quality checks: the pod that served the run
        (when one pod did, and the profile's disk pod is the mcp-host: `disk.pod` with
        the mcp-host's selector); None: the newest running pod of `disk.pod`."""
        if len(pods) != 1 or self.profile.disk.pod.selector != self.profile.pods.mcp_host.selector:
            return None
        container = self.profile.disk.pod.container or self.profile.pods.mcp_host.container
        if container is None:
            return None
        return pods[0].name, container
