"""The mcp-host pods of a recipe and the values in effect there, read where they take
effect: the pod's container as the kubelet resolves it (`env`, `valueFrom`, `envFrom`
with prefix, `$(VAR)`; a Secret is `unknown`), through the client library
(`list_pods`, `pod_values`, `config_map_lookup`), the way the operator and
spilloverctl read them. Where the pod declares a process report
(`spillover_operator.domain.mcp_host.REPORT_ANNOTATION`), what its process reports it runs
with is what counts (`read_process_report`); a report that cannot be read is unknown.

A configuration may run only when every mcp-host pod of the recipe carries it
(`stale` lists the others); the stage waits for the operator (the policy's
`RecipePodsCurrent` condition where it has one) within `pods.current_timeout_s`,
then stops naming the pods. Pods being deleted (a `deletionTimestamp`) and pods that
ended (`Succeeded`, `Failed`) serve no run and are left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spillover_operator.client import (
    ClientError,
    Connection,
    config_map_lookup,
    list_pods,
    pod_values,
)
from spillover_operator.domain.model import COND_RECIPE_PODS, SPILLOVER_VARS, read_env
from spillover_operator.domain.recipe_pods import ReportUnavailable
from spillover_operator.observed import read_process_report

from spillover_harness.cluster.kubeconn import ClusterStageError

CONDITION = COND_RECIPE_PODS
_PREFIX = "CLERUM_WORKFLOW_TOOL_SPILLOVER_"


def short_name(var: str) -> str:
    """`CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES` -> `BUDGET_BYTES` (for messages)."""
    return var.removeprefix(_PREFIX)


class RecipePodsStale(ClusterStageError):
    """Some mcp-host pod of the recipe does not carry the configuration."""


@dataclass(frozen=True)
class PodValues:
    """One mcp-host pod and the three variables as its process sees them (None: unset;
    `unknown:<why>` when the value cannot be read)."""

    name: str
    uid: str
    values: dict[str, str | None]
    phase: str = ""

    def shown(self) -> str:
        return ", ".join(
            f"{short_name(k)}={'unset' if v is None else v}" for k, v in self.values.items()
        )


def effective(values: Mapping[str, str | None]) -> dict[str, str | None]:
    """The values compared with a configuration: what the mcp-host runs with
    (`spillover_operator.domain.model.read_env`: unset or invalid is the default,
    so `THRESHOLD=131072` is the shipped default too); a value that could not be read
    (`unknown:...`) stays as it is, never equal to a configuration's."""
    out: dict[str, str | None] = {}
    for var in SPILLOVER_VARS:
        value = values.get(var)
        if value is not None and value.startswith("unknown:"):
            out[var] = value
        else:
            out[var] = read_env(var, value).text
    return out


def _live(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def read_pods(conn: Connection, selector: str, container: str | None) -> list[PodValues]:
    """The live pods matching `selector` with their three values (ClientError when the
    pods cannot be listed)."""
    lookup = config_map_lookup(conn)
    out: list[PodValues] = []
    for pod in list_pods(conn, selector):
        if not _live(pod):
            continue
        meta = pod.get("metadata") or {}
        resolved = pod_values(pod, SPILLOVER_VARS, container, lookup)
        values: dict[str, str | None]
        if resolved is None:
            values = {v: f"unknown:no container {container!r}" for v in SPILLOVER_VARS}
        else:
            values = {
                var: (
                    r.value
                    if r.state == "set"
                    else None
                    if r.state == "unset"
                    else f"unknown:{r.source}"
                )
                for var, r in resolved.items()
            }
            try:
                reported = read_process_report(conn, pod)
            except ReportUnavailable as exc:
                values = {v: f"unknown:its process did not report: {exc}" for v in SPILLOVER_VARS}
            else:
                if reported is not None:
                    values = dict(reported)
        out.append(
            PodValues(
                name=str(meta.get("name", "")),
                uid=str(meta.get("uid", "")),
                values=values,
                phase=str((pod.get("status") or {}).get("phase") or ""),
            )
        )
    return out


def differences(want: Mapping[str, str | None], pod: PodValues) -> list[str]:
    have = effective(pod.values)

    def show(v: str | None) -> str:
        return "unset" if v is None else repr(v)

    return [
        f"{short_name(var)} expected {show(want.get(var))}, found {show(have.get(var))}"
        for var in SPILLOVER_VARS
        if effective(want).get(var) != have.get(var)
    ]


def stale(want: Mapping[str, str | None], pods: Iterable[PodValues]) -> list[tuple[PodValues, str]]:
    """The pods whose values differ from `want`, each with what differs."""
    return [(p, "; ".join(d)) for p in pods if (d := differences(want, p))]


def describe_stale(found: list[tuple[PodValues, str]]) -> str:
    return "; ".join(f"pod {p.name} ({why})" for p, why in found)


def pods_condition(policy: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The policy's `RecipePodsCurrent` condition, when its operator reports one."""
    conditions = (policy.get("status") or {}).get("conditions") or []
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == CONDITION:
            return cond
    return None


def wait_current(
    read: Callable[[], list[PodValues]],
    want: Mapping[str, str | None],
    *,
    what: str,
    timeout_s: float,
    condition: Callable[[], Mapping[str, Any] | None] = lambda: None,
    sleep: Callable[[float], None] = time.sleep,
    interval_s: float = 0.5,
) -> list[PodValues]:
    """Poll until every pod `read()` returns carries `want`; the pods. RecipePodsStale
    naming the stale pods (and the operator's condition, when it has one) after
    `timeout_s`. A pod list that cannot be read counts as not yet current."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    found: list[tuple[PodValues, str]] = []
    while True:
        try:
            pods = read()
        except ClientError as exc:
            last_error = exc.message
        else:
            found = stale(want, pods)
            if not found:
                return pods
        if time.monotonic() >= deadline:
            break
        sleep(interval_s)
    if not found:
        raise RecipePodsStale(f"{what}: cannot read the mcp-host pods: {last_error}")
    cond = None
    try:
        cond = condition()
    except ClientError:
        cond = None
    said = ""
    if cond is not None:
        said = (
            f" The operator's {CONDITION} condition is {cond.get('status')}"
            f" ({cond.get('reason') or 'no reason'}): {str(cond.get('message') or '')[:200]}."
        )
    raise RecipePodsStale(
        f"{what}: after {timeout_s:g}s, {len(found)} mcp-host pod(s) still do not carry the "
        f"configuration: {describe_stale(found)}.{said} Running pods keep their environment: "
        "restart them (or let the operator refresh them: recipePods.refresh) and run the "
        "stage again with --resume. No run of this configuration was made on them."
    )
