"""`spilloverctl kill / restore / set`: change the policy (and with `--direct` the
Deployment too), then optionally wait until the change is in effect."""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from spillover_operator import exit_codes
from spillover_operator.client import (
    ClientError,
    Connection,
    NotFound,
    OperatorRefused,
    TimedOut,
    get_policy,
    patch_policy,
)
from spillover_operator.domain.change_record import ChangeRecord, LastChange
from spillover_operator.domain.constants import (
    CHANGE_RECORD_ANNOTATION,
    COND_READY,
    LEGACY_CHANGE_REASON_ANNOTATION,
    REFRESH_REQUEST_ANNOTATION,
)
from spillover_operator.domain.model import REASON_STALE_AFTER_REFRESH
from spillover_operator.domain.policy import InvalidSpecError, PolicySpec, parse_spec, spec_to_json

from .errors import BadInput

# `kill` without --wait or --direct is one GET of the policy, one SelfSubjectReview (who
# the change record names) and one PATCH: the modules
# for waiting, --direct and the recipe pods are imported where they are used, so that
# the plain kill switch starts as fast as it can (docs/spilloverctl.md).
if TYPE_CHECKING:
    from spillover_operator.domain.assess import StatusReport
    from spillover_operator.domain.envplan import EnvPlan
    from spillover_operator.observed import WaitProgress

JsonDict = dict[str, Any]


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


@dataclass(frozen=True)
class Options:
    """`--reason`, `--refresh-recipe-pods` and whether `--wait` waits for the recipe pods
    (not with `--no-wait-recipe-pods`)."""

    reason: str | None = None
    refresh_recipe_pods: bool = False
    wait_recipe_pods: bool = True


def set_change(fields: dict[str, Any]) -> Change:
    return Change("set", fields, "SetDirect")


def _fmt(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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
        raise BadInput(
            f"{where}: the policy spec would be invalid after this change, so nothing was "
            f"changed:\n{problems}\nFix the policy first (kubectl edit spilloverpolicy ...)."
        ) from None


def _old_spec(raw_spec: Mapping[str, Any]) -> PolicySpec | None:
    try:
        return parse_spec(raw_spec)
    except InvalidSpecError:
        return None


@dataclass(frozen=True)
class Written:
    """The policy after the write, and what changed."""

    policy: JsonDict
    old_spec: PolicySpec | None
    new_spec: PolicySpec
    spec_changes: bool
    record: ChangeRecord | None


def cmd_change(
    cluster: Connection,
    name: str,
    change: Change,
    *,
    direct: bool,
    wait: bool,
    timeout: float,
    out: TextIO,
    err: TextIO,
    options: Options | None = None,
) -> int:
    options = options or Options()
    ref = f"SpilloverPolicy {cluster.namespace}/{name}"
    identity = _Identity(cluster, options, err)
    from spillover_operator.client import retry_on_conflict

    written = retry_on_conflict(
        lambda: _write_policy(cluster, name, change, options, identity, direct, out),
        what=ref,
    )
    policy, new_spec, spec_changes = written.policy, written.new_spec, written.spec_changes
    if written.record is not None:
        described = LastChange(written.record.generation, written.record).describe()
        out.write(f"{ref}: change recorded: {described}\n")
    elif options.reason and not spec_changes:
        out.write(
            f"{ref}: reason not recorded: the spec did not change, and a change record only "
            "describes the spec change it comes with\n"
        )
    if options.refresh_recipe_pods and not direct:
        out.write(
            f"{ref}: refresh of the recipe pods requested: the operator restarts the owners "
            "of stale recipe pods once the WRC rollout is complete\n"
        )

    plan: EnvPlan | None = None
    if direct:
        try:
            deployment, plan = _apply_direct(cluster, new_spec)
        except ClientError as exc:
            # Say exactly what state the emergency path left behind.
            done = "was updated" if spec_changes else "already had these values"
            raise exc.with_message(
                f"{ref} {done} ({change.describe()}), but the direct patch of Deployment "
                f"{cluster.namespace}/{new_spec.deployment} failed: {exc.message}\n"
                "Run the same command again; it re-reads the Deployment and patches only "
                "what still differs."
            ) from None
        dep_ref = f"Deployment {cluster.namespace}/{new_spec.deployment}"
        if plan.noop:
            out.write(f"{dep_ref}: already matches the policy; nothing to change\n")
        else:
            out.write(f"{dep_ref}: patched directly (operator bypassed):\n")
            for c in plan.changes:
                out.write(f"  {c.name}: {_fmt(c.before)} -> {_fmt(c.after)}\n")
        if spec_changes or not plan.noop:
            _record_direct_events(
                cluster, change, policy, deployment, plan, out, err, options, identity.user()
            )
    elif not spec_changes and not options.refresh_recipe_pods:
        out.write("the operator has nothing new to apply\n")

    def progress(look: WaitProgress) -> None:
        from .report import progress_line

        err.write(progress_line(look) + "\n")
        err.flush()

    if direct and options.refresh_recipe_pods:
        from spillover_operator.observed import wait_until_settled

        # The WRC first: restarted recipe pods get what the WRC runs.
        wait_until_settled(
            cluster, name, direct=True, timeout=timeout, progress=progress, recipe_pods=False
        )
        _refresh_direct(cluster, name, timeout, out)

    if not wait:
        if not direct and spec_changes:
            out.write(
                "the operator applies it to the Deployment; follow with "
                f"`spilloverctl -n {cluster.namespace} status {name}` or use --wait\n"
            )
        return exit_codes.OK

    from spillover_operator.observed import wait_until_settled

    report = wait_until_settled(
        cluster,
        name,
        direct=direct,
        timeout=timeout,
        progress=progress,
        recipe_pods=options.wait_recipe_pods,
    )
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
    out.write(_pods_line(cluster, name, report, options) + "\n")
    return exit_codes.OK


class _Identity:
    """The authenticated user, asked from the API server once (SelfSubjectReview), only
    when a change is written. With `--reason` a failure to learn it stops the command
    before anything is written; without, the change goes ahead with no record (noted)."""

    def __init__(self, cluster: Connection, options: Options, err: TextIO) -> None:
        self.cluster, self.options, self.err = cluster, options, err
        self._asked = False
        self._user: str | None = None

    def user(self) -> str | None:
        if self._asked:
            return self._user
        from spillover_operator.client import authenticated_user

        self._asked = True
        try:
            self._user = authenticated_user(self.cluster)
        except ClientError as exc:
            if self.options.reason:
                raise exc.with_message(
                    f"cannot learn who you are from the API server, which --reason records "
                    f"with the change; nothing was changed: {exc.message}. Run without "
                    "--reason to change the policy anyway (it is then recorded as changed "
                    "without a reason by an unknown user)."
                ) from None
            self.err.write(
                f"spilloverctl: note: no change record written (cannot learn who you are "
                f"from the API server: {exc.message}); the change is recorded as made "
                "without a reason by an unknown user\n"
            )
        return self._user


def _write_policy(
    cluster: Connection,
    name: str,
    change: Change,
    options: Options,
    identity: _Identity,
    direct: bool,
    out: TextIO,
) -> Written:
    """Read the policy, write the change with its record (Conflict when the policy
    changed since the read: the record names the generation this write makes)."""
    ref = f"SpilloverPolicy {cluster.namespace}/{name}"
    policy = get_policy(cluster, name)
    raw_spec = policy.get("spec") or {}
    new_spec = _new_spec(raw_spec, change, ref)
    old_spec = _old_spec(raw_spec)
    spec_changes = not old_spec or spec_to_json(old_spec) != spec_to_json(new_spec)

    # --direct: check the target before writing anything, so a missing Deployment or
    # container leaves the policy untouched too.
    if direct:
        from spillover_operator.client import get_deployment

        deployment = get_deployment(cluster, new_spec.deployment)
        _plan_or_fail(cluster, deployment, new_spec)

    meta = policy.get("metadata") or {}
    generation = meta.get("generation")
    record: ChangeRecord | None = None
    if spec_changes or direct:
        user = identity.user()
        if spec_changes and user is not None and isinstance(generation, int):
            record = ChangeRecord(
                user=user,
                generation=generation + 1,
                time=_now().strftime("%Y-%m-%dT%H:%M:%SZ"),
                tool=f"spilloverctl {change.command}" + (" --direct" if direct else ""),
                reason=(options.reason or "").strip() or None,
            )
    annotations = _annotations(options, record, spec_changes, direct)
    if spec_changes:
        body: dict[str, Any] = {
            "spec": dict(change.fields),
            "metadata": {"annotations": annotations},
        }
        patched = patch_policy(
            cluster, name, body, resource_version=str(meta.get("resourceVersion") or "") or None
        )
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
        if annotations:
            policy = patch_policy(cluster, name, {"metadata": {"annotations": annotations}})
    return Written(policy, old_spec, new_spec, spec_changes, record)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pods_line(cluster: Connection, name: str, report: StatusReport, options: Options) -> str:
    if options.wait_recipe_pods:
        pods = report.recipe_pods
        if pods is None:
            return f"recipe pods: not checked ({report.recipe_pods_error or 'no valid spec'})"
        if pods.matched == 0:
            return f"recipe pods: none matched ({pods.selector})"
        return f"recipe pods: all {pods.matched} run the policy's values" + (
            f" ({pods.count('unknown')} unknown)" if pods.count("unknown") else ""
        )
    from spillover_operator.observed import observe

    now = observe(cluster, name).recipe_pods
    if now is None:
        return "recipe pods: NOT waited for (--no-wait-recipe-pods) and not checked"
    stale = [p.name for p in now.stale_pods()]
    listed = f": {', '.join(stale[:10])}" if stale else ""
    return (
        f"recipe pods: NOT waited for (--no-wait-recipe-pods); {len(stale)} of {now.matched} "
        f"still run old values{listed}"
    )


def _annotations(
    options: Options, record: ChangeRecord | None, spec_changes: bool, direct: bool
) -> dict[str, Any]:
    """The policy annotations this command writes: with a spec change its record (or
    none: an older record is removed, it describes another change) and the legacy
    free-text reason removed; a refresh request token for the operator (not with
    --direct: spilloverctl refreshes itself)."""
    annotations: dict[str, Any] = {}
    if spec_changes:
        annotations[CHANGE_RECORD_ANNOTATION] = record.encode() if record else None
        annotations[LEGACY_CHANGE_REASON_ANNOTATION] = None
    if options.refresh_recipe_pods and not direct:
        # A unique token, not a signature: who asked is not in it (nobody checks it).
        annotations[REFRESH_REQUEST_ANNOTATION] = f"{_now().isoformat()} {secrets.token_hex(4)}"
    return annotations


REFRESH_POLL = 1.0


def _refresh_direct(cluster: Connection, name: str, timeout: float, out: TextIO) -> None:
    """`--direct --refresh-recipe-pods`: what the operator would do, one owner at a time,
    until no owner is left to restart."""
    from spillover_operator.domain.recipe_pods import next_refresh
    from spillover_operator.domain.status import now_rfc3339
    from spillover_operator.observed import observe, read_owner_states
    from spillover_operator.reconciler.recipe_reconcile import (
        RefreshRecord,
        describe_step,
        run_step,
    )

    record = RefreshRecord()
    deadline = time.monotonic() + timeout
    while True:
        report = observe(cluster, name)
        pods = report.recipe_pods
        if pods is None:
            out.write(f"recipe pods: not refreshed ({report.recipe_pods_error or 'not read'})\n")
            return
        owners = read_owner_states(cluster, {v.owner for v in pods.pods if v.owner.restartable})
        step = next_refresh(
            pods,
            record.at,
            record.pods,
            times=record.times,
            owners=owners,
            generations=record.generations,
        )
        if step.stale_after_refresh:
            named = ", ".join(str(o) for o in step.stale_after_refresh)
            raise OperatorRefused(
                f"{REASON_STALE_AFTER_REFRESH}: restarted {named}, but its new pods still run "
                "old values: its pod template carries them (the WRC did not re-render it). "
                "spilloverctl does not write env into workloads the WRC owns; fix it there",
                reason=REASON_STALE_AFTER_REFRESH,
            )
        if step.action in ("restart", "delete") and step.owner is not None:
            at = now_rfc3339()
            generation = run_step(cluster, step, at)
            record.note(step.owner, at, len(step.pods), generation)
            out.write(f"recipe pods: {describe_step(step, record.times[step.owner])}\n")
            continue
        if step.action == "wait":
            if time.monotonic() > deadline:
                raise TimedOut(
                    f"timed out after {timeout:g}s waiting for {step.owner}: {step.why}",
                    pending=[p.name for p in pods.stale_pods()],
                )
            time.sleep(REFRESH_POLL)
            continue
        if step.unrefreshable:
            out.write(
                "recipe pods: not refreshed (no controller recreates them): "
                + ", ".join(step.unrefreshable)
                + "\n"
            )
        return


def _field(spec: PolicySpec | None, key: str) -> Any:
    if spec is None:
        return None
    return spec_to_json(spec).get(key)


def _plan_or_fail(cluster: Connection, deployment: JsonDict, spec: PolicySpec) -> EnvPlan:
    """The operator's plan (`envplan.plan_apply`, the ConfigMaps of the target's envFrom
    read from the cluster), so `--direct` writes what the operator would write."""
    from spillover_operator.client import config_map_lookup
    from spillover_operator.domain.envplan import TargetError, plan_apply

    try:
        return plan_apply(deployment, spec, config_maps=config_map_lookup(cluster))
    except TargetError as exc:
        raise NotFound(
            f"cannot patch the Deployment directly: {exc} (namespace {cluster.namespace!r}); "
            "nothing was changed"
        ) from None


def _apply_direct(cluster: Connection, spec: PolicySpec) -> tuple[JsonDict, EnvPlan]:
    """Read, plan and patch the target; re-read and re-plan when it changed in between."""
    from spillover_operator.client import get_deployment, patch_deployment_env, retry_on_conflict

    def attempt() -> tuple[JsonDict, EnvPlan]:
        deployment = get_deployment(cluster, spec.deployment)
        plan = _plan_or_fail(cluster, deployment, spec)
        if plan.noop:
            return deployment, plan
        return patch_deployment_env(cluster, spec.deployment, plan), plan

    return retry_on_conflict(attempt, what=f"Deployment {cluster.namespace}/{spec.deployment}")


def _record_direct_events(
    cluster: Connection,
    change: Change,
    policy: JsonDict,
    deployment: JsonDict,
    plan: EnvPlan,
    out: TextIO,
    err: TextIO,
    options: Options,
    user: str | None,
) -> None:
    """An Event on the policy and the Deployment, naming the authenticated user; lacking
    RBAC for Events is a note, never a failure of the kill switch."""
    from spillover_operator.client import post_event

    if plan.noop:
        deployment_part = "Deployment env already matched (not patched)"
    else:
        env = "; ".join(f"{c.name}={_fmt(c.after)}" for c in plan.changes)
        deployment_part = f"Deployment patched without the operator ({env})"
    message = (
        f"spilloverctl {change.command} --direct by {user or 'an unknown user'}: "
        f"policy {change.describe()}, {deployment_part}"
    )
    if options.reason:
        message += f" (reason: {options.reason.strip()})"
    for obj in (policy, deployment):
        what = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        try:
            post_event(cluster, obj, "Normal", change.direct_reason, message)
        except ClientError as exc:
            err.write(f"spilloverctl: note: no Event recorded on {what}: {exc.message}\n")
        else:
            out.write(f"Event {change.direct_reason} recorded on {what}\n")


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
