"""What `spilloverctl status` reports, computed from plain dicts (no cluster): the policy,
what is in effect on the target container, the rollout, and every mismatch between them.

`assess(policy, deployment)` is pure; `format_text` and `report_to_json` render its result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spillover_operator.constants import (
    BUDGET_DEFAULT,
    BUDGET_VAR,
    COND_APPLIED,
    COND_READY,
    ENABLED_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_DEFAULT,
    THRESHOLD_VAR,
    VALUE_FROM,
)
from spillover_operator.envplan import (
    TargetError,
    effective_env,
    passthrough_names,
    render_env,
)
from spillover_operator.policy import InvalidSpecError, PolicySpec, parse_spec, spec_to_json
from spillover_operator.rollout import RolloutState, rollout_state
from spillover_operator.status import effective_status

# Which part of the system a finding is about. `--direct --wait` ignores "operator"
# findings (the operator may be down); everything else must be clear.
Area = Literal["spec", "operator", "target", "env", "passthrough", "rollout"]
Severity = Literal["MISMATCH", "PENDING", "NOTE"]

# Ready=False reasons of the operator that mean "not done yet" rather than "wrong".
PENDING_REASONS = ("RolloutInProgress",)

# The spec field behind each variable, for messages a platform operator can act on.
SPEC_FIELD_OF: dict[str, str] = {
    ENABLED_VAR: "enabled",
    THRESHOLD_VAR: "thresholdBytes",
    BUDGET_VAR: "budgetBytes",
}
_DEFAULT_OF: dict[str, str] = {
    ENABLED_VAR: "true",
    THRESHOLD_VAR: str(THRESHOLD_DEFAULT),
    BUDGET_VAR: str(BUDGET_DEFAULT),
}


@dataclass(frozen=True)
class Finding:
    severity: Severity
    area: Area
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


@dataclass(frozen=True)
class StatusReport:
    namespace: str
    policy_name: str
    generation: int | None
    observed_generation: int | None
    spec: PolicySpec | None
    raw_spec: Mapping[str, Any]
    conditions: list[Mapping[str, Any]]
    kill_switch_engaged_at: str | None
    status_effective: Any
    deployment_name: str | None
    deployment_found: bool
    container_name: str | None
    desired_env: dict[str, str | None] | None
    actual_env: dict[str, str | None] | None
    passthrough_missing: list[str] | None
    rollout: RolloutState | None
    findings: list[Finding] = field(default_factory=list)

    def problems(self, *, ignore: tuple[Area, ...] = ()) -> list[Finding]:
        """The findings that make the state not consistent (notes never do)."""
        return [f for f in self.findings if f.severity != "NOTE" and f.area not in ignore]

    @property
    def consistent(self) -> bool:
        return not self.problems()

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        for cond in self.conditions:
            if cond.get("type") == kind:
                return cond
        return None


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _show(value: str | None, var: str) -> str:
    if value is None:
        return f"unset (mcp-host default {_DEFAULT_OF[var]})" if var in _DEFAULT_OF else "unset"
    if value == VALUE_FROM:
        return "set through valueFrom (not a literal value)"
    return value


def _operator_hint(
    generation: int | None, observed: int | None, ready: Mapping[str, Any] | None
) -> str:
    """Why the Deployment may not match the policy, judged from the policy status."""
    if observed is None:
        return (
            "the operator has never processed this policy (no status.observedGeneration; "
            "is it running?)"
        )
    if generation is not None and observed < generation:
        return (
            f"the operator has not applied it yet (generation {generation}, observed "
            f"{observed}; is it running?)"
        )
    if ready is not None and ready.get("status") != "True":
        return (
            f"the operator could not apply it (Ready={ready.get('status')} "
            f"reason={ready.get('reason')}: {ready.get('message')})"
        )
    return (
        "the Deployment was changed after the operator applied it (drift; a running "
        "operator restores it with a DriftCorrected Event)"
    )


def assess(
    policy: Mapping[str, Any],
    deployment: Mapping[str, Any] | None,
) -> StatusReport:
    """Compare a SpilloverPolicy (API JSON) with its target Deployment (API JSON, or None
    when it does not exist) and list every mismatch and not-ready state."""
    meta = policy.get("metadata") or {}
    status = policy.get("status") or {}
    raw_spec = policy.get("spec") or {}
    generation = _opt_int(meta.get("generation"))
    observed = _opt_int(status.get("observedGeneration"))
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    kill = status.get("killSwitch") or {}
    engaged_at = kill.get("engagedAt") if isinstance(kill, Mapping) else None
    findings: list[Finding] = []

    spec: PolicySpec | None = None
    try:
        spec = parse_spec(raw_spec)
    except InvalidSpecError as exc:
        findings.append(
            Finding(
                "MISMATCH",
                "spec",
                "the policy spec is invalid, so the operator will not apply it: "
                + "; ".join(exc.problems),
            )
        )

    ready = next((c for c in conditions if c.get("type") == COND_READY), None)
    if observed is None:
        findings.append(
            Finding(
                "PENDING",
                "operator",
                "the operator has never reported on this policy (no status.observedGeneration)"
                " — is it running?",
            )
        )
    elif generation is not None and observed < generation:
        findings.append(
            Finding(
                "PENDING",
                "operator",
                f"the operator has not processed generation {generation} yet (observedGeneration"
                f" {observed}) — is it running?",
            )
        )
    elif ready is None:
        findings.append(Finding("PENDING", "operator", "the policy has no Ready condition yet"))
    elif ready.get("status") != "True":
        findings.append(
            Finding(
                "PENDING" if ready.get("reason") in PENDING_REASONS else "MISMATCH",
                "operator",
                f"policy Ready={ready.get('status')} reason={ready.get('reason')}: "
                f"{ready.get('message')}",
            )
        )

    deployment_name = spec.deployment if spec else _raw_target(raw_spec, "deployment")
    container_name: str | None = None
    desired: dict[str, str | None] | None = render_env(spec) if spec else None
    actual: dict[str, str | None] | None = None
    missing: list[str] | None = None
    rollout: RolloutState | None = None

    if deployment is None:
        if deployment_name:
            findings.append(
                Finding(
                    "MISMATCH",
                    "target",
                    f"the target Deployment {deployment_name!r} does not exist in namespace "
                    f"{meta.get('namespace')!r}",
                )
            )
    else:
        rollout = rollout_state(deployment)
        wanted_container = spec.container if spec else _raw_target(raw_spec, "container")
        try:
            actual = effective_env(deployment, wanted_container)
        except TargetError as exc:
            findings.append(Finding("MISMATCH", "target", str(exc)))
        else:
            container_name = _container_name(deployment, wanted_container)
            hint = _operator_hint(generation, observed, ready)
            if desired is not None:
                for var in SPILLOVER_VARS:
                    want, have = desired[var], actual.get(var)
                    if want != have:
                        findings.append(
                            Finding(
                                "MISMATCH",
                                "env",
                                f"policy says {SPEC_FIELD_OF[var]}={_show(want, var)}, "
                                f"Deployment has {var}={_show(have, var)} — {hint}",
                            )
                        )
            passthrough = actual.get(PASSTHROUGH_VAR)
            if passthrough == VALUE_FROM:
                missing = list(SPILLOVER_VARS)
                findings.append(
                    Finding(
                        "MISMATCH",
                        "passthrough",
                        f"{PASSTHROUGH_VAR} is set through valueFrom: cannot tell whether the "
                        "WRC forwards the spillover variables to mcp-host pods",
                    )
                )
            else:
                names = passthrough_names(passthrough)
                missing = [v for v in SPILLOVER_VARS if v not in names]
                if missing:
                    findings.append(
                        Finding(
                            "MISMATCH",
                            "passthrough",
                            f"{PASSTHROUGH_VAR} lacks {', '.join(missing)}: the WRC does not "
                            f"forward {'it' if len(missing) == 1 else 'them'} to mcp-host pods"
                            f" — {hint}",
                        )
                    )
        if not rollout.complete:
            findings.append(
                Finding(
                    "PENDING",
                    "rollout",
                    f"rollout not complete: {rollout.message} (updated {rollout.updated}, "
                    f"available {rollout.available}, desired {rollout.desired}); running pods "
                    "keep the environment they started with",
                )
            )

    effective = status.get("effective")
    if isinstance(effective, Mapping) and actual is not None:
        now_in_effect = effective_status(actual)
        differing = sorted(
            key
            for key in {*effective, *now_in_effect}
            if effective.get(key) != now_in_effect.get(key)
        )
        if differing:
            said = ", ".join(f"{k}={effective.get(k, 'unset')}" for k in differing)
            has = ", ".join(f"{k}={now_in_effect.get(k, 'unset')}" for k in differing)
            findings.append(
                Finding(
                    "NOTE",
                    "operator",
                    f"status.effective (the operator's last report) says {said}; the Deployment "
                    f"has {has} now: the policy status is stale",
                )
            )

    if spec is not None and not spec.enabled and not engaged_at and observed == generation:
        findings.append(
            Finding("NOTE", "operator", "status.killSwitch.engagedAt is not set by the operator")
        )

    return StatusReport(
        namespace=str(meta.get("namespace") or ""),
        policy_name=str(meta.get("name") or ""),
        generation=generation,
        observed_generation=observed,
        spec=spec,
        raw_spec=raw_spec if isinstance(raw_spec, Mapping) else {},
        conditions=conditions,
        kill_switch_engaged_at=str(engaged_at) if engaged_at else None,
        status_effective=status.get("effective"),
        deployment_name=deployment_name,
        deployment_found=deployment is not None,
        container_name=container_name,
        desired_env=desired,
        actual_env=actual,
        passthrough_missing=missing,
        rollout=rollout,
        findings=findings,
    )


def _raw_target(raw_spec: Any, key: str) -> str | None:
    if not isinstance(raw_spec, Mapping):
        return None
    target = raw_spec.get("target")
    if isinstance(target, Mapping) and isinstance(target.get(key), str):
        return str(target[key])
    return None


def _container_name(deployment: Mapping[str, Any], wanted: str | None) -> str | None:
    if wanted is not None:
        return wanted
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    first = (containers.get("containers") or [{}])[0]
    return str(first.get("name")) if isinstance(first, Mapping) else None


# ---- rendering ---------------------------------------------------------------------------


def _spec_line(report: StatusReport) -> str:
    spec = report.spec
    if spec is None:
        return f"spec (invalid): {dict(report.raw_spec)}"
    threshold = (
        str(spec.threshold_bytes)
        if spec.threshold_bytes is not None
        else f"unset (default {THRESHOLD_DEFAULT})"
    )
    budget = (
        str(spec.budget_bytes)
        if spec.budget_bytes is not None
        else f"unset (default {BUDGET_DEFAULT})"
    )
    return (
        f"enabled={'true' if spec.enabled else 'false'}  thresholdBytes={threshold}  "
        f"budgetBytes={budget}  onDelete={spec.on_delete}"
    )


def summary(report: StatusReport) -> str:
    """One line: what is in effect, or how many problems there are."""
    problems = report.problems()
    if problems:
        n = len(problems)
        return f"NOT CONSISTENT: {n} problem{'s' if n != 1 else ''} (listed above)"
    spec = report.spec
    state = "ON" if spec is not None and spec.enabled else "OFF (kill switch engaged)"
    return (
        f"OK: spillover is {state} on Deployment {report.namespace}/{report.deployment_name}; "
        "policy applied and rollout complete"
    )


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
    for kind in (COND_READY, COND_APPLIED):
        cond = report.condition(kind)
        if cond is None:
            lines.append(f"  {kind + ':':<13} (not reported)")
        else:
            lines.append(
                f"  {kind + ':':<13} {cond.get('status')} reason={cond.get('reason')} "
                f"since {cond.get('lastTransitionTime')}: {cond.get('message')}"
            )
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
                lines.append(f"  {var:<{width}} = {_show(have, var):<40} {mark}")
            passthrough = report.actual_env.get(PASSTHROUGH_VAR)
            shown = "unset" if passthrough is None else _show(passthrough, PASSTHROUGH_VAR)
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
        "findings": [
            {"severity": f.severity, "area": f.area, "message": f.message} for f in report.findings
        ],
    }
