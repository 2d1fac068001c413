"""Reconciling a SpilloverPolicy onto its target Deployment.

Decide, then act. `decide_reconcile` reads through a `Reader` and writes nothing: it
answers `Gone`, `Refused` (`decide`: invalid, not allowed, not the owner, no target),
`NeedsFresh` (a copy behind the API would decide wrong: read it from the API, decide
again), `Apply` (a patch to make) or `Settled` (nothing to change, or a change made
ahead). `_act` is the one place a reconcile writes: the Deployment patch, the Events,
the recipe pods' refresh step, the status. `finalize_policy` acts on a deletion;
`settle`, `failed_status` and `ownership_refusal` are pure too, and tests call them
without a cluster. Every write happens only when something differs, so a resync or an
operator restart never changes the Deployment (no rollout) nor rewrites an unchanged
status.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from spillover_operator.client import (
    ApiError,
    ClientError,
    ConfigMapReader,
    Conflict,
    Connection,
    NotFound,
    find_deployment,
    find_policy,
    list_policies,
    patch_deployment_env,
    patch_policy_status,
    post_event,
    retry_on_conflict,
)
from spillover_operator.domain.change_record import last_change
from spillover_operator.domain.envplan import (
    EnvChange,
    EnvPlan,
    TargetError,
    UnmanageableTargetError,
    desired_env,
    envfrom_shadowed,
    plan_apply,
    plan_remove,
    resolved_env,
    select_container,
    shadow_notes,
)
from spillover_operator.domain.model import (
    COND_APPLIED,
    COND_READY,
    COND_RECIPE_PODS,
    PASSTHROUGH_VAR,
    REASON_APPLIED,
    REASON_APPLY_FAILED,
    REASON_CONFLICT,
    REASON_DRIFT_CORRECTED,
    REASON_INVALID_SPEC,
    REASON_REMOVED,
    REASON_ROLLOUT_COMPLETE,
    REASON_ROLLOUT_IN_PROGRESS,
    REASON_TARGET_NOT_ALLOWED,
    REASON_TARGET_NOT_FOUND,
    REASON_TARGET_NOT_SUPPORTED,
    REASON_UNKNOWN,
    PolicySpec,
)
from spillover_operator.domain.policy import InvalidSpecError, PolicyCopy, target_of
from spillover_operator.domain.recipe_pods import refresh_wanted, selector_matches
from spillover_operator.domain.resolved_env import ConfigMapLookup, no_config_maps
from spillover_operator.domain.resource import API_VERSION, KIND
from spillover_operator.domain.rollout import rollout_state
from spillover_operator.domain.settings import OperatorSettings
from spillover_operator.domain.status import (
    Condition,
    build_status,
    merge_patch,
    now_rfc3339,
    resolved_status,
    with_condition,
)
from spillover_operator.reconciler.recipe_reconcile import (
    RecipeOutcome,
    reconcile_recipe_pods,
    refresh_request,
)

log = logging.getLogger(__name__)


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    IN_SYNC = "in_sync"
    DRIFT_CORRECTED = "drift_corrected"
    CONFLICT = "conflict"
    INVALID_SPEC = "invalid_spec"
    TARGET_NOT_ALLOWED = "target_not_allowed"
    TARGET_NOT_FOUND = "target_not_found"
    TARGET_NOT_SUPPORTED = "target_not_supported"
    APPLY_FAILED = "apply_failed"
    GONE = "gone"
    REMOVED = "removed"
    RETAINED = "retained"
    HANDED_OVER = "handed_over"


@dataclass(frozen=True)
class ReconcileResult:
    outcome: Outcome
    message: str
    spec: PolicySpec | None = None
    changes: list[EnvChange] = field(default_factory=list)
    deployment: dict[str, Any] | None = None
    ready: bool = False
    recipe: RecipeOutcome | None = None


class ApplyFailedError(RuntimeError):
    """The API server refused a change (other than a resourceVersion conflict)."""


STALE_ATTEMPTS = 5


class StaleCopyError(RuntimeError):
    """A status write was refused because the policy changed since the copy it was
    computed from (resourceVersion precondition)."""


Event = tuple[dict[str, Any], str, str, str]  # (object, type, reason, message)


class Reader(Protocol):
    """Where reconciling reads the objects from: the API (`ApiReader`), or what the
    operator already watches (`handlers.views.IndexReader`: no request at all). Writes
    always go to the API, with the resourceVersion read, so a stale read only costs a
    conflict retry (which reads from the API)."""

    def policy(self, name: str) -> PolicyCopy | None: ...

    def deployment(self, name: str) -> dict[str, Any] | None: ...

    def policies_targeting(self, deployment: str) -> list[PolicyCopy]:
        """Every policy whose spec targets `deployment` (any may be invalid)."""
        ...

    def remember(self, policy: dict[str, Any]) -> None:
        """The policy as a status write answered it: newer than any copy of it read
        before (the next reconcile computes from it rather than meet a conflict)."""
        ...

    def remember_deployment(self, deployment: dict[str, Any]) -> None:
        """The Deployment as the operator's patch answered it: newer than any copy of it
        read before, so the change just made is not planned (and announced) again."""
        ...

    def current(self, *, policy: str | None, deployment: str | None) -> bool:
        """Whether this reader's copies of the named objects need no confirming: read
        from the API already (or nothing to confirm them with). Asks nothing."""
        ...

    def confirmed(
        self, *, policy: str | None, deployment: str | None, again: bool = False
    ) -> Reader | None:
        """A reader whose copies of the named objects are read from the API now, or
        None when its copies are already current (nothing to confirm); `again`: read
        them even if they were current (a write found them changed)."""
        ...


@dataclass(frozen=True)
class ApiReader:
    """Reads with GET/LIST requests (spilloverctl, the harness, the tests)."""

    cluster: Connection

    def policy(self, name: str) -> PolicyCopy | None:
        found = find_policy(self.cluster, name)
        return None if found is None else PolicyCopy(found)

    def deployment(self, name: str) -> dict[str, Any] | None:
        return find_deployment(self.cluster, name)

    def policies_targeting(self, deployment: str) -> list[PolicyCopy]:
        # Only these are parsed: the namespace's other policies are not this decision's.
        return [
            PolicyCopy(policy)
            for policy in list_policies(self.cluster)
            if (target := target_of(policy.get("spec"))) is not None
            and target.deployment == deployment
        ]

    def remember(self, policy: dict[str, Any]) -> None:
        return None  # every read is a request: nothing to keep

    def remember_deployment(self, deployment: dict[str, Any]) -> None:
        return None

    def current(self, *, policy: str | None, deployment: str | None) -> bool:
        return True  # every read is a request

    def confirmed(
        self, *, policy: str | None, deployment: str | None, again: bool = False
    ) -> Reader | None:
        return None  # every read is already a request


# ---- pure helpers -----------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def competing_policies(
    policies: Iterable[PolicyCopy], deployment: str, *, include: str | None = None
) -> list[str]:
    """Names of the valid, live policies targeting `deployment`, oldest first (by
    creationTimestamp; within one second, which is all creationTimestamp tells, one the
    operator has already applied first; then by name). The first one owns the
    Deployment: a policy created in the same second as the one already applied does
    not take its Deployment over.

    Policies being deleted are left out, except `include` (the caller itself).
    """
    found: list[tuple[str, int, str]] = []
    for policy in policies:
        meta = _meta(policy)
        name = str(meta.get("name", ""))
        if meta.get("deletionTimestamp") and name != include:
            continue
        target = target_of(policy.get("spec"))
        if (
            target is None
            or target.deployment != deployment
            or not isinstance(policy.spec, PolicySpec)
        ):
            continue
        applied = bool((policy.get("status") or {}).get("lastAppliedTime"))
        found.append((str(meta.get("creationTimestamp") or ""), 0 if applied else 1, name))
    return [name for _, _, name in sorted(found)]


def ownership_refusal(
    namespace: str, name: str, spec: PolicySpec, policies: Iterable[PolicyCopy]
) -> str | None:
    """Why this policy may not manage its Deployment (an older policy does), or None."""
    owners = competing_policies(policies, spec.deployment)
    if not owners or owners[0] == name:
        return None
    return (
        f"policy {owners[0]!r} (older) already manages Deployment "
        f"{namespace}/{spec.deployment}; this policy changes nothing until that one is "
        "deleted or targets another Deployment"
    )


def describe_changes(changes: Iterable[EnvChange]) -> str:
    parts: list[str] = []
    for change in changes:
        if change.after is None:
            parts.append(f"removed {change.name} (was {change.before})")
        elif change.before is None:
            parts.append(f"set {change.name}={change.after}")
        else:
            parts.append(f"set {change.name}={change.after} (was {change.before})")
    return "; ".join(parts) if parts else "no change"


def describe_spec(spec: PolicySpec) -> str:
    if not spec.enabled:
        return "spillover disabled (kill switch engaged)"
    threshold = (
        "default threshold" if spec.threshold_bytes is None else f"threshold {spec.threshold_bytes}"
    )
    budget = "default budget" if spec.budget_bytes is None else f"budget {spec.budget_bytes}"
    return f"spillover enabled, {threshold}, {budget}"


def _policy_ref(policy: Mapping[str, Any]) -> dict[str, Any]:
    """An object reference usable for Events even if `policy` lacks apiVersion/kind."""
    ref = dict(policy)
    ref.setdefault("apiVersion", API_VERSION)
    ref.setdefault("kind", KIND)
    return ref


def _deployment_ref(deployment: Mapping[str, Any]) -> dict[str, Any]:
    ref = dict(deployment)
    ref.setdefault("apiVersion", "apps/v1")
    ref.setdefault("kind", "Deployment")
    return ref


def _was_applied(policy: Mapping[str, Any]) -> bool:
    """Whether the policy's current generation had already been applied (so a
    difference now is drift, not a policy change). Judged on the status of the copy
    read: a change the operator made early (`apply_change`) and reports later may find
    the status already written for its generation by a reconcile that had nothing left
    to change; `settle` is told about those (`policy_change`)."""
    status = policy.get("status") or {}
    if status.get("observedGeneration") != _meta(policy).get("generation"):
        return False
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == COND_APPLIED:
            return bool(cond.get("status") == "True")
    return False


def target_status(spec: PolicySpec, container: str | None = None) -> dict[str, Any]:
    """`status.target`: the Deployment and (once known) the container."""
    target = {"deployment": spec.deployment, "container": container or spec.container}
    return {k: v for k, v in target.items() if v is not None}


def failed_status(
    policy: Mapping[str, Any], reason: str, message: str, **extra: Any
) -> dict[str, Any]:
    """The status of a policy the operator could not apply (Ready and Applied False)."""
    return build_status(
        policy.get("status"),
        generation=_meta(policy).get("generation"),
        ready=Condition(COND_READY, False, reason, message),
        applied=Condition(COND_APPLIED, False, reason, message),
        # Dated by the operator's clock when first reported (change_record.last_change).
        extra={"lastChange": last_change(policy, seen_at=now_rfc3339()).to_status()},
        **extra,
    )


@dataclass(frozen=True)
class Settlement:
    """What an apply (or finding nothing to apply) means: the outcome, the status to
    report and the Events to post."""

    outcome: Outcome
    status: dict[str, Any]
    events: list[Event]
    container: str
    ready: bool


def settle(
    policy: Mapping[str, Any],
    spec: PolicySpec,
    after: Mapping[str, Any],
    plan: EnvPlan,
    *,
    now: str,
    config_maps: ConfigMapLookup = no_config_maps,
    applied_at: str | None = None,
    policy_change: bool = False,
) -> Settlement:
    """The status and Events once the Deployment is `after` (the plan applied, or found
    empty). `config_maps` resolves the container's ConfigMap references (the values in
    effect, `resolved_env`). `policy_change`: the plan is the policy's own change made
    ahead (`apply_change`), never drift, even if a pass in between (a Deployment event
    the patch caused, run before the change's own report) found the Deployment in sync
    and recorded the generation as applied.

    An applied policy change is reported with its change record (who, with what, why,
    and when the operator first reported it: `now`, or the time its status already
    gives that change) when one describes the policy's current generation, else as
    changed without a reason by an unknown user (`change_record.last_change`); drift
    is the Deployment's change, not the policy's, and carries no record. Pure:
    reconcile_policy writes what it returns."""
    meta = _meta(policy)
    namespace, name = meta.get("namespace"), meta.get("name")
    container = str(select_container(after, spec.container).get("name"))
    outcome = Outcome.IN_SYNC
    current_status = dict(policy.get("status") or {})
    events: list[Event] = []
    notes = shadow_notes(spec, envfrom_shadowed(after, container, config_maps))
    change = last_change(policy, seen_at=now)
    if plan.patch is not None:
        drift = not policy_change and _was_applied(policy)
        outcome = Outcome.DRIFT_CORRECTED if drift else Outcome.APPLIED
        reason = REASON_DRIFT_CORRECTED if drift else REASON_APPLIED
        lead = (
            "restored the policy's values after the Deployment was changed by hand"
            if drift
            else describe_spec(spec)
        )
        note = (
            f"{lead}: {describe_changes(plan.changes)} on Deployment "
            f"{namespace}/{spec.deployment} container {container}"
        )
        if notes:
            note += " (" + "; ".join(notes) + ")"
        if not drift:
            note += f" ({change.describe()})"
        events.append((_policy_ref(policy), "Normal", reason, note))
        events.append(
            (_deployment_ref(after), "Normal", reason, f"{note} (SpilloverPolicy {name})")
        )
        current_status["lastAppliedTime"] = applied_at or now

    effective, sources = resolved_status(resolved_env(after, container, config_maps))
    rollout = rollout_state(after)
    applied_msg = (
        f"{describe_spec(spec)} on Deployment {namespace}/{spec.deployment} container "
        f"{container}; {PASSTHROUGH_VAR} lists the spillover variables"
    )
    if notes:
        applied_msg += "; " + "; ".join(notes)
    if rollout.complete:
        ready = Condition(
            COND_READY, True, REASON_ROLLOUT_COMPLETE, f"{applied_msg}; {rollout.message}"
        )
    else:
        ready = Condition(COND_READY, False, REASON_ROLLOUT_IN_PROGRESS, rollout.message)
    status = build_status(
        current_status,
        generation=meta.get("generation"),
        ready=ready,
        applied=Condition(COND_APPLIED, True, REASON_APPLIED, applied_msg),
        target=target_status(spec, container),
        effective=effective,
        rollout=rollout,
        kill_switch_engaged=not spec.enabled,
        now=now,
        extra={
            "effectiveSource": sources or None,
            "envFromNotes": notes or None,
            "lastChange": change.to_status(),
        },
    )
    return Settlement(outcome, status, events, container, rollout.complete)


# ---- API-facing steps -------------------------------------------------------------


def write_status(
    cluster: Connection, policy: Mapping[str, Any], desired: dict[str, Any]
) -> dict[str, Any] | None:
    """Patch the status subresource if it differs; the policy as written, or None when
    nothing was written.

    The patch carries the resourceVersion of the copy it was computed from. When that
    is refused, only what the status depends on matters: if the policy read again has
    the same generation and the same status (only metadata moved, such as kopf's own
    annotations), the same patch goes again on the new version, so the side effects
    this reconcile already had (a change applied, a refresh step) are recorded, not
    redone. Otherwise StaleCopyError: the caller reads the policy and recomputes.
    """
    patch = merge_patch(policy.get("status") or {}, desired)
    if not patch:
        return None
    name = str(_meta(policy)["name"])
    version = _meta(policy).get("resourceVersion")
    for _ in range(STALE_ATTEMPTS):
        try:
            written = patch_policy_status(
                cluster, name, patch, resource_version=str(version) if version else None
            )
        except NotFound:
            return None
        except Conflict:
            fresh = find_policy(cluster, name)
            if fresh is None:
                return None
            if _meta(fresh).get("generation") != _meta(policy).get("generation") or (
                fresh.get("status") or {}
            ) != (policy.get("status") or {}):
                raise StaleCopyError(f"policy {name} changed meanwhile") from None
            version = _meta(fresh).get("resourceVersion")
            continue
        return written
    raise StaleCopyError(f"policy {name} kept changing while its status was written")


def _apply_with_retries(
    cluster: Connection,
    deployment: dict[str, Any],
    planner: Callable[[Mapping[str, Any]], EnvPlan],
    *,
    precondition: bool = True,
) -> tuple[dict[str, Any] | None, EnvPlan]:
    """Plan and patch, re-reading and re-planning on a resourceVersion conflict
    (`precondition` False: see `patch_deployment_env`).

    Returns (deployment after, the plan that was applied or found empty). The
    deployment is None if it disappeared meanwhile.
    """
    name = str(_meta(deployment)["name"])
    first: list[dict[str, Any]] = [deployment]

    def attempt() -> tuple[dict[str, Any] | None, EnvPlan]:
        current = first.pop() if first else find_deployment(cluster, name)
        if current is None:
            return None, EnvPlan([], None)
        plan = planner(current)
        if plan.patch is None:
            return current, plan
        try:
            return patch_deployment_env(cluster, name, plan, precondition=precondition), plan
        except NotFound:
            return None, plan

    try:
        return retry_on_conflict(attempt, what=f"Deployment {cluster.namespace}/{name}")
    except Conflict as exc:
        raise ApplyFailedError(f"{exc.message}; will retry") from None
    except ApiError as exc:
        raise ApplyFailedError(
            f"the API server refused the change to Deployment {cluster.namespace}/{name} "
            f"(HTTP {exc.status}): {exc.message}"
        ) from None


def reconcile_policy(
    cluster: Connection,
    namespace: str,
    name: str,
    reader: Reader | None = None,
    *,
    early: EarlyApply | None = None,
    settings: OperatorSettings,
) -> ReconcileResult:
    """Make the target Deployment match the policy and report it in the status.

    Reads through `reader` (default: the API). A reader over copies (what the operator
    watches) is asked to confirm with the API the decisions a stale copy would get
    wrong: "nothing to change" on the Deployment, and a change to the Deployment made
    from the policy copy. Every write carries the resourceVersion it was computed from.
    `early`: the change `apply_change` already made; reported here (once) if the policy
    still asks for it, else planned afresh. `settings`: the operator's, read once at its
    start (`domain.settings`); nothing here reads the environment.
    """
    cluster = cluster.in_namespace(namespace)
    reader = reader or ApiReader(cluster)
    for _ in range(STALE_ATTEMPTS):
        try:
            return _reconcile_once(cluster, namespace, name, reader, early, settings)
        except StaleCopyError:
            # The policy keeps changing under us (someone patching it in a burst):
            # read it again and recompute.
            reader = reader.confirmed(policy=name, deployment=None, again=True) or ApiReader(
                cluster
            )
    return _reconcile_once(
        cluster, namespace, name, reader, early, settings
    )  # StaleCopyError: retried


@dataclass
class EarlyApply:
    """A Deployment change made ahead of the reconcile that reports it (`apply_change`):
    the reconcile settles with this plan (Applied Events, status) instead of planning
    again, as long as the policy still asks for the same thing. `announced`: its Events
    were posted (a reconcile that starts over does not post them twice)."""

    spec: PolicySpec
    after: dict[str, Any]
    plan: EnvPlan
    announced: bool = False


def newer_status(answered: dict[str, Any], read: dict[str, Any] | None) -> dict[str, Any]:
    """The copy of the Deployment to judge the rollout of a change made ahead on:
    `answered` (the patch's answer, whose status predates the rollout) unless `read`
    (the copy of the latest event the pass runs with) has the same spec (generation)
    and a status at least as new. A pass coalesces the events of the whole rollout:
    judged on the answer, it reported RolloutInProgress, and no event came after it
    (Ready until the resync, 300 s later: `kill --wait` hung)."""
    if read is None:
        return answered
    a_meta, r_meta = answered.get("metadata") or {}, read.get("metadata") or {}
    if a_meta.get("uid") != r_meta.get("uid") or a_meta.get("generation") != r_meta.get(
        "generation"
    ):
        return answered
    a_seen = (answered.get("status") or {}).get("observedGeneration")
    r_seen = (read.get("status") or {}).get("observedGeneration")
    if not isinstance(r_seen, int) or (isinstance(a_seen, int) and r_seen < a_seen):
        return answered
    return read


def apply_change(
    cluster: Connection,
    namespace: str,
    name: str,
    reader: Reader,
    settings: OperatorSettings,
) -> EarlyApply | None:
    """Only the Deployment change the policy asks for, nothing else: no status, no
    Events, no recipe pods. The operator runs it as soon as a policy changes, before it
    waits for the target's lock (behind which a Deployment event may be reporting a
    rollout), so a kill switch reaches the Deployment at the speed of two requests.

    Safe without the lock: as in `reconcile_policy`, the change is made from the policy
    read from the API now, and the patch carries the resourceVersion of the Deployment
    it was planned on. None when there is nothing to change, or when the policy cannot
    be applied (invalid, not allowed, not the owner, target missing): the reconcile
    that follows finds the same and reports it. ApplyFailedError when the API server
    refuses the change.
    """
    cluster = cluster.in_namespace(namespace)
    found = _applicable(namespace, name, reader, settings)
    if found is None:
        return None
    spec, deployment = found
    planner = _env_planner(spec, ConfigMapReader(cluster).lookup)
    try:
        if planner(deployment).patch is None:
            return None
        confirm = reader.confirmed(policy=name, deployment=None)
        if confirm is not None:  # plan again from the policy as the API has it
            return apply_change(cluster, namespace, name, confirm, settings)
        after, plan = _apply_with_retries(cluster, deployment, planner, precondition=False)
    except TargetError:
        return None
    if after is None or plan.patch is None:
        return None
    reader.remember_deployment(after)
    return EarlyApply(spec, after, plan)


def _env_planner(
    spec: PolicySpec, config_maps: ConfigMapLookup
) -> Callable[[Mapping[str, Any]], EnvPlan]:
    """What the policy needs on a copy of the Deployment (`envplan.plan_apply`, envFrom
    included)."""

    def planner(dep: Mapping[str, Any]) -> EnvPlan:
        return plan_apply(dep, spec, config_maps=config_maps)

    return planner


def _applicable(
    namespace: str, name: str, reader: Reader, settings: OperatorSettings
) -> tuple[PolicySpec, dict[str, Any]] | None:
    """(spec, target Deployment) of a policy that may change its Deployment now; None
    when it is gone, invalid, not allowed, not the owner, or its target is missing."""
    decision = decide(
        namespace, name, reader.policy(name), settings, reader.policies_targeting, reader.deployment
    )
    return (decision.spec, decision.deployment) if isinstance(decision, Proceed) else None


@dataclass(frozen=True)
class Gone:
    """The policy is gone or being deleted: nothing to do, nothing to write."""

    message: str


@dataclass(frozen=True)
class Refused:
    """`policy` cannot be applied: its status says why (Ready and Applied False), and
    nothing is changed on the Deployment. `spec` is None for an invalid spec (no
    status.target then); `warn`: also a Warning Event on the policy once written."""

    policy: dict[str, Any]
    outcome: Outcome
    reason: str
    message: str
    spec: PolicySpec | None = None
    warn: bool = False


@dataclass(frozen=True)
class Proceed:
    """The policy may change its Deployment: plan on `deployment` from `spec`."""

    policy: dict[str, Any]
    spec: PolicySpec
    deployment: dict[str, Any]


Decision = Gone | Refused | Proceed


def decide(
    namespace: str,
    name: str,
    policy: PolicyCopy | None,
    settings: OperatorSettings,
    policies_targeting: Callable[[str], list[PolicyCopy]],
    deployment_named: Callable[[str], dict[str, Any] | None],
) -> Decision:
    """Whether the policy read may act on its Deployment, and if not, what its status
    says. Writes nothing: the callers (`decide_reconcile`, `apply_change`) act on the
    decision. The readers are called only as far as needed: a target not allowed is
    refused before the Deployment is read."""
    if policy is None or _meta(policy).get("deletionTimestamp"):
        return Gone(f"policy {namespace}/{name} is gone or being deleted")
    spec = policy.spec
    if isinstance(spec, InvalidSpecError):
        message = (
            "; ".join(spec.problems) + ". Fix the policy; nothing was changed on the Deployment."
        )
        return Refused(policy, Outcome.INVALID_SPEC, REASON_INVALID_SPEC, message)
    not_allowed = settings.target_refusal(spec.deployment)
    if not_allowed is not None:
        return Refused(
            policy,
            Outcome.TARGET_NOT_ALLOWED,
            REASON_TARGET_NOT_ALLOWED,
            not_allowed,
            spec,
            warn=True,
        )
    refused = ownership_refusal(namespace, name, spec, policies_targeting(spec.deployment))
    if refused is not None:
        return Refused(policy, Outcome.CONFLICT, REASON_CONFLICT, refused, spec)
    deployment = deployment_named(spec.deployment)
    if deployment is None:
        message = (
            f"Deployment {namespace}/{spec.deployment} not found; the policy is applied "
            "as soon as it appears"
        )
        return Refused(policy, Outcome.TARGET_NOT_FOUND, REASON_TARGET_NOT_FOUND, message, spec)
    return Proceed(policy, spec, deployment)


@dataclass(frozen=True)
class NeedsFresh:
    """What was read may be behind the API where a copy would decide wrong: read the
    named policy and/or Deployment from the API (`Reader.confirmed`), then decide
    again on them."""

    policy: str | None = None
    deployment: str | None = None


@dataclass(frozen=True)
class Apply:
    """Patch the Deployment as `planner` plans it (planned on `deployment`, and again
    on the Deployment read after a resourceVersion conflict), then report it as
    `Settled`. `early`: the reconcile's, to tell `Settled` whether its Events were
    posted already."""

    policy: dict[str, Any]
    spec: PolicySpec
    deployment: dict[str, Any]
    planner: Callable[[Mapping[str, Any]], EnvPlan]
    early: EarlyApply | None = None


@dataclass(frozen=True)
class Settled:
    """The Deployment is `after`, by `plan`: a patch just made, a change made ahead
    (`early.plan`), or nothing to change (an empty plan). Report it: Events, the recipe
    pods, the status."""

    policy: dict[str, Any]
    spec: PolicySpec
    after: dict[str, Any]
    plan: EnvPlan
    early: EarlyApply | None = None


ReconcileDecision = Gone | Refused | NeedsFresh | Apply | Settled


def _target_refusal(policy: dict[str, Any], spec: PolicySpec, exc: TargetError) -> Refused:
    """The refusal for a Deployment the policy's env cannot be planned on."""
    if isinstance(exc, UnmanageableTargetError):
        return Refused(
            policy,
            Outcome.TARGET_NOT_SUPPORTED,
            REASON_TARGET_NOT_SUPPORTED,
            f"{exc}. Nothing was changed.",
            spec,
        )
    return Refused(
        policy,
        Outcome.TARGET_NOT_FOUND,
        REASON_TARGET_NOT_FOUND,
        f"{exc}. Nothing was changed.",
        spec,
    )


def decide_reconcile(
    namespace: str,
    name: str,
    reader: Reader,
    settings: OperatorSettings,
    early: EarlyApply | None,
    config_maps: ConfigMapLookup,
) -> ReconcileDecision:
    """What one reconcile does with what `reader` holds. Writes nothing (`_act` does
    what it decides) and reads only through `reader` and `config_maps`.

    `NeedsFresh` where a copy behind the API would decide wrong: a refresh step
    restarts workloads from what the policy's status says was refreshed already (a copy
    behind would restart an owner twice; a copy that wants no refresh takes no step,
    and the event of a newer policy comes); a change to make is made from the current
    policy; "nothing to change" and the status (rollout) are judged on the current
    Deployment. A change made ahead (`early`) for the same spec is reported as made."""
    decision = decide(
        namespace, name, reader.policy(name), settings, reader.policies_targeting, reader.deployment
    )
    if not isinstance(decision, Proceed):
        return decision
    policy, spec, deployment = decision.policy, decision.spec, decision.deployment
    refresh = refresh_wanted(spec.recipe_pods, spec.enabled, bool(refresh_request(policy)))
    if refresh and not reader.current(policy=name, deployment=None):
        return NeedsFresh(policy=name)
    if early is not None and early.spec == spec:
        return Settled(policy, spec, newer_status(early.after, deployment), early.plan, early)
    planner = _env_planner(spec, config_maps)
    try:
        first = planner(deployment)
    except TargetError as exc:
        return _target_refusal(policy, spec, exc)
    if first.patch is None:
        if not reader.current(policy=None, deployment=spec.deployment):
            return NeedsFresh(deployment=spec.deployment)
        return Settled(policy, spec, deployment, first, early)
    if not reader.current(policy=name, deployment=None):
        return NeedsFresh(policy=name)
    return Apply(policy, spec, deployment, planner, early)


def _reconcile_once(
    cluster: Connection,
    namespace: str,
    name: str,
    reader: Reader,
    early: EarlyApply | None,
    settings: OperatorSettings,
) -> ReconcileResult:
    """One reconcile through `reader`: decide, reading afresh what the decision needs
    confirmed (`NeedsFresh`) and deciding again, then act. Writes only what differs:
    with nothing to change on the Deployment (a Deployment status event, a resync, a
    restart) the status patch carries only what changed (the rollout part), or
    nothing."""
    while True:
        config_map_reader = ConfigMapReader(cluster, listed=True)
        decision = decide_reconcile(
            namespace, name, reader, settings, early, config_map_reader.lookup
        )
        if not isinstance(decision, NeedsFresh):
            return _act(cluster, reader, settings, decision, config_map_reader)
        # The reader reads from the API what it is asked for (the API itself if it
        # cannot), so each NeedsFresh is of something not read yet: the loop ends.
        reader = reader.confirmed(
            policy=decision.policy, deployment=decision.deployment
        ) or ApiReader(cluster)


# ---- the executor: every write of a reconcile -------------------------------------


def _act(
    cluster: Connection,
    reader: Reader,
    settings: OperatorSettings,
    decision: Gone | Refused | Apply | Settled,
    config_map_reader: ConfigMapReader,
) -> ReconcileResult:
    """Carry out a reconcile's decision; the only place reconciling a policy writes.
    In order: the Deployment patch (`Apply`), the Applied or DriftCorrected Events, the
    recipe pods' refresh step and Events (`reconcile_recipe_pods`), the status; a
    refusal writes only the status (and its Warning Event)."""
    if isinstance(decision, Gone):
        return ReconcileResult(Outcome.GONE, decision.message)
    if isinstance(decision, Apply):
        applied = _patch(cluster, reader, decision)
        if isinstance(applied, Refused):
            return _report_refusal(cluster, applied)
        decision = applied
    if isinstance(decision, Refused):
        return _report_refusal(cluster, decision)
    return _report(cluster, reader, settings, decision, config_map_reader)


def _report_refusal(cluster: Connection, refused: Refused) -> ReconcileResult:
    """Write a refusal to the policy's status (and its Warning Event, if it has one)."""
    policy = refused.policy
    extra = {} if refused.spec is None else {"target": target_status(refused.spec)}
    failed = failed_status(policy, refused.reason, refused.message, **extra)
    if write_status(cluster, policy, failed) and refused.warn:
        _record(cluster, _policy_ref(policy), "Warning", refused.reason, refused.message)
    return ReconcileResult(refused.outcome, refused.message, refused.spec)


def _patch(cluster: Connection, reader: Reader, apply: Apply) -> Settled | Refused:
    """Patch the Deployment (re-planned after a conflict). The refusals found on a
    Deployment read again; ApplyFailedError once its status says so."""
    policy, spec = apply.policy, apply.spec
    try:
        after, plan = _apply_with_retries(cluster, apply.deployment, apply.planner)
    except TargetError as exc:
        return _target_refusal(policy, spec, exc)
    except ApplyFailedError as exc:
        failed = failed_status(policy, REASON_APPLY_FAILED, str(exc), target=target_status(spec))
        write_status(cluster, policy, failed)
        raise
    if after is None:
        message = (
            f"Deployment {cluster.namespace}/{spec.deployment} disappeared while being "
            "updated; the policy is applied when it appears again"
        )
        return Refused(policy, Outcome.TARGET_NOT_FOUND, REASON_TARGET_NOT_FOUND, message, spec)
    if plan.patch is not None:
        reader.remember_deployment(after)
    return Settled(policy, spec, after, plan, apply.early)


def _report(
    cluster: Connection,
    reader: Reader,
    settings: OperatorSettings,
    settled: Settled,
    config_map_reader: ConfigMapReader,
) -> ReconcileResult:
    """Report the Deployment as settled: Events (once per change), the recipe pods (a
    refresh step when one is due), the status."""
    policy, spec, after, plan, early = (
        settled.policy, settled.spec, settled.after, settled.plan, settled.early
    )  # fmt: skip
    config_maps = config_map_reader.lookup
    made_ahead = early is not None and plan is early.plan
    now = now_rfc3339()
    # lastAppliedTime in milliseconds: the recipe pods' convergence is counted once per
    # change, keyed by it, and two changes can fall in one second.
    done = settle(
        policy, spec, after, plan, now=now, config_maps=config_maps,
        applied_at=now_rfc3339(millis=True), policy_change=made_ahead,
    )  # fmt: skip
    if early is None or not early.announced:
        for obj, type_, reason, message in done.events:
            _record(cluster, obj, type_, reason, message)
    if early is not None and made_ahead:
        early.announced = True
    status = done.status
    recipe: RecipeOutcome | None = None
    try:
        desired = desired_env(after, spec, config_maps)
        recipe = reconcile_recipe_pods(
            cluster,
            policy,
            spec,
            desired,
            rollout_complete=done.ready,
            config_maps=config_maps,
            now=now,
            last_applied=status.get("lastAppliedTime"),
            refusal=settings.refresh_refusal,
            changed_at=config_map_reader.changed_at,
        )
    except ClientError as exc:  # the recipe pods cannot be read: say so, keep the rest
        unknown = Condition(
            COND_RECIPE_PODS, False, REASON_UNKNOWN, f"cannot read the recipe pods: {exc.message}"
        )
        status = with_condition(
            status,
            policy.get("status"),
            unknown,
            generation=_meta(policy).get("generation"),
            now=now,
        )
    else:
        status = with_condition(
            {**status, "recipePods": recipe.status},
            policy.get("status"),
            recipe.condition,
            generation=_meta(policy).get("generation"),
            now=now,
        )
        for type_, reason, message in recipe.events:
            _record(cluster, _policy_ref(policy), type_, reason, message)
    written = write_status(cluster, policy, status)
    if written is not None:
        reader.remember(written)
    return ReconcileResult(
        done.outcome,
        describe_changes(plan.changes),
        spec,
        list(plan.changes),
        after,
        ready=done.ready,
        recipe=recipe,
    )


def _record(
    cluster: Connection, obj: Mapping[str, Any], type_: str, reason: str, message: str
) -> None:
    try:
        post_event(cluster, obj, type_, reason, message)
    except Exception as exc:  # an Event is best effort: never fail the change for it
        log.warning("could not post Event %s on %s: %s", reason, _meta(obj).get("name"), exc)


def finalize_policy(
    cluster: Connection,
    policy: PolicyCopy,
    reader: Reader | None,
    settings: OperatorSettings,
) -> ReconcileResult:
    """What deleting the policy does to its Deployment: `Retain` nothing, `Remove` the
    three variables (never the passthrough names). A policy that did not own the
    Deployment, or whose Deployment another policy takes over, changes nothing."""
    spec = policy.spec
    meta = _meta(policy)
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    cluster = cluster.in_namespace(namespace)
    reader = reader or ApiReader(cluster)
    if isinstance(spec, InvalidSpecError):
        return ReconcileResult(Outcome.RETAINED, "invalid spec: the Deployment was never changed")
    if spec.on_delete == "Retain":
        return ReconcileResult(
            Outcome.RETAINED, "onDelete is Retain: Deployment left as it is", spec
        )
    if settings.target_refusal(spec.deployment) is not None:
        return ReconcileResult(Outcome.RETAINED, "target not allowed: never changed", spec)
    owners = competing_policies(
        reader.policies_targeting(spec.deployment), spec.deployment, include=name
    )
    if owners and owners[0] != name:
        return ReconcileResult(Outcome.RETAINED, f"policy {owners[0]!r} owns the Deployment", spec)
    others = [other for other in owners if other != name]
    if others:
        return ReconcileResult(
            Outcome.HANDED_OVER,
            f"policy {others[0]!r} takes over Deployment {namespace}/{spec.deployment}",
            spec,
        )
    deployment = reader.deployment(spec.deployment)
    if deployment is None:
        return ReconcileResult(Outcome.RETAINED, "the target Deployment does not exist", spec)
    try:
        after, plan = _apply_with_retries(cluster, deployment, lambda dep: plan_remove(dep, spec))
    except TargetError as exc:
        return ReconcileResult(Outcome.RETAINED, str(exc), spec)
    if after is None or plan.patch is None:
        return ReconcileResult(Outcome.REMOVED, "nothing to remove", spec, [], after)
    note = (
        f"policy deleted with onDelete=Remove: {describe_changes(plan.changes)} on Deployment "
        f"{namespace}/{spec.deployment}"
    )
    _record(cluster, _policy_ref(policy), "Normal", REASON_REMOVED, note)
    _record(
        cluster,
        _deployment_ref(after),
        "Normal",
        REASON_REMOVED,
        f"{note} (SpilloverPolicy {name})",
    )
    return ReconcileResult(Outcome.REMOVED, note, spec, list(plan.changes), after)


def policies_targeting(
    cluster: Connection,
    namespace: str,
    deployment: str,
    *,
    exclude: str | None = None,
    reader: Reader | None = None,
) -> list[str]:
    """Live policies (valid specs) targeting `deployment`, oldest first."""
    reader = reader or ApiReader(cluster.in_namespace(namespace))
    names = competing_policies(reader.policies_targeting(deployment), deployment)
    return [n for n in names if n != exclude]


def policies_selecting(policies: Iterable[PolicyCopy], labels: Mapping[str, Any]) -> list[str]:
    """The live, valid policies among `policies` whose spec.recipePods.selector matches
    a pod's `labels`."""
    names: list[str] = []
    for policy in policies:
        if _meta(policy).get("deletionTimestamp"):
            continue
        spec = policy.spec
        if isinstance(spec, InvalidSpecError):
            continue
        if selector_matches(spec.recipe_pods.selector, labels):
            names.append(str(_meta(policy).get("name")))
    return sorted(names)
