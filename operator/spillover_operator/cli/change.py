"""`spilloverctl kill / restore / set`: change the policy (and with `--direct` the
Deployment too), then optionally wait until the change is in effect."""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TextIO

from spillover_operator import exit_codes
from spillover_operator.client import (
    ClientError,
    Connection,
    Forbidden,
    NotFound,
    OperatorRefused,
    Rejected,
    TimedOut,
    get_policy,
    patch_policy,
)
from spillover_operator.domain.change_record import (
    RECORD_MANAGER,
    ChangeRecord,
    last_change,
    written_at,
)
from spillover_operator.domain.constants import (
    CHANGE_RECORD_ANNOTATION,
    LEGACY_CHANGE_REASON_ANNOTATION,
    REFRESH_REQUEST_ANNOTATION,
)
from spillover_operator.domain.model import COND_READY, REASON_STALE_AFTER_REFRESH, PolicySpec
from spillover_operator.domain.policy import InvalidSpecError, parse_spec, spec_to_json

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
    """What kill / restore / set asks for: camelCase spec fields, None = remove the field.

    `engage_first` (kill): the spec change is written before, and never waits on, the
    extras asked for with it (the change record of --reason, the refresh request):
    in an incident, a right someone lacks for an extra must not keep spillover ON. A
    refused extra is reported afterwards (exit code EXTRA_REFUSED). restore and set
    stay all or nothing: the change and its extras are refused together."""

    command: str
    fields: dict[str, Any]
    direct_reason: str
    engage_first: bool = False

    def describe(self) -> str:
        return ", ".join(f"{k}={_fmt(v)}" for k, v in self.fields.items())


KILL = Change("kill", {"enabled": False}, "KillSwitchDirect", engage_first=True)
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


@dataclass(frozen=True)
class RefusedExtra:
    """An extra the user asked for (`--reason`'s record, `--refresh-recipe-pods`,
    `--wait`) that was refused or failed after the change itself was made."""

    flag: str
    why: str
    fix: str


class Extras:
    """The refused extras of one command, each flag once (a conflict retry of the write
    may meet the same refusal twice). Printed as soon as they happen, so that a
    responder sees at once what is not being done while the command goes on."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.refused: dict[str, RefusedExtra] = {}

    def refuse(self, flag: str, why: str, fix: str) -> None:
        if flag in self.refused:
            return
        self.refused[flag] = RefusedExtra(flag, why, fix)
        self.err.write(f"spilloverctl: {flag} not done: {why}. {fix}\n")
        self.err.flush()


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
    on_made: Callable[[], None] | None = None,
) -> int:
    """`on_made` is called once the change itself is written (with --direct, the
    Deployment patch too), before any wait: the fleet marks the cluster as changed there,
    and may raise to end the command at that point (Ctrl-C)."""
    options = options or Options()
    ref = f"SpilloverPolicy {cluster.namespace}/{name}"
    extras = Extras(err)
    identity = _Identity(cluster, options, err, change, extras)
    from spillover_operator.client import retry_on_conflict

    written = retry_on_conflict(
        lambda: _write_policy(cluster, name, change, options, identity, direct, out, extras),
        what=ref,
    )
    policy, new_spec, spec_changes = written.policy, written.new_spec, written.spec_changes
    if written.record is not None:
        # Dated by the API server: its time of this write, in its answer to it.
        described = last_change(policy, seen_at=written_at(policy.get("metadata") or {}))
        out.write(f"{ref}: change recorded: {described.describe()}\n")
    elif options.reason and not spec_changes:
        out.write(
            f"{ref}: reason not recorded: the spec did not change, and a change record only "
            "describes the spec change it comes with\n"
        )

    # From here on the change itself is made (with --direct, once the Deployment patch
    # below is through): whatever goes wrong in what follows is an extra, reported as such.
    done = _done_line(change, cluster, new_spec, direct)
    if options.refresh_recipe_pods and not direct:
        if change.engage_first:
            _request_refresh(cluster, name, extras)
        if "--refresh-recipe-pods" not in extras.refused:
            out.write(
                f"{ref}: refresh of the recipe pods requested: the operator restarts the "
                "owners of stale recipe pods once the WRC rollout is complete\n"
            )

    if direct:
        try:
            deployment, plan = _apply_direct(cluster, new_spec)
        except ClientError as exc:
            # Say exactly what state the emergency path left behind.
            state = "was updated" if spec_changes else "already had these values"
            raise exc.with_message(
                f"{ref} {state} ({change.describe()}), but the direct patch of Deployment "
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
    if on_made is not None:
        on_made()

    def progress(look: WaitProgress) -> None:
        from .report import progress_line

        err.write(progress_line(look) + "\n")
        err.flush()

    try:
        if direct and options.refresh_recipe_pods:
            _refresh_direct_step(cluster, name, timeout, out, progress, extras)
        if not wait:
            if not direct and spec_changes:
                out.write(
                    "the operator applies it to the Deployment; follow with "
                    f"`spilloverctl -n {cluster.namespace} status {name}` or use --wait\n"
                )
            return _finish(extras, done, err)
        _wait(cluster, name, direct, timeout, progress, options, out, extras)
    except TimedOut as exc:
        if not extras.refused:
            raise
        err.write(f"spilloverctl: --wait: {exc.message}\n")
    return _finish(extras, done, err)


def _done_line(change: Change, cluster: Connection, spec: PolicySpec, direct: bool) -> str:
    """What stands even when an extra is refused."""
    where = f"SpilloverPolicy spec {change.describe()}"
    if direct:
        where += f" and Deployment {cluster.namespace}/{spec.deployment} patched"
    if change.engage_first:
        return f"the kill switch is ENGAGED ({where}): spillover is being turned OFF"
    return f"the change is made ({where})"


def _finish(extras: Extras, done: str, err: TextIO) -> int:
    if not extras.refused:
        return exit_codes.OK
    flags = ", ".join(extras.refused)
    err.write(f"spilloverctl: {done}; not done: {flags} (see above)\n")
    return exit_codes.EXTRA_REFUSED


def _extra_failure(exc: ClientError) -> bool:
    """A failure that leaves the change in place and ends only the extra: the API's
    errors, but not a timeout (exit 3), an operator refusal (exit 6) or a missing object
    (exit 4), which keep their own codes."""
    from spillover_operator.client import ApiError

    return isinstance(exc, ApiError) and not isinstance(exc, NotFound)


def _request_refresh(cluster: Connection, name: str, extras: Extras) -> None:
    """kill --refresh-recipe-pods: the refresh request in a write of its own, after the
    kill switch is engaged, so that a user without the verb refresh still turns
    spillover OFF."""
    body = {"metadata": {"annotations": _refresh_token()}}
    try:
        patch_policy(cluster, name, body)
    except ClientError as exc:
        if not _extra_failure(exc):
            raise
        extras.refuse(
            "--refresh-recipe-pods",
            f"the refresh request was refused: {exc.message}",
            "Stale recipe pods keep their old values until restarted: ask someone bound to "
            "ClusterRole spillover-recipe-pods-refresher to run `spilloverctl kill "
            "--refresh-recipe-pods`, or restart their Deployments (`kubectl rollout "
            "restart`)",
        )


def _refresh_direct_step(
    cluster: Connection,
    name: str,
    timeout: float,
    out: TextIO,
    progress: Callable[[WaitProgress], None],
    extras: Extras,
) -> None:
    """--direct --refresh-recipe-pods, after the Deployment patch: the WRC rollout
    first (restarted recipe pods get what the WRC runs), then the restarts."""
    from spillover_operator.observed import wait_until_settled

    try:
        wait_until_settled(
            cluster, name, direct=True, timeout=timeout, progress=progress, recipe_pods=False
        )
        problem = _refresh_direct(cluster, name, timeout, out)
    except ClientError as exc:
        if not _extra_failure(exc):
            raise
        problem = exc.message
    if problem is not None:
        extras.refuse(
            "--refresh-recipe-pods",
            f"the recipe pods were not refreshed: {problem}",
            "Restart the stale recipe pods' owners with an account that may list the pods "
            "and patch their owners (`kubectl rollout restart`), then check with "
            "`spilloverctl status`",
        )


def _wait(
    cluster: Connection,
    name: str,
    direct: bool,
    timeout: float,
    progress: Callable[[WaitProgress], None],
    options: Options,
    out: TextIO,
    extras: Extras,
) -> None:
    from spillover_operator.observed import wait_until_settled

    try:
        report = wait_until_settled(
            cluster,
            name,
            direct=direct,
            timeout=timeout,
            progress=progress,
            recipe_pods=options.wait_recipe_pods,
        )
    except ClientError as exc:
        if not _extra_failure(exc):
            raise
        extras.refuse(
            "--wait",
            f"could not follow the change: {exc.message}",
            f"Check with `spilloverctl -n {cluster.namespace} status {name}` from an account "
            "that may read the policy, the Deployment and the pods",
        )
        return
    if direct:
        out.write(_staleness(report) + "\n")
        out.write(
            f"Deployment {cluster.namespace}/{report.deployment_name}: env matches the policy "
            "and the rollout is complete\n"
        )
    else:
        out.write(
            f"SpilloverPolicy {cluster.namespace}/{name}: applied by the operator (generation "
            f"{report.observed_generation}, Ready=True) and Deployment "
            f"{cluster.namespace}/{report.deployment_name} rolled out\n"
        )
    out.write(_pods_line(cluster, name, report, options) + "\n")
    if options.wait_recipe_pods and report.recipe_pods is None:
        extras.refuse(
            "--wait",
            "the recipe mcp-host pods could not be checked "
            f"({report.recipe_pods_error or 'no valid spec'}), so the change is not known "
            "to be in effect on them",
            "Grant list on pods (and replicasets.apps) to check them, or use "
            "--no-wait-recipe-pods to wait for the WRC only",
        )


class _Identity:
    """The authenticated user, asked from the API server once (SelfSubjectReview), only
    when a change is written. With `--reason` a failure to learn it stops restore and
    set before anything is written; kill goes ahead without the record and reports
    --reason as not done. Without --reason the change goes ahead with no record (noted)."""

    def __init__(
        self, cluster: Connection, options: Options, err: TextIO, change: Change, extras: Extras
    ) -> None:
        self.cluster, self.options, self.err = cluster, options, err
        self.change, self.extras = change, extras
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
            if self.options.reason and self.change.engage_first:
                self.extras.refuse(
                    "--reason",
                    f"no change record written: cannot learn who you are from the API "
                    f"server ({exc.message})",
                    "The kill switch goes ahead; the change is recorded as made without a "
                    "reason by an unknown user. Note the reason in your incident record",
                )
            elif self.options.reason:
                raise exc.with_message(
                    f"cannot learn who you are from the API server, which --reason records "
                    f"with the change; nothing was changed: {exc.message}. Run without "
                    "--reason to change the policy anyway (it is then recorded as changed "
                    "without a reason by an unknown user)."
                ) from None
            else:
                self.err.write(
                    f"spilloverctl: note: no change record written (cannot learn who you "
                    f"are from the API server: {exc.message}); the change is recorded as "
                    "made without a reason by an unknown user\n"
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
    extras: Extras,
) -> Written:
    """Read the policy, write the change with its record (Conflict when the policy
    changed since the read: the record names the generation this write makes). For kill,
    a write refused with its record is sent again without it: the record is an extra."""
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
                time="",  # never shown: the server's time of this write is (`RECORD_MANAGER`)
                tool=f"spilloverctl {change.command}" + (" --direct" if direct else ""),
                reason=(options.reason or "").strip() or None,
            )
    # kill: the refresh request goes in a write of its own, after this one.
    refresh_here = options.refresh_recipe_pods and not direct and not change.engage_first
    annotations = _annotations(options, record, spec_changes, refresh_here)
    if spec_changes:
        resource_version = str(meta.get("resourceVersion") or "") or None
        body: dict[str, Any] = {
            "spec": dict(change.fields),
            "metadata": {"annotations": annotations},
        }
        # The write that carries a record is made as RECORD_MANAGER: the server stamps
        # its managedFields entry with the time of this write, which its answer shows.
        writer = cluster if record is None else replace(cluster, field_manager=RECORD_MANAGER)
        try:
            patched = patch_policy(writer, name, body, resource_version=resource_version)
        except (Forbidden, Rejected) as exc:
            if not (change.engage_first and record is not None):
                raise
            # Admission may refuse the record (spillover-change-record) where the spec
            # alone is admitted: the kill switch does not wait on the record.
            record = None
            body["metadata"]["annotations"] = _annotations(options, None, True, False)
            patched = patch_policy(cluster, name, body, resource_version=resource_version)
            if options.reason:
                extras.refuse(
                    "--reason",
                    f"the change record was refused: {exc.message}",
                    "The kill switch is engaged without it; note the reason in your "
                    "incident record",
                )
            else:
                out.write(f"{ref}: change record refused ({exc.message}); written without it\n")
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
    options: Options, record: ChangeRecord | None, spec_changes: bool, refresh_request: bool
) -> dict[str, Any]:
    """The policy annotations a write of this command carries: with a spec change its
    record (or none: an older record is removed, it describes another change) and the
    legacy free-text reason removed; with `refresh_request` (--refresh-recipe-pods
    through the operator; --direct refreshes itself) a refresh request token."""
    annotations: dict[str, Any] = {}
    if spec_changes:
        annotations[CHANGE_RECORD_ANNOTATION] = record.encode() if record else None
        annotations[LEGACY_CHANGE_REASON_ANNOTATION] = None
    if options.refresh_recipe_pods and refresh_request:
        annotations.update(_refresh_token())
    return annotations


def _refresh_token() -> dict[str, str]:
    """A unique token, not a signature: who asked is not in it (nobody checks it)."""
    return {REFRESH_REQUEST_ANNOTATION: f"{_now().isoformat()} {secrets.token_hex(4)}"}


REFRESH_POLL = 1.0


def _refresh_direct(cluster: Connection, name: str, timeout: float, out: TextIO) -> str | None:
    """`--direct --refresh-recipe-pods`: what the operator would do, one owner at a time,
    until no owner is left to restart. Returns why the pods could not be read, if so."""
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
            return f"the recipe pods could not be read ({report.recipe_pods_error or 'no spec'})"
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
        return None


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
