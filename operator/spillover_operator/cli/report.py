"""How spilloverctl prints a status report (`status`, `-o json`) and the progress of
`--wait`. The report itself is computed by `spillover_operator.domain.assess`."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from spillover_operator.domain.assess import StatusReport, show_resolved, show_value
from spillover_operator.domain.model import (
    BUDGET_VAR,
    COND_APPLIED,
    COND_READY,
    COND_RECIPE_PODS,
    ENABLED_VAR,
    ENV_FIELDS,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_VAR,
)
from spillover_operator.domain.policy import spec_to_json
from spillover_operator.domain.recipe_pods import RecipePods, parse_time
from spillover_operator.observed import WaitProgress


def _spec_line(report: StatusReport) -> str:
    spec = report.spec
    if spec is None:
        return f"spec (invalid): {dict(report.raw_spec)}"
    values = []
    for f in ENV_FIELDS:
        value = spec.value(f)
        if f.kind == "switch":
            values.append(f"{f.key}={'true' if value else 'false'}")
        else:
            values.append(
                f"{f.key}={value if value is not None else f'unset (default {f.default})'}"
            )
    return f"{'  '.join(values)}  onDelete={spec.on_delete}"


def _pods_summary(pods: RecipePods | None) -> str:
    if pods is None:
        return ""
    if pods.matched == 0:
        return "; no recipe pod matched"
    stale = pods.count("stale")
    text = f"; recipe pods: {stale} stale of {pods.matched}"
    if pods.count("unknown"):
        text += f" ({pods.count('unknown')} unknown)"
    return text


def summary(report: StatusReport) -> str:
    """One line: what is in effect, or how many problems there are; the number of stale
    recipe pods either way."""
    problems = report.problems()
    pods = _pods_summary(report.recipe_pods)
    if problems:
        n = len(problems)
        return f"NOT CONSISTENT: {n} problem{'s' if n != 1 else ''} (listed above){pods}"
    spec = report.spec
    state = "ON" if spec is not None and spec.enabled else "OFF (kill switch engaged)"
    return (
        f"OK: spillover is {state} on Deployment {report.namespace}/{report.deployment_name}; "
        f"policy applied and rollout complete{pods}"
    )


def _age(created: str | None, now: datetime.datetime) -> str:
    start = parse_time(created)
    if start is None:
        return "?"
    seconds = int(max(0.0, (now - start).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def pod_table(pods: RecipePods, now: datetime.datetime | None = None) -> list[str]:
    """The per-pod table: pod, owner, age, the three effective values, the verdict."""
    now = now or datetime.datetime.now(datetime.UTC)
    rows = [("POD", "OWNER", "AGE", "ENABLED", "THRESHOLD", "BUDGET", "STATE")]
    for verdict in pods.pods:
        rows.append(
            (
                verdict.name,
                str(verdict.owner),
                _age(verdict.created, now),
                verdict.shown(ENABLED_VAR),
                verdict.shown(THRESHOLD_VAR),
                verdict.shown(BUDGET_VAR),
                verdict.state,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def format_text(report: StatusReport) -> str:
    lines: list[str] = []
    gen = "?" if report.generation is None else str(report.generation)
    obs = "never" if report.observed_generation is None else str(report.observed_generation)
    lines.append(f"SpilloverPolicy {report.namespace}/{report.policy_name}")
    lines.append(f"  generation:   {gen} (observed by the operator: {obs})")
    lines.append(f"  spec:         {_spec_line(report)}")
    container = (
        report.spec.container if report.spec and report.spec.container else "(first container)"
    )
    lines.append(f"  target:       Deployment {report.deployment_name}, container {container}")
    for kind in (COND_READY, COND_APPLIED, COND_RECIPE_PODS):
        cond = report.condition(kind)
        if cond is None:
            if kind != COND_RECIPE_PODS:
                lines.append(f"  {kind + ':':<13} (not reported)")
        else:
            lines.append(
                f"  {kind + ':':<13} {cond.get('status')} reason={cond.get('reason')} "
                f"since {cond.get('lastTransitionTime')}: {cond.get('message')}"
            )
    if report.last_change is not None:
        lines.append(f"  last change:  {report.last_change.describe()}")
    if report.kill_switch_engaged_at:
        lines.append(f"  kill switch:  engaged at {report.kill_switch_engaged_at}")
    if report.status_effective is not None:
        effective = report.status_effective
        shown = (
            "  ".join(f"{k}={v}" for k, v in effective.items())
            if isinstance(effective, Mapping)
            else str(effective)
        )
        lines.append(f"  status.effective: {shown or '(nothing set)'}")

    lines.append("")
    if not report.deployment_found:
        lines.append(f"Deployment {report.namespace}/{report.deployment_name}: NOT FOUND")
    else:
        lines.append(
            f"Deployment {report.namespace}/{report.deployment_name}, container "
            f"{report.container_name or '?'}"
        )
        if report.actual_env is not None:
            width = max(len(v) for v in (*SPILLOVER_VARS, PASSTHROUGH_VAR))
            for var in SPILLOVER_VARS:
                have = report.actual_env.get(var)
                want = report.desired_env.get(var) if report.desired_env else None
                mark = "ok" if report.desired_env is not None and have == want else "MISMATCH"
                if report.desired_env is None:
                    mark = "?"
                shown = (
                    show_resolved(report.resolved.get(var), var)
                    if report.resolved is not None
                    else show_value(have, var)
                )
                lines.append(f"  {var:<{width}} = {shown:<40} {mark}")
            passthrough = report.actual_env.get(PASSTHROUGH_VAR)
            shown = "unset" if passthrough is None else show_value(passthrough, PASSTHROUGH_VAR)
            verdict = (
                "contains the three names"
                if not report.passthrough_missing
                else f"MISSING {', '.join(report.passthrough_missing)}"
            )
            lines.append(f"  {PASSTHROUGH_VAR:<{width}} = {shown}  ({verdict})")
        if report.rollout is not None:
            r = report.rollout
            lines.append(
                f"  rollout: updated {r.updated}/{r.desired}, ready {r.ready}/{r.desired}, "
                f"available {r.available}/{r.desired} — "
                f"{'complete' if r.complete else 'IN PROGRESS'} ({r.message})"
            )
        pods = report.recipe_pods
        if pods is not None:
            lines.append(
                f"  recipe mcp-host pods ({pods.selector}): {pods.matched} matched, "
                f"{pods.count('current')} current, {pods.count('stale')} stale, "
                f"{pods.count('unknown')} unknown"
            )
            if pods.pods:
                lines.extend(pod_table(pods))
        elif report.recipe_pods_error:
            lines.append(f"  recipe mcp-host pods: not checked ({report.recipe_pods_error})")

    if report.findings:
        lines.append("")
        lines.extend(str(f) for f in report.findings)
    lines.append("")
    lines.append(summary(report))
    return "\n".join(lines)


def report_to_json(report: StatusReport) -> dict[str, Any]:
    rollout = report.rollout.to_status() if report.rollout is not None else None
    return {
        "consistent": report.consistent,
        "policy": {
            "namespace": report.namespace,
            "name": report.policy_name,
            "generation": report.generation,
            "observedGeneration": report.observed_generation,
            "spec": spec_to_json(report.spec) if report.spec else dict(report.raw_spec),
            "specValid": report.spec is not None,
            "conditions": [dict(c) for c in report.conditions],
            "killSwitchEngagedAt": report.kill_switch_engaged_at,
            "effective": report.status_effective,
        },
        "deployment": {
            "name": report.deployment_name,
            "found": report.deployment_found,
            "container": report.container_name,
            "env": report.actual_env,
            "expectedEnv": report.desired_env,
            "passthroughMissing": report.passthrough_missing,
            "rollout": rollout,
        },
        "recipePods": None
        if report.recipe_pods is None
        else {
            **report.recipe_pods.to_status(),
            # Listed by spilloverctl with the caller's own permissions (the policy's
            # status carries only counts and owners).
            "stalePods": [p.name for p in report.recipe_pods.stale_pods()],
            "pods": [
                {
                    "name": p.name,
                    "owner": str(p.owner),
                    "created": p.created,
                    "container": p.container,
                    "values": {var: p.shown(var) for var in SPILLOVER_VARS},
                    "state": p.state,
                    "why": p.why,
                }
                for p in report.recipe_pods.pods
            ],
        },
        "lastChange": report.last_change.to_status() if report.last_change else None,
        "envFromNotes": report.env_notes,
        "findings": [
            {"severity": f.severity, "area": f.area, "message": f.message} for f in report.findings
        ],
    }


def progress_line(progress: WaitProgress) -> str:
    """`[  3.1s] policy generation 4 observed 3 Ready=... | env: ... | rollout: ...`"""
    report = progress.report
    ready = report.condition(COND_READY)
    ready_text = "?" if ready is None else f"{ready.get('status')}({ready.get('reason')})"
    obs = "never" if report.observed_generation is None else report.observed_generation
    env_diff = sum(1 for f in progress.pending if f.area in ("env", "passthrough"))
    parts = [
        f"policy generation {report.generation} observed {obs} Ready={ready_text}",
        "env: " + ("matches" if env_diff == 0 else f"{env_diff} difference(s)"),
    ]
    r = report.rollout
    if r is not None:
        parts.append(
            f"rollout: updated {r.updated}/{r.desired} available {r.available}/{r.desired}"
            f" {'complete' if r.complete else 'in progress'}"
        )
    else:
        parts.append("rollout: Deployment not found")
    pods = report.recipe_pods
    if pods is not None:
        parts.append(
            f"recipe pods: {pods.count('current')} current, {pods.count('stale')} stale, "
            f"{pods.count('unknown')} unknown of {pods.matched}"
        )
    return f"[{progress.elapsed:5.1f}s] " + " | ".join(parts)
