"""What is in effect compared with what the policy says, from plain dicts (no cluster):
the policy, the target container's env, the rollout, and every mismatch between them.

`assess(policy, deployment)` is pure. `spilloverctl status` prints its result
(cli/report.py), the client's wait loop polls it, the harness preflight reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from spillover_operator.domain.change_record import LastChange, last_change
from spillover_operator.domain.constants import REFRESH_REQUEST_ANNOTATION, VALUE_FROM
from spillover_operator.domain.envplan import (
    TargetError,
    effective_env,
    envfrom_shadowed,
    passthrough_names,
    render_env,
    resolved_env,
    shadow_notes,
)
from spillover_operator.domain.model import (
    COND_READY,
    COND_RECIPE_PODS,
    DEFAULTS,
    ENV_FIELDS,
    PASSTHROUGH_VAR,
    PENDING_REASONS,
    REASON_STALE_AFTER_REFRESH,
    SPILLOVER_VARS,
    PolicySpec,
)
from spillover_operator.domain.policy import InvalidSpecError, parse_spec, target_of
from spillover_operator.domain.recipe_pods import MAX_LISTED, RecipePods
from spillover_operator.domain.resolved_env import ConfigMapLookup, Resolved, no_config_maps
from spillover_operator.domain.rollout import RolloutState, rollout_state
from spillover_operator.domain.status import resolved_status

# Which part of the system a finding is about. `--direct --wait` ignores "operator"
# findings (the operator may be down); everything else must be clear.
Area = Literal["spec", "operator", "target", "env", "passthrough", "rollout", "recipe-pods"]
Severity = Literal["MISMATCH", "PENDING", "NOTE"]

# The spec field behind each variable, for messages a platform operator can act on.
SPEC_FIELD_OF: dict[str, str] = {f.var: f.key for f in ENV_FIELDS}


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
    # The variables as the WRC process sees them (env, valueFrom, envFrom), and notes on
    # envFrom sources that set a variable whose spec field is unset.
    resolved: dict[str, Resolved] | None = None
    env_notes: list[str] = field(default_factory=list)
    # The recipe mcp-host pods (None: not looked at, see `with_recipe_pods`).
    recipe_pods: RecipePods | None = None
    recipe_pods_error: str | None = None
    # The change that made the current generation: who, when, why, with what
    # (change_record.py), or that nobody recorded it.
    last_change: LastChange | None = None
    # A `--refresh-recipe-pods` request on the policy, and the last one the operator
    # carried out.
    refresh_requested: str | None = None
    refresh_handled: str | None = None

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


def show_resolved(found: Resolved | None, var: str) -> str:
    """A resolved variable for people: the value and where it comes from when that is
    not a plain env entry; `unset (mcp-host default ...)`; `unknown (why)`."""
    if found is None or found.state == "unset":
        return show_value(None, var)
    if found.state == "unknown":
        return f"unknown ({found.source})"
    if found.source == "env":
        return str(found.value)
    return f"{found.value} (from {found.source})"


def _matches(want: str | None, found: Resolved | None) -> bool:
    if found is None:
        return want is None
    if want is None:
        return found.state == "unset"
    return found.state == "set" and found.value == want


def show_value(value: str | None, var: str) -> str:
    """A variable's value for people: unset (with the mcp-host default), valueFrom, or it."""
    if value is None:
        return f"unset (mcp-host default {DEFAULTS[var]})" if var in DEFAULTS else "unset"
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
    *,
    config_maps: ConfigMapLookup = no_config_maps,
) -> StatusReport:
    """Compare a SpilloverPolicy (API JSON) with its target Deployment (API JSON, or None
    when it does not exist) and list every mismatch and not-ready state. The WRC
    container's values are resolved as its process sees them (`config_maps` reads the
    ConfigMaps it references; without it they are `unknown`)."""
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

    target = target_of(raw_spec)
    deployment_name = target.deployment if target else None
    container_name: str | None = None
    desired: dict[str, str | None] | None = render_env(spec) if spec else None
    actual: dict[str, str | None] | None = None
    resolved: dict[str, Resolved] | None = None
    notes: list[str] = []
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
        wanted_container = target.container if target else None
        try:
            literal = effective_env(deployment, wanted_container)
            resolved = resolved_env(deployment, wanted_container, config_maps)
            shadowed = envfrom_shadowed(deployment, wanted_container, config_maps)
        except TargetError as exc:
            findings.append(Finding("MISMATCH", "target", str(exc)))
        else:
            actual = {var: _value_of(resolved[var]) for var in SPILLOVER_VARS}
            actual[PASSTHROUGH_VAR] = literal.get(PASSTHROUGH_VAR)
            container_name = _container_name(deployment, wanted_container)
            hint = _operator_hint(generation, observed, ready)
            if spec is not None:
                desired = render_env(spec, shadowed)
                notes = shadow_notes(spec, shadowed)
                findings.extend(Finding("NOTE", "env", note) for note in notes)
            if desired is not None:
                for var in SPILLOVER_VARS:
                    want, have = desired[var], resolved.get(var)
                    if not _matches(want, have):
                        findings.append(
                            Finding(
                                "MISMATCH",
                                "env",
                                f"policy says {SPEC_FIELD_OF[var]}={show_value(want, var)}, "
                                f"the WRC container has {var}={show_resolved(have, var)} — "
                                f"{hint}",
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
    if isinstance(effective, Mapping) and resolved is not None:
        now_in_effect, _ = resolved_status(resolved)
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
        resolved=resolved,
        env_notes=notes,
        last_change=last_change(policy),
        refresh_requested=_annotation(meta, REFRESH_REQUEST_ANNOTATION),
        refresh_handled=_handled(status),
    )


def _handled(status: Mapping[str, Any]) -> str | None:
    pods = status.get("recipePods")
    value = pods.get("handledRequest") if isinstance(pods, Mapping) else None
    return value if isinstance(value, str) else None


def _value_of(found: Resolved) -> str | None:
    """The value as a string: None when unset, "unknown" when it may not be read."""
    if found.state == "set":
        return found.value
    return None if found.state == "unset" else "unknown"


def _annotation(meta: Mapping[str, Any], key: str) -> str | None:
    value = (meta.get("annotations") or {}).get(key)
    return value if isinstance(value, str) and value else None


def with_recipe_pods(
    report: StatusReport, pods: RecipePods | None, *, error: str | None = None
) -> StatusReport:
    """The report with the recipe mcp-host pods: a stale pod is not in effect yet
    (PENDING: `--wait` waits for it, `status` exits 6); a refresh the operator gave up
    on (RecipePodsCurrent reason StaleAfterRefresh) is a MISMATCH waiting cannot fix;
    unknown pods and no matched pod are notes."""
    findings = list(report.findings)
    if report.refresh_requested and report.refresh_requested != report.refresh_handled:
        findings.append(
            Finding(
                "PENDING",
                "recipe-pods",
                "the refresh of the recipe pods requested with --refresh-recipe-pods is not "
                "finished yet (the operator records it in status.recipePods.handledRequest)",
            )
        )
    if error is not None:
        findings.append(Finding("NOTE", "recipe-pods", f"recipe pods not checked: {error}"))
    if pods is not None:
        stale = pods.stale_pods()
        for verdict in stale[:MAX_LISTED]:
            findings.append(
                Finding(
                    "PENDING",
                    "recipe-pods",
                    f"recipe pod {verdict.name} ({verdict.owner}) is stale: {verdict.why}",
                )
            )
        if len(stale) > MAX_LISTED:
            findings.append(
                Finding(
                    "PENDING",
                    "recipe-pods",
                    f"{len(stale) - MAX_LISTED} more recipe pods are stale",
                )
            )
        cond = report.condition(COND_RECIPE_PODS)
        if (
            stale
            and cond is not None
            and cond.get("reason") == REASON_STALE_AFTER_REFRESH
            and cond.get("observedGeneration") == report.generation
        ):
            findings.append(
                Finding(
                    "MISMATCH",
                    "recipe-pods",
                    f"RecipePodsCurrent=False reason=StaleAfterRefresh: {cond.get('message')}",
                )
            )
        unknown = [p for p in pods.pods if p.state == "unknown"]
        for verdict in unknown[:MAX_LISTED]:
            findings.append(
                Finding(
                    "NOTE",
                    "recipe-pods",
                    f"recipe pod {verdict.name}: values unknown ({verdict.why})",
                )
            )
        if pods.matched == 0:
            findings.append(
                Finding(
                    "NOTE",
                    "recipe-pods",
                    f"no pod matches spec.recipePods.selector ({pods.selector}); if recipes "
                    "are running, the selector is wrong",
                )
            )
    return replace(report, findings=findings, recipe_pods=pods, recipe_pods_error=error)


def _container_name(deployment: Mapping[str, Any], wanted: str | None) -> str | None:
    if wanted is not None:
        return wanted
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    first = (containers.get("containers") or [{}])[0]
    return str(first.get("name")) if isinstance(first, Mapping) else None
