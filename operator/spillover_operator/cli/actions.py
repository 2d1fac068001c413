"""The commands that talk to the cluster: status, kill/restore/set (through the operator or
`--direct`), and waiting for the result."""

from __future__ import annotations

import getpass
import json
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from spillover_operator.constants import COND_READY
from spillover_operator.envplan import EnvPlan, TargetError, plan_apply
from spillover_operator.policy import InvalidSpecError, PolicySpec, parse_spec, spec_to_json

from .assess import Area, Finding, StatusReport, assess, format_text, report_to_json
from .cluster import Cluster, JsonDict, retry_on_conflict
from .errors import (
    EXIT_NOT_CONSISTENT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    CliError,
)

UNSET = None  # a field set to None in a Change is removed from the spec


@dataclass(frozen=True)
class Change:
    """What kill / restore / set asks for: camelCase spec fields, None = remove the field."""

    command: str
    fields: dict[str, Any]
    direct_reason: str

    def describe(self) -> str:
        return ", ".join(f"{k}={_fmt(v)}" for k, v in self.fields.items())


KILL = Change("kill", {"enabled": False}, "KillSwitchDirect")
RESTORE = Change("restore", {"enabled": True}, "RestoreDirect")


def set_change(fields: dict[str, Any]) -> Change:
    return Change("set", fields, "SetDirect")


def _fmt(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---- status --------------------------------------------------------------------------------


def target_name(policy: Mapping[str, Any]) -> str | None:
    target = (policy.get("spec") or {}).get("target")
    if isinstance(target, Mapping) and isinstance(target.get("deployment"), str):
        return str(target["deployment"])
    return None


def observe(cluster: Cluster, name: str) -> StatusReport:
    policy = cluster.get_policy(name)
    dep_name = target_name(policy)
    deployment = cluster.find_deployment(dep_name) if dep_name else None
    return assess(policy, deployment)


def cmd_status(cluster: Cluster, name: str, output: str, out: TextIO) -> int:
    report = observe(cluster, name)
    if output == "json":
        out.write(json.dumps(report_to_json(report), indent=2) + "\n")
    else:
        out.write(format_text(report) + "\n")
    if report.deployment_name and not report.deployment_found:
        return EXIT_NOT_FOUND
    return EXIT_OK if report.consistent else EXIT_NOT_CONSISTENT


# ---- kill / restore / set ------------------------------------------------------------------


def _new_spec(raw_spec: Mapping[str, Any], change: Change, where: str) -> PolicySpec:
    merged = dict(raw_spec)
    for key, value in change.fields.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    try:
        return parse_spec(merged)
    except InvalidSpecError as exc:
        problems = "\n".join(f"  - {p}" for p in exc.problems)
        raise CliError(
            f"{where}: the policy spec would be invalid after this change, so nothing was "
            f"changed:\n{problems}\nFix the policy first (kubectl edit spilloverpolicy ...).",
            EXIT_USAGE,
        ) from None


def _old_spec(raw_spec: Mapping[str, Any]) -> PolicySpec | None:
    try:
        return parse_spec(raw_spec)
    except InvalidSpecError:
        return None


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def cmd_change(
    cluster: Cluster,
    name: str,
    change: Change,
    *,
    direct: bool,
    wait: bool,
    timeout: float,
    out: TextIO,
    err: TextIO,
) -> int:
    ref = f"SpilloverPolicy {cluster.namespace}/{name}"
    policy = cluster.get_policy(name)
    raw_spec = policy.get("spec") or {}
    new_spec = _new_spec(raw_spec, change, ref)
    old_spec = _old_spec(raw_spec)
    spec_changes = not old_spec or spec_to_json(old_spec) != spec_to_json(new_spec)

    # --direct: check the target before writing anything, so a missing Deployment or
    # container leaves the policy untouched too.
    deployment: JsonDict | None = None
    if direct:
        deployment = cluster.get_deployment(new_spec.deployment)
        _plan_or_fail(deployment, new_spec, cluster.namespace)

    generation = policy.get("metadata", {}).get("generation")
    if spec_changes:
        patched = cluster.merge_patch_policy(name, {"spec": dict(change.fields)})
        new_generation = patched.get("metadata", {}).get("generation")
        before = (
            ", ".join(f"{k}={_fmt(_field(old_spec, k))}" for k in change.fields)
            if old_spec
            else "(invalid spec)"
        )
        out.write(
            f"{ref}: {before} -> {change.describe()} "
            f"(generation {generation} -> {new_generation})\n"
        )
        policy = patched
    else:
        out.write(f"{ref}: already {change.describe()}; spec unchanged (generation {generation})\n")

    plan: EnvPlan | None = None
    if direct:
        try:
            deployment, plan = _apply_direct(cluster, new_spec)
        except CliError as exc:
            # Say exactly what state the emergency path left behind.
            done = "was updated" if spec_changes else "already had these values"
            raise CliError(
                f"{ref} {done} ({change.describe()}), but the direct patch of Deployment "
                f"{cluster.namespace}/{new_spec.deployment} failed: {exc.message}\n"
                "Run the same command again; it re-reads the Deployment and patches only "
                "what still differs.",
                exc.exit_code,
            ) from None
        dep_ref = f"Deployment {cluster.namespace}/{new_spec.deployment}"
        if plan.noop:
            out.write(f"{dep_ref}: already matches the policy; nothing to change\n")
        else:
            out.write(f"{dep_ref}: patched directly (operator bypassed):\n")
            for c in plan.changes:
                out.write(f"  {c.name}: {_fmt(c.before)} -> {_fmt(c.after)}\n")
        if spec_changes or not plan.noop:
            _record_direct_events(cluster, change, policy, deployment, plan, out, err)
    elif not spec_changes:
        out.write("the operator has nothing new to apply\n")

    if not wait:
        if not direct and spec_changes:
            out.write(
                "the operator applies it to the Deployment; follow with "
                f"`spilloverctl -n {cluster.namespace} status {name}` or use --wait\n"
            )
        return EXIT_OK

    report = wait_until_settled(cluster, name, direct=direct, timeout=timeout, err=err)
    if direct:
        out.write(_staleness(report) + "\n")
        out.write(
            f"Deployment {cluster.namespace}/{report.deployment_name}: env matches the policy "
            "and the rollout is complete\n"
        )
    else:
        out.write(
            f"{ref}: applied by the operator (generation {report.observed_generation}, "
            f"Ready=True) and Deployment {cluster.namespace}/{report.deployment_name} "
            "rolled out\n"
        )
    return EXIT_OK


def _field(spec: PolicySpec | None, key: str) -> Any:
    if spec is None:
        return None
    return spec_to_json(spec).get(key)


def _plan_or_fail(deployment: JsonDict, spec: PolicySpec, namespace: str) -> EnvPlan:
    try:
        return plan_apply(deployment, spec)
    except TargetError as exc:
        raise CliError(
            f"cannot patch the Deployment directly: {exc} (namespace {namespace!r}); "
            "nothing was changed",
            EXIT_NOT_FOUND,
        ) from None


def _apply_direct(cluster: Cluster, spec: PolicySpec) -> tuple[JsonDict, EnvPlan]:
    """Read, plan and patch the target; re-read and re-plan when it changed in between."""

    def attempt() -> tuple[JsonDict, EnvPlan]:
        deployment = cluster.get_deployment(spec.deployment)
        plan = _plan_or_fail(deployment, spec, cluster.namespace)
        if plan.noop:
            return deployment, plan
        return cluster.apply_deployment_plan(spec.deployment, plan), plan

    return retry_on_conflict(attempt)


def _record_direct_events(
    cluster: Cluster,
    change: Change,
    policy: JsonDict,
    deployment: JsonDict,
    plan: EnvPlan,
    out: TextIO,
    err: TextIO,
) -> None:
    if plan.noop:
        deployment_part = "Deployment env already matched (not patched)"
    else:
        env = "; ".join(f"{c.name}={_fmt(c.after)}" for c in plan.changes)
        deployment_part = f"Deployment patched without the operator ({env})"
    message = (
        f"spilloverctl {change.command} --direct by {_who()}: policy {change.describe()}, "
        f"{deployment_part}"
    )[:1024]
    for obj in (policy, deployment):
        what = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        failure = cluster.record_event(obj, reason=change.direct_reason, message=message)
        if failure is None:
            out.write(f"Event {change.direct_reason} recorded on {what}\n")
        else:
            err.write(f"spilloverctl: note: no Event recorded on {what}: {failure}\n")


def _staleness(report: StatusReport) -> str:
    gen, obs = report.generation, report.observed_generation
    if obs is None:
        return (
            "policy status: never written by the operator (is it running?); when it runs it "
            "finds the Deployment already matching and changes nothing"
        )
    if gen is not None and obs < gen:
        return (
            f"policy status: STALE (observedGeneration {obs} < generation {gen}): the operator "
            "has not processed this change (is it running?); when it does it finds nothing "
            "to change"
        )
    ready = report.condition(COND_READY)
    state = ready.get("status") if ready else "not reported"
    return f"policy status: current (observedGeneration {obs}, Ready={state})"


# ---- waiting -------------------------------------------------------------------------------


def progress_line(report: StatusReport, pending: list[Any]) -> str:
    ready = report.condition(COND_READY)
    ready_text = "?" if ready is None else f"{ready.get('status')}({ready.get('reason')})"
    obs = "never" if report.observed_generation is None else report.observed_generation
    env_diff = sum(1 for f in pending if f.area in ("env", "passthrough"))
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
    return " | ".join(parts)


# Ready=False reasons (the operator's, see reconcile.py) that waiting cannot fix: the
# operator refused the policy and touches nothing until someone changes something.
REFUSED_REASONS = ("InvalidSpec", "Conflict", "TargetNotSupported", "TargetNotAllowed")


def _fail_fast(report: StatusReport, pending: list[Finding], *, direct: bool) -> None:
    """Stop waiting when the state cannot settle by itself."""
    for finding in pending:
        if finding.area == "target":
            raise CliError(
                f"{finding.message}; nothing will roll out until that is fixed", EXIT_NOT_FOUND
            )
    if direct or report.observed_generation != report.generation:
        return
    ready = report.condition(COND_READY)
    if (
        ready is not None
        and ready.get("status") != "True"
        and ready.get("reason") in REFUSED_REASONS
    ):
        raise CliError(
            f"the operator refused generation {report.generation}: Ready=False "
            f"reason={ready.get('reason')}: {ready.get('message')}",
            EXIT_NOT_CONSISTENT,
        )


def wait_until_settled(
    cluster: Cluster,
    name: str,
    *,
    direct: bool,
    timeout: float,
    err: TextIO,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StatusReport:
    """Poll (with backoff) until the policy is applied and the rollout complete.

    Through the operator: observedGeneration == metadata.generation, Ready=True, the
    Deployment env matches and its rollout is complete. `direct`: only the Deployment
    (env matches, rollout complete); the policy status may be stale.
    Progress goes to `err` whenever it changes; CliError(3) on timeout.
    """
    ignore: tuple[Area, ...] = ("operator",) if direct else ()
    start = clock()
    delay = 0.5
    last = ""
    while True:
        report = observe(cluster, name)
        if report.deployment_name and not report.deployment_found:
            raise CliError(
                f"the target Deployment {report.deployment_name!r} does not exist in namespace "
                f"{cluster.namespace!r}; the policy is updated and the operator applies it when "
                "the Deployment appears",
                EXIT_NOT_FOUND,
            )
        pending = report.problems(ignore=ignore)
        _fail_fast(report, pending, direct=direct)
        elapsed = clock() - start
        if not pending:
            err.write(f"[{elapsed:5.1f}s] {progress_line(report, pending)}\n")
            return report
        line = progress_line(report, pending)
        if line != last:
            err.write(f"[{elapsed:5.1f}s] {line}\n")
            last = line
            delay = 0.5
        if elapsed >= timeout:
            listed = "\n".join(f"  {f}" for f in pending)
            raise CliError(
                f"timed out after {timeout:g}s waiting; the change was made but is not fully "
                f"in effect yet. Still pending:\n{listed}",
                EXIT_TIMEOUT,
            )
        sleep(max(0.05, min(delay, timeout - elapsed)))
        delay = min(delay * 1.5, 5.0)
