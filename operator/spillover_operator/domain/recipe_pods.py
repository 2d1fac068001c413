"""The recipe mcp-host pods: which run the policy's values, which still run old ones,
and what refreshing them means. Pure: pods, ReplicaSets and ConfigMaps come in as
API dicts and a lookup, so the operator, spilloverctl and tests classify alike.

- A pod is **current** when every spillover variable its container's process sees
  (`resolved_env`: env, valueFrom, envFrom) means what the policy says (an absent
  variable means the mcp-host default).
- It is **stale** when one differs: it started with old values (before the WRC's
  rollout completed, or from a workload template that carries them) and keeps them
  until it is restarted.
- It is **unknown** when a value may not be read (a Secret, an unreadable ConfigMap),
  never guessed.

Refreshing restarts the owners of stale pods one at a time: a rollout restart of the
owning Deployment (found through the pod's ReplicaSet) or StatefulSet, or deleting
the pods of another controller that recreates them. A pod no controller recreates is
never deleted. Progress is read from the owner's own state each time (`OwnerState`:
its current revision, observed generation, updated and ready replicas), never from
counts taken before its rollout. Replacement pods of a settled owner that are still
stale are restarted again (they may have started before the WRC passed the value on);
after MAX_RESTARTS_PER_ROUND the owner's template carries the old value:
`StaleAfterRefresh`, and that owner is left alone.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from spillover_operator.domain.model import (
    COND_RECIPE_PODS,
    DEFAULT_RECIPE_CONTAINER,
    REASON_ALL_CURRENT,
    REASON_CONTAINER_NOT_FOUND,
    REASON_NO_PODS,
    REASON_STALE,
    REASON_STALE_AFTER_REFRESH,
    REASON_UNKNOWN,
    SPILLOVER_VARS,
    PolicySpec,
    RecipePodsSpec,
    read_env,
)
from spillover_operator.domain.resolved_env import (
    ConfigMapLookup,
    Resolved,
    no_config_maps,
    resolve,
)
from spillover_operator.domain.rollout import rollout_state
from spillover_operator.domain.status import Condition

PodState = Literal["current", "stale", "unknown"]
STATES: tuple[PodState, ...] = ("current", "stale", "unknown")
MAX_LISTED = 10

# The pod template annotation of a rollout restart (what `kubectl rollout restart` uses,
# so kubectl and dashboards show it as one).
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
RESTARTABLE = ("Deployment", "StatefulSet")


# ---- selectors -------------------------------------------------------------------


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any] | None) -> bool:
    """Whether a `metav1.LabelSelector` selects an object with `labels`."""
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = [str(v) for v in expr.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# ---- owners ----------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Owner:
    """What recreates a pod: `kind`/`name` of its controller (a ReplicaSet resolved to
    its Deployment); kind "" when nothing does (a bare pod)."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}" if self.kind else "(no controller)"

    @property
    def restartable(self) -> bool:
        return self.kind in RESTARTABLE

    @property
    def recreates(self) -> bool:
        return bool(self.kind)


NO_OWNER = Owner("", "")


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def owner_of(pod: Mapping[str, Any], replica_sets: Mapping[str, Mapping[str, Any]]) -> Owner:
    """The pod's owner; `replica_sets` by name (a ReplicaSet owned by a Deployment
    resolves to that Deployment)."""
    ref = _controller(pod)
    if ref is None:
        return NO_OWNER
    kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
    if kind == "ReplicaSet":
        rs = replica_sets.get(name)
        above = _controller(rs) if rs is not None else None
        if above is not None and above.get("kind") == "Deployment":
            return Owner("Deployment", str(above.get("name")))
    return Owner(kind, name)


# ---- classification --------------------------------------------------------------


def parse_time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class PodVerdict:
    """One matched pod: its owner, when it was created, what its process sees, and the
    verdict with the reason for people."""

    name: str
    owner: Owner
    created: str | None
    container: str | None
    values: dict[str, Resolved]
    state: PodState
    why: str
    # Stale only because its process started before the value reached the ConfigMap it
    # reads (its spec is right): a restart settles it, the template is not to blame.
    predates_change: bool = False
    # Stale values read from a ConfigMap that still holds the old value: the WRC has not
    # passed the new one on yet (or will not); the pod's own template is not to blame.
    from_config_map: bool = False
    # The revision of its owner's template it runs (label pod-template-hash of a
    # Deployment's pod, controller-revision-hash of a StatefulSet's): see OwnerState.
    revision: str | None = None
    # spec.recipePods.container when the pod has no such container, and the
    # containers it has: its values cannot be read (ContainerNotFound).
    missing_container: str | None = None
    containers: tuple[str, ...] = ()

    def shown(self, var: str) -> str:
        found = self.values.get(var)
        return "?" if found is None else found.shown()


def pod_container_name(pod: Mapping[str, Any], wanted: str | None) -> str | None:
    """The container read: `wanted`; else `mcp-host` when the pod has it; else the first."""
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    if wanted is not None:
        return wanted if wanted in names else None
    if DEFAULT_RECIPE_CONTAINER in names:
        return DEFAULT_RECIPE_CONTAINER
    return names[0] if names else None


ChangedAt = Callable[[str], datetime.datetime | None]


class ReportUnavailable(RuntimeError):
    """A pod declares a process report (mcp_host.REPORT_ANNOTATION) that cannot be read."""


# What a pod's process reports it runs with (mcp_host.parse_report); None: the pod
# declares no report; ReportUnavailable: it does, and it could not be read.
ProcessReport = Callable[[Mapping[str, Any]], Mapping[str, str | None] | None]


def _started(pod: Mapping[str, Any], container: str) -> datetime.datetime | None:
    """When the container's process started (else the pod, else its creation)."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        if isinstance(cs, Mapping) and cs.get("name") == container:
            running = (cs.get("state") or {}).get("running") or {}
            found = parse_time(running.get("startedAt"))
            if found is not None:
                return found
    return parse_time(status.get("startTime")) or parse_time(
        (pod.get("metadata") or {}).get("creationTimestamp")
    )


def _may_predate(
    pod: Mapping[str, Any], started: datetime.datetime, changed: datetime.datetime
) -> bool:
    """Whether the container may have started before the ConfigMap change. Both times
    have one-second resolution, so the same second cannot tell which came first: that
    counts as before (the kill switch must not call a pod current that may not be),
    unless the pod comes from a rollout restart stamped at or after the change (a
    restart is issued only once the change was seen)."""
    if changed > started:
        return True
    if changed < started:
        return False
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    restarted = parse_time(annotations.get(RESTARTED_AT))
    return restarted is None or restarted < changed


def classify(
    pod: Mapping[str, Any],
    desired: Mapping[str, str | None],
    *,
    container: str | None,
    owner: Owner,
    config_maps: ConfigMapLookup = no_config_maps,
    changed_at: ChangedAt | None = None,
    process_report: ProcessReport | None = None,
) -> PodVerdict:
    """The verdict on one pod given the policy's values (`envplan.render_env`).

    With `process_report`, a pod whose spec says it runs the policy's values is current
    only once its process reports them too, where it declares a report
    (`mcp_host.REPORT_ANNOTATION`): a process that reports other values is stale, one
    whose report cannot be read is unknown.

    A value from a ConfigMap is what the ConfigMap held when the container started:
    with `changed_at` (when a ConfigMap last changed), a pod that would be current but
    read a ConfigMap changed after it started is stale (its process may well hold the
    older value; a restart settles it)."""
    meta = pod.get("metadata") or {}
    name = str(meta.get("name"))
    created = meta.get("creationTimestamp")
    chosen = pod_container_name(pod, container)
    found = None
    if chosen is not None:
        found = next(
            (c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == chosen),
            None,
        )
    if found is None:
        names = tuple(str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or [])
        return PodVerdict(
            name, owner, created, chosen, {}, "unknown",
            f"no container {container!r} in the pod (its containers: "
            f"{', '.join(names) or 'none'})",
            missing_container=container, containers=names,
        )  # fmt: skip
    read: list[str] = []

    def recording(name: str) -> Mapping[str, str] | None:
        read.append(name)
        return config_maps(name)

    values = resolve(found, SPILLOVER_VARS, recording)
    unknown = [var for var in SPILLOVER_VARS if not values[var].known]
    differing = [
        var
        for var in SPILLOVER_VARS
        if values[var].known
        and read_env(var, values[var].value).text != read_env(var, desired.get(var)).text
    ]
    if differing:
        parts = ", ".join(
            f"{var}={values[var].shown()} (policy: {read_env(var, desired.get(var)).text})"
            for var in differing
        )
        return PodVerdict(
            name,
            owner,
            created,
            chosen,
            values,
            "stale",
            f"runs {parts}; it keeps them until restarted",
            from_config_map=all("configMap" in values[var].source for var in differing),
        )
    if unknown:
        why = "; ".join(f"{var}: {values[var].source}" for var in unknown)
        return PodVerdict(name, owner, created, chosen, values, "unknown", why)
    started = _started(pod, str(chosen))
    if changed_at is not None and started is not None:
        for cm in dict.fromkeys(read):
            when = changed_at(cm)
            if when is not None and _may_predate(pod, started, when):
                order = ">" if when > started else "in the same second as"
                return PodVerdict(
                    name,
                    owner,
                    created,
                    chosen,
                    values,
                    "stale",
                    f"ConfigMap {cm} changed after the container started "
                    f"({when.isoformat()} {order} {started.isoformat()}): the process keeps "
                    "the values it started with until restarted",
                    predates_change=True,
                )
    if process_report is not None:
        try:
            reported = process_report(pod)
        except ReportUnavailable as exc:
            return PodVerdict(
                name, owner, created, chosen, values, "unknown",
                f"its process did not report what it runs with: {exc}",
            )  # fmt: skip
        if reported is not None:
            off = [
                var
                for var in SPILLOVER_VARS
                if read_env(var, reported.get(var)).text != read_env(var, desired.get(var)).text
            ]
            if off:
                parts = ", ".join(
                    f"{var}={read_env(var, reported.get(var)).text} "
                    f"(policy: {read_env(var, desired.get(var)).text})"
                    for var in off
                )
                return PodVerdict(
                    name, owner, created, chosen, values, "stale",
                    f"its process reports it runs {parts}",
                )  # fmt: skip
            return PodVerdict(
                name, owner, created, chosen, values, "current",
                "its process reports the policy's values",
            )  # fmt: skip
    return PodVerdict(name, owner, created, chosen, values, "current", "runs the policy's values")


@dataclass(frozen=True)
class RecipePods:
    """Every matched pod's verdict, sorted by name."""

    selector: str
    pods: list[PodVerdict] = field(default_factory=list)

    def count(self, state: PodState) -> int:
        return sum(1 for p in self.pods if p.state == state)

    @property
    def matched(self) -> int:
        return len(self.pods)

    def stale_pods(self) -> list[PodVerdict]:
        return [p for p in self.pods if p.state == "stale"]

    def stale_by_owner(self) -> dict[Owner, int]:
        """How many stale pods each owner has, by owner."""
        counts: dict[Owner, int] = {}
        for verdict in self.stale_pods():
            counts[verdict.owner] = counts.get(verdict.owner, 0) + 1
        return dict(sorted(counts.items()))

    def stale_owners_text(self) -> str:
        """`Deployment/a: 2, StatefulSet/b: 1` (at most MAX_LISTED owners), for
        messages: owners and counts, never pod names (a policy's author may not be
        allowed to list the pods; `spilloverctl status` lists them with the caller's
        own permissions)."""
        counts = list(self.stale_by_owner().items())
        text = ", ".join(f"{owner}: {n}" for owner, n in counts[:MAX_LISTED])
        more = len(counts) - MAX_LISTED
        return text + (f" and {more} more owners" if more > 0 else "")

    def to_status(self) -> dict[str, Any]:
        """status.recipePods (without the refresh record): counts, and the stale pods'
        owners with their counts (no pod names)."""
        return {
            "selector": self.selector,
            "matched": self.matched,
            "current": self.count("current"),
            "stale": self.count("stale"),
            "unknown": self.count("unknown"),
            "staleOwners": [
                {"owner": str(owner), "stale": n}
                for owner, n in list(self.stale_by_owner().items())[:MAX_LISTED]
            ],
        }


def assess_pods(
    pods: Iterable[Mapping[str, Any]],
    spec: PolicySpec,
    desired: Mapping[str, str | None],
    *,
    selector: str,
    replica_sets: Mapping[str, Mapping[str, Any]] | None = None,
    config_maps: ConfigMapLookup = no_config_maps,
    changed_at: ChangedAt | None = None,
    process_report: ProcessReport | None = None,
) -> RecipePods:
    """Classify the pods matched by the policy's selector (`pods` already listed with
    it; those being deleted count too: they still run until they are gone)."""
    verdicts = [
        replace(
            classify(
                pod,
                desired,
                container=spec.recipe_pods.container,
                owner=owner_of(pod, replica_sets or {}),
                config_maps=config_maps,
                changed_at=changed_at,
                process_report=process_report,
            ),
            revision=pod_revision(pod),
        )
        for pod in pods
        if selector_matches(spec.recipe_pods.selector, (pod.get("metadata") or {}).get("labels"))
    ]
    return RecipePods(selector, sorted(verdicts, key=lambda v: v.name))


# ---- owners' rollouts ------------------------------------------------------------

# The label a Deployment's (through its ReplicaSet) or a StatefulSet's pods carry: the
# revision of the template they were made from.
REVISION_LABELS = ("pod-template-hash", "controller-revision-hash")
DEPLOYMENT_REVISION = "deployment.kubernetes.io/revision"


def pod_revision(pod: Mapping[str, Any]) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for key in REVISION_LABELS:
        if labels.get(key):
            return str(labels[key])
    return None


@dataclass(frozen=True)
class OwnerState:
    """A Deployment's or StatefulSet's rollout as its controller reports it, read from
    the cluster on every look (never counted before a rollout): `generation` of the
    copy read; `revision` the label value its pods of the current template carry (None
    while the controller has not observed the current spec); `settled` once it has,
    and every desired replica runs the current template, ready, with no old one left;
    `stuck` when the rollout exceeded its progress deadline."""

    owner: Owner
    generation: int
    revision: str | None
    settled: bool
    message: str = ""
    stuck: bool = False


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def deployment_state(
    deployment: Mapping[str, Any], replica_sets: Iterable[Mapping[str, Any]]
) -> OwnerState:
    """The Deployment's state: its current ReplicaSet is the one it owns with the
    Deployment's revision annotation (`deployment.kubernetes.io/revision`), once the
    controller observed its generation; settled as `kubectl rollout status` judges."""
    meta = deployment.get("metadata") or {}
    name = str(meta.get("name"))
    rollout = rollout_state(deployment)
    generation = rollout.generation or 0
    revision: str | None = None
    number = (meta.get("annotations") or {}).get(DEPLOYMENT_REVISION)
    if number is not None and (rollout.observed_generation or 0) >= generation:
        for rs in replica_sets:
            ref = _controller(rs)
            rs_meta = rs.get("metadata") or {}
            if (
                ref is not None
                and ref.get("kind") == "Deployment"
                and ref.get("name") == name
                and (rs_meta.get("annotations") or {}).get(DEPLOYMENT_REVISION) == number
            ):
                found = (rs_meta.get("labels") or {}).get("pod-template-hash")
                revision = str(found) if found else None
                break
    return OwnerState(
        Owner("Deployment", name),
        generation,
        revision,
        rollout.complete and revision is not None,
        rollout.message,
        stuck="progress deadline" in rollout.message,
    )


def stateful_set_state(stateful_set: Mapping[str, Any]) -> OwnerState:
    """The StatefulSet's state: its pods of the current template carry
    status.updateRevision; settled once the controller observed its generation and
    every desired replica is updated and ready (currentRevision == updateRevision)."""
    meta = stateful_set.get("metadata") or {}
    spec = stateful_set.get("spec") or {}
    status = stateful_set.get("status") or {}
    generation = _int(meta.get("generation"))
    observed = _int(status.get("observedGeneration"), -1) >= generation
    desired = _int(spec.get("replicas"), 1)
    update = status.get("updateRevision")
    revision = str(update) if observed and update else None
    settled = (
        revision is not None
        and status.get("currentRevision") == update
        and _int(status.get("updatedReplicas")) >= desired
        and _int(status.get("readyReplicas")) >= desired
        and _int(status.get("replicas")) == desired
    )
    message = (
        f"{_int(status.get('updatedReplicas'))} of {desired} updated, "
        f"{_int(status.get('readyReplicas'))} ready"
    )
    return OwnerState(
        Owner("StatefulSet", str(meta.get("name"))), generation, revision, settled, message
    )


# ---- refresh ---------------------------------------------------------------------


def refresh_wanted(recipe: RecipePodsSpec, enabled: bool, requested: bool) -> bool:
    """Whether stale pods are refreshed: `Always`; `OnKillSwitch` while the kill switch
    is engaged; or once on request (`spilloverctl --refresh-recipe-pods`)."""
    if requested or recipe.refresh == "Always":
        return True
    return recipe.refresh == "OnKillSwitch" and not enabled


@dataclass(frozen=True)
class RefreshStep:
    """What to do now. `action`: `restart` (a rollout restart of `owner`), `delete`
    (the `pods` of `owner`, which recreates them), `wait` (for `owner`: `why`), or
    `none`. `stale_after_refresh`: owners whose replacement pods are still stale;
    `unrefreshable`: stale pods nothing recreates; `refused`: owners of stale pods the
    caller may not refresh (`may_refresh`), never touched; `stalled`: owners whose
    rollout exceeded its progress deadline (a restart cannot help; not waited for)."""

    action: Literal["restart", "delete", "wait", "none"]
    owner: Owner | None = None
    pods: tuple[str, ...] = ()
    stale_after_refresh: tuple[Owner, ...] = ()
    unrefreshable: tuple[str, ...] = ()
    refused: tuple[Owner, ...] = ()
    why: str = ""
    stalled: tuple[Owner, ...] = ()


def _after(created: str | None, moment: str) -> bool:
    a, b = parse_time(created), parse_time(moment)
    return a is not None and b is not None and a >= b


# How often one owner is restarted in one round because its new pods started before the
# value reached them (the WRC passes it on after its own rollout; seen within 0.5 s).
MAX_RESTARTS_PER_ROUND = 3

WHY_ROLLING = "its rollout is in progress"
WHY_CONFIG_MAP = "the ConfigMap its pods read still holds the old value (the WRC passes it on)"
WHY_REPLACING = "it still has stale pods created before its refresh"


def _waits_for_config_map(stale: Sequence[PodVerdict]) -> bool:
    """Every stale pod reads its old values from a ConfigMap that still holds them: a
    restart now would bring the same values back."""
    return bool(stale) and all(v.from_config_map and not v.predates_change for v in stale)


def owner_rolling(
    state: OwnerState, pods: Sequence[PodVerdict], restarted_generation: int | None = None
) -> bool:
    """Whether the owner is still rolling out: the copy read is older than the spec a
    restart wrote (`restarted_generation`), its controller has not settled (observed
    the spec, every desired replica updated and ready, no old one left), or one of its
    matched pods (those terminating count: they still run) is of another revision."""
    if restarted_generation is not None and state.generation < restarted_generation:
        return True
    if not state.settled or state.revision is None:
        return True
    return any(v.revision != state.revision for v in pods)


def next_refresh(
    pods: RecipePods,
    refreshed: Mapping[Owner, str],
    expected: Mapping[Owner, int] | None = None,
    may_refresh: Callable[[Owner], bool] | None = None,
    times: Mapping[Owner, int] | None = None,
    owners: Mapping[Owner, OwnerState] | None = None,
    generations: Mapping[Owner, int] | None = None,
) -> RefreshStep:
    """The next refresh step given the owners already refreshed in this round (owner ->
    when), what each owner's controller reports now (`owners`: a Deployment's or
    StatefulSet's OwnerState; `generations`: the generation each restart wrote) and how
    often each was restarted (`times`).

    One owner at a time. A refreshed owner with a state is done once it is no longer
    rolling (`owner_rolling`): every pod of it then runs its current template, so
    progress never depends on counts taken before (surge pods, a rollout already in
    progress, a replica change). Its pods still stale then were restarted in vain:
    while the ConfigMap they read still holds the old value (`from_config_map`) the
    refresh waits for it; else (started before the value reached them, or the WRC had
    not re-rendered yet: the operator cannot always tell) it is restarted again, and
    once restarted MAX_RESTARTS_PER_ROUND times it is StaleAfterRefresh: the refresh
    stops there (no other owner is restarted in this round).

    An owner without a state (another controller: its pods are deleted) is judged by
    its pods' creation times: while it has stale pods created before its refresh, or
    fewer pods created since than it had stale ones (`expected`), wait.

    An owner not refreshed yet is skipped while every stale pod of it reads a ConfigMap
    that still holds the old value, or while a rollout of its own (not this refresh's)
    replaces them; an owner whose rollout exceeded its progress deadline is `stalled`.
    `may_refresh` (None: every owner): the owners the caller may restart or delete pods
    of; the others are `refused`, skipped."""
    expected = expected or {}
    times = times or {}
    owners = owners or {}
    generations = generations or {}
    by_owner: dict[Owner, list[PodVerdict]] = {}
    every: dict[Owner, list[PodVerdict]] = {}
    for verdict in pods.pods:
        every.setdefault(verdict.owner, []).append(verdict)
        if verdict.state == "stale":
            by_owner.setdefault(verdict.owner, []).append(verdict)
    unrefreshable = tuple(v.name for v in by_owner.pop(NO_OWNER, []))
    refused = tuple(
        owner
        for owner in sorted(by_owner)
        if may_refresh is not None and owner not in refreshed and not may_refresh(owner)
    )
    for owner in refused:
        del by_owner[owner]
    stalled = tuple(owner for owner in sorted(by_owner) if owner in owners and owners[owner].stuck)
    after_refresh: list[Owner] = []
    again: Owner | None = None
    waiting: tuple[Owner, str] | None = None
    for owner, at in sorted(refreshed.items()):
        stale = by_owner.get(owner, [])
        state = owners.get(owner)
        if state is not None:
            if state.stuck:
                continue
            if owner_rolling(state, every.get(owner, []), generations.get(owner)):
                waiting = waiting or (owner, WHY_ROLLING)
                continue
            new_stale = stale  # every pod of it runs its current template now
        else:
            replaced = sum(1 for v in every.get(owner, []) if _after(v.created, at))
            new_stale = [v for v in stale if _after(v.created, at)]
            if not new_stale and (stale or replaced < expected.get(owner, 0)):
                waiting = waiting or (owner, WHY_REPLACING)
                continue
        if not new_stale:
            continue
        spent = times.get(owner, 1) >= MAX_RESTARTS_PER_ROUND
        if not spent and _waits_for_config_map(new_stale):
            # The WRC has not passed the new value on yet: once it has, they are
            # restarted again (below).
            waiting = waiting or (owner, WHY_CONFIG_MAP)
        elif not spent:
            again = again or owner
        else:
            after_refresh.append(owner)
    done = tuple(after_refresh)
    if again is not None and not done:
        names = tuple(v.name for v in by_owner.get(again, []))
        action: Literal["restart", "delete"] = "restart" if again.restartable else "delete"
        return RefreshStep(action, again, names, done, unrefreshable, refused, stalled=stalled)
    if done:
        # Stop: the WRC's templates carry the old values; restarting more owners would
        # only churn pods (and fight the WRC).
        return RefreshStep("none", None, (), done, unrefreshable, refused, stalled=stalled)
    if waiting is not None:
        owner, why = waiting
        return RefreshStep("wait", owner, (), done, unrefreshable, refused, why, stalled)
    skipped: tuple[Owner, str] | None = None
    for owner in sorted(by_owner):
        if owner in refreshed or owner in stalled:
            continue
        stale = by_owner[owner]
        state = owners.get(owner)
        if _waits_for_config_map(stale):
            skipped = skipped or (owner, WHY_CONFIG_MAP)
            continue
        if (
            state is not None
            and owner_rolling(state, every.get(owner, []))
            and all(state.revision is None or v.revision != state.revision for v in stale)
        ):
            # A rollout of its own (begun before this refresh, or a restart whose record
            # was lost) replaces these: its new pods are judged once they run.
            skipped = skipped or (owner, WHY_ROLLING)
            continue
        names = tuple(v.name for v in stale)
        action = "restart" if owner.restartable else "delete"
        return RefreshStep(action, owner, names, done, unrefreshable, refused, stalled=stalled)
    if skipped is not None:
        owner, why = skipped
        return RefreshStep("wait", owner, (), done, unrefreshable, refused, why, stalled)
    return RefreshStep("none", None, (), done, unrefreshable, refused, stalled=stalled)


def restart_patch(at: str) -> dict[str, Any]:
    """The merge patch of a rollout restart (as `kubectl rollout restart`): only the pod
    template's annotation; never the env of a workload the WRC owns."""
    return {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}}}


# ---- condition -------------------------------------------------------------------


def container_not_found(pods: RecipePods) -> str:
    """What to say when spec.recipePods.container names a container some matched pods
    do not have ("" when every pod has it): the name, how many pods lack it, the
    containers they have, and the fix."""
    missing = [p for p in pods.pods if p.missing_container is not None]
    if not missing:
        return ""
    wanted = missing[0].missing_container
    have = sorted({name for p in missing for name in p.containers})
    shown = ", ".join(have[:MAX_LISTED]) + (" ..." if len(have) > MAX_LISTED else "")
    return (
        f"spec.recipePods.container {wanted!r} is not a container of {len(missing)} of the "
        f"{pods.matched} matched pods (they have: {shown or 'no containers'}), so their "
        "values cannot be read; set spec.recipePods.container to the container that runs "
        f"the mcp-host, or remove it ({DEFAULT_RECIPE_CONTAINER!r} when a pod has it, "
        "else its first container)"
    )


def recipe_condition(
    pods: RecipePods,
    *,
    stale_after_refresh: Sequence[Owner] = (),
    note: str = "",
) -> Condition:
    """RecipePodsCurrent: True when no matched pod is stale or unknown; else False with
    StaleAfterRefresh (naming the owners), Stale, ContainerNotFound (naming
    spec.recipePods.container), Unknown or NoPods. A missing container is named in
    every message it applies to."""
    missing = container_not_found(pods)
    tail = "".join(f"; {part}" for part in (missing, note) if part)
    counts = (
        f"{pods.matched} matched ({pods.selector}): {pods.count('current')} current, "
        f"{pods.count('stale')} stale, {pods.count('unknown')} unknown"
    )
    if pods.matched == 0:
        return Condition(
            COND_RECIPE_PODS,
            False,
            REASON_NO_PODS,
            f"no pod matches spec.recipePods.selector ({pods.selector}): nothing to check; "
            f"if recipes are running, fix the selector{tail}",
        )
    stale = pods.stale_pods()
    if stale_after_refresh and stale:
        owners = ", ".join(str(o) for o in stale_after_refresh)
        return Condition(
            COND_RECIPE_PODS,
            False,
            REASON_STALE_AFTER_REFRESH,
            f"{counts}; restarted {owners} but its new pods still run old values: its pod "
            "template carries them (the WRC did not re-render it); the operator does not "
            f"write env into workloads the WRC owns, so fix it there{tail}",
        )
    if stale:
        return Condition(
            COND_RECIPE_PODS,
            False,
            REASON_STALE,
            f"{counts}; stale pods by owner: {pods.stale_owners_text()}{tail}",
        )
    if missing:
        return Condition(COND_RECIPE_PODS, False, REASON_CONTAINER_NOT_FOUND, f"{counts}{tail}")
    if pods.count("unknown"):
        return Condition(COND_RECIPE_PODS, False, REASON_UNKNOWN, f"{counts}{tail}")
    return Condition(COND_RECIPE_PODS, True, REASON_ALL_CURRENT, f"{counts}{tail}")
