"""The decisions of reconcile, without a cluster: who owns a Deployment, what a policy
that cannot be applied reports, and what an apply (or finding nothing to apply) reports
and announces. reconcile_policy itself runs against the real API server in
tests/integration/test_reconcile_policy.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from spillover_operator.client import Connection
from spillover_operator.domain.allowlist import ALLOWED_TARGETS_VAR
from spillover_operator.domain.constants import REFRESH_REQUEST_ANNOTATION
from spillover_operator.domain.envplan import EnvChange, plan_apply
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR, PolicySpec
from spillover_operator.domain.policy import PolicyCopy, parse_spec
from spillover_operator.domain.resolved_env import no_config_maps
from spillover_operator.domain.settings import from_environ
from spillover_operator.handlers.views import (
    BY_TARGET,
    DEPLOYMENTS,
    POLICIES,
    IndexReader,
    policy_entry,
)
from spillover_operator.reconciler.reconcile import (
    Apply,
    EarlyApply,
    Gone,
    NeedsFresh,
    Outcome,
    Proceed,
    Refused,
    Settled,
    competing_policies,
    decide,
    decide_reconcile,
    describe_changes,
    failed_status,
    ownership_refusal,
    settle,
)

NOW = "2026-01-02T03:04:05Z"


def _policy(name: str, created: str, target: str = "wrc", deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-09T00:00:00Z"
    return {"metadata": meta, "spec": {"enabled": True, "target": {"deployment": target}}}


def test_competing_policies_oldest_first_then_name() -> None:
    policies = [
        _policy("b", "2026-01-02T00:00:00Z"),
        _policy("a", "2026-01-02T00:00:00Z"),
        _policy("z", "2026-01-01T00:00:00Z"),
        _policy("other", "2025-01-01T00:00:00Z", target="another"),
        _policy("old-deleting", "2020-01-01T00:00:00Z", deleting=True),
        {
            "metadata": {"name": "invalid", "creationTimestamp": "2019-01-01T00:00:00Z"},
            "spec": {"enabled": True, "target": {"deployment": "wrc"}, "thresholdBytes": 1},
        },
    ]
    copies = [PolicyCopy(p) for p in policies]
    assert competing_policies(copies, "wrc") == ["z", "a", "b"]
    assert competing_policies(copies, "wrc", include="old-deleting") == [
        "old-deleting",
        "z",
        "a",
        "b",
    ]


def test_ownership_refusal_names_the_older_policy() -> None:
    spec = parse_spec({"enabled": True, "target": {"deployment": "wrc"}})
    policies = [
        PolicyCopy(_policy("first", "2026-01-01T00:00:00Z")),
        PolicyCopy(_policy("second", "2026-01-02T00:00:00Z")),
    ]
    assert ownership_refusal("ns", "first", spec, policies) is None
    refused = ownership_refusal("ns", "second", spec, policies)
    assert refused is not None
    assert "policy 'first' (older) already manages Deployment ns/wrc" in refused


def test_describe_changes() -> None:
    text = describe_changes(
        [EnvChange("A", None, "1"), EnvChange("B", "1", "2"), EnvChange("C", "3", None)]
    )
    assert text == "set A=1; set B=2 (was 1); removed C (was 3)"
    assert describe_changes([]) == "no change"


def test_failed_status_sets_ready_and_applied_false_with_the_reason() -> None:
    policy = {"metadata": {"name": "p", "generation": 3}, "status": {}}
    status = failed_status(policy, "TargetNotFound", "gone", target={"deployment": "wrc"})
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"]["status"] == conds["Applied"]["status"] == "False"
    assert conds["Ready"]["reason"] == "TargetNotFound" and conds["Ready"]["message"] == "gone"
    assert status["observedGeneration"] == 3
    assert status["target"] == {"deployment": "wrc"}


def _deployment(env: list[dict[str, Any]], *, rolled_out: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "wrc", "namespace": "ns", "generation": 2},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "controller", "env": env}]}},
        },
        "status": {
            "observedGeneration": 2,
            "replicas": 1,
            "updatedReplicas": 1 if rolled_out else 0,
            "readyReplicas": 1,
            "availableReplicas": 1,
        },
    }


def _stored_policy(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "spillover.clerum.io/v1alpha1",
        "kind": "SpilloverPolicy",
        "metadata": {"name": "spillover", "namespace": "ns", "generation": 1},
        "spec": spec,
        "status": status or {},
    }


def _after(deployment: dict[str, Any], spec: PolicySpec) -> dict[str, Any]:
    """The Deployment once the plan's env is in place (what the API server returns)."""
    plan = plan_apply(deployment, spec, config_maps=no_config_maps)
    after = copy.deepcopy(deployment)
    env = after["spec"]["template"]["spec"]["containers"][0]["env"]
    for change in plan.changes:
        env[:] = [e for e in env if e["name"] != change.name]
        if change.after is not None:
            env.append({"name": change.name, "value": change.after})
    return after


def test_settle_first_apply_reports_applied_with_events_on_both_objects() -> None:
    raw = {"enabled": False, "thresholdBytes": 32768, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    before = _deployment([{"name": PASSTHROUGH_VAR, "value": "A"}])
    plan = plan_apply(before, spec, config_maps=no_config_maps)
    done = settle(_stored_policy(raw), spec, _after(before, spec), plan, now=NOW)

    assert done.outcome == Outcome.APPLIED
    assert done.ready is True and done.container == "controller"
    assert [(obj["kind"], reason) for obj, _, reason, _ in done.events] == [
        ("SpilloverPolicy", "Applied"),
        ("Deployment", "Applied"),
    ]
    message = done.events[0][3]
    assert message.startswith("spillover disabled (kill switch engaged): ")
    assert f"set {ENABLED_VAR}=false" in message and "container controller" in message
    assert done.events[1][3].endswith("(SpilloverPolicy spillover)")
    status = done.status
    assert status["lastAppliedTime"] == NOW
    assert status["killSwitch"] == {"engagedAt": NOW}
    assert status["effective"]["enabled"] == "false"
    assert status["effective"]["thresholdBytes"] == "32768"
    assert status["target"] == {"deployment": "wrc", "container": "controller"}
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "RolloutComplete")


def test_settle_a_difference_after_an_apply_is_drift() -> None:
    raw = {"enabled": True, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    applied_status = {
        "observedGeneration": 1,
        "conditions": [{"type": "Applied", "status": "True", "reason": "Applied"}],
    }
    before = _deployment([{"name": ENABLED_VAR, "value": "false"}])  # edited by hand
    plan = plan_apply(before, spec, config_maps=no_config_maps)
    done = settle(_stored_policy(raw, applied_status), spec, _after(before, spec), plan, now=NOW)
    assert done.outcome == Outcome.DRIFT_CORRECTED
    assert {reason for _, _, reason, _ in done.events} == {"DriftCorrected"}
    assert done.events[0][3].startswith("restored the policy's values after the Deployment")
    # The policy's own change made ahead is reported as applied, even when a pass in
    # between (an event of its own patch) recorded the generation as applied.
    own = settle(
        _stored_policy(raw, applied_status), spec, _after(before, spec), plan, now=NOW,
        policy_change=True,
    )  # fmt: skip
    assert own.outcome == Outcome.APPLIED
    assert {reason for _, _, reason, _ in own.events} == {"Applied"}


def test_settle_with_nothing_to_change_is_in_sync_and_posts_nothing() -> None:
    raw = {"enabled": True, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    synced = _after(_deployment([]), spec)
    plan = plan_apply(synced, spec, config_maps=no_config_maps)
    assert plan.patch is None
    done = settle(_stored_policy(raw), spec, synced, plan, now=NOW)
    assert done.outcome == Outcome.IN_SYNC
    assert done.events == []
    assert "lastAppliedTime" not in done.status
    assert "killSwitch" not in done.status
    assert "thresholdBytes" not in done.status["effective"]
    assert done.status["effective"]["enabled"] == "true"


def test_settle_during_a_rollout_is_not_ready_yet() -> None:
    raw = {"enabled": True, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    rolling = _after(_deployment([], rolled_out=False), spec)
    done = settle(
        _stored_policy(raw),
        spec,
        rolling,
        plan_apply(rolling, spec, config_maps=no_config_maps),
        now=NOW,
    )
    assert done.ready is False
    ready = next(c for c in done.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RolloutInProgress")
    applied = next(c for c in done.status["conditions"] if c["type"] == "Applied")
    assert applied["status"] == "True"


def test_settle_reports_effective_values_their_source_and_envfrom_notes() -> None:
    from spillover_operator.domain.model import THRESHOLD_VAR

    raw = {"enabled": True, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    before = _deployment(
        [
            {"name": PASSTHROUGH_VAR, "value": "A"},
            {"name": ENABLED_VAR, "valueFrom": {"configMapKeyRef": {"name": "f", "key": "on"}}},
        ]
    )
    before["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "tuning"}}
    ]
    maps = {"tuning": {THRESHOLD_VAR: "4096"}, "f": {"on": "true"}}
    plan = plan_apply(before, spec, config_maps=maps.get)
    assert {c.name: c.after for c in plan.changes}[THRESHOLD_VAR] == "131072"
    # Before the apply, status reports what is in effect, with the source.
    done = settle(_stored_policy(raw), spec, before, plan, now=NOW, config_maps=maps.get)
    assert done.status["effective"]["thresholdBytes"] == "4096"
    assert done.status["effectiveSource"]["thresholdBytes"] == "envFrom configMap tuning"
    assert done.status["effective"]["enabled"] == "true"
    assert done.status["effectiveSource"]["enabled"] == "env (configMapKeyRef f/on)"
    notes = done.status["envFromNotes"]
    assert notes and notes[0].startswith(f"envFrom configMap tuning sets {THRESHOLD_VAR}=4096")
    assert "envFrom configMap tuning sets" in done.events[0][3]
    applied = next(c for c in done.status["conditions"] if c["type"] == "Applied")
    assert "writes" in applied["message"] and "131072" in applied["message"]


def test_within_one_creation_second_the_policy_already_applied_keeps_its_deployment() -> None:
    """creationTimestamp has one-second resolution: a policy created in the same second
    as the applied one (and named before it) does not take the Deployment over."""
    applied = _policy("spillover", "2026-01-02T00:00:00Z")
    applied["status"] = {"lastAppliedTime": "2026-01-02T00:00:00.300Z"}
    newcomer = _policy("second", "2026-01-02T00:00:00Z")
    applied, newcomer = PolicyCopy(applied), PolicyCopy(newcomer)
    assert competing_policies([newcomer, applied], "wrc") == ["spillover", "second"]
    # An older policy still wins, applied or not.
    old = PolicyCopy(_policy("old", "2026-01-01T00:00:00Z"))
    assert competing_policies([applied, old], "wrc")[0] == "old"


def _with_record(policy: dict[str, Any], generation: int, record_generation: int) -> Any:
    from spillover_operator.domain.change_record import ChangeRecord
    from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION

    record = ChangeRecord("alice", record_generation, NOW, "spilloverctl kill", "INC-123")
    policy["metadata"]["generation"] = generation
    policy["metadata"]["annotations"] = {CHANGE_RECORD_ANNOTATION: record.encode()}
    return policy


def test_settle_announces_an_applied_change_with_its_record() -> None:
    raw = {"enabled": False, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    before = _deployment([])
    policy = _with_record(_stored_policy(raw), 2, 2)
    done = settle(
        policy,
        spec,
        _after(before, spec),
        plan_apply(before, spec, config_maps=no_config_maps),
        now=NOW,
    )
    for _, _, reason, message in done.events:
        assert reason == "Applied"
        assert f"(generation 2 changed by alice with spilloverctl kill at {NOW}: INC-123)" in (
            message
        )
    assert done.status["lastChange"]["user"] == "alice"


def test_settle_never_repeats_the_record_of_an_earlier_generation() -> None:
    """An admin's `kubectl patch` after alice's kill: same annotation, new generation."""
    raw = {"enabled": True, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    before = _deployment([{"name": ENABLED_VAR, "value": "false"}])
    policy = _with_record(_stored_policy(raw), 3, 2)
    done = settle(
        policy,
        spec,
        _after(before, spec),
        plan_apply(before, spec, config_maps=no_config_maps),
        now=NOW,
    )
    assert {reason for _, _, reason, _ in done.events} == {"Applied"}
    for _, _, _, message in done.events:
        assert "generation 3 changed without a reason by an unknown user" in message
        assert "alice" not in message and "INC-123" not in message
    assert done.status["lastChange"] == {
        "generation": 3,
        "recorded": False,
        "note": "the change record describes generation 2, not this one",
    }


def test_settle_drift_carries_no_change_record() -> None:
    raw = {"enabled": True, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    applied = {
        "observedGeneration": 2,
        "conditions": [{"type": "Applied", "status": "True", "reason": "Applied"}],
    }
    before = _deployment([{"name": ENABLED_VAR, "value": "false"}])  # edited by hand
    policy = _with_record(_stored_policy(raw, applied), 2, 2)
    done = settle(
        policy,
        spec,
        _after(before, spec),
        plan_apply(before, spec, config_maps=no_config_maps),
        now=NOW,
    )
    assert {reason for _, _, reason, _ in done.events} == {"DriftCorrected"}
    assert all("alice" not in message for _, _, _, message in done.events)


def test_settle_a_policy_change_is_never_drift_whatever_the_status_says_by_now() -> None:
    """A change made while the operator was down: at start it applies it early
    (apply_change), and a reconcile with nothing left to change may write the status
    for the generation before that change is reported. Still a policy change."""
    raw = {"enabled": False, "target": {"deployment": "wrc"}}
    spec = parse_spec(raw)
    written_meanwhile = {
        "observedGeneration": 2,
        "conditions": [{"type": "Applied", "status": "True", "reason": "Applied"}],
    }
    before = _deployment([{"name": ENABLED_VAR, "value": "true"}])
    policy = _with_record(_stored_policy(raw, written_meanwhile), 2, 2)
    plan = plan_apply(before, spec, config_maps=no_config_maps)
    done = settle(policy, spec, _after(before, spec), plan, now=NOW, policy_change=True)
    assert done.outcome == Outcome.APPLIED
    assert {reason for _, _, reason, _ in done.events} == {"Applied"}
    assert all("by hand" not in message for _, _, _, message in done.events)
    assert "changed by alice" in done.events[0][3]


def test_failed_status_reports_the_last_change_too() -> None:
    raw = {"enabled": True, "target": {"deployment": "wrc"}}
    policy = _with_record(_stored_policy(raw), 2, 2)
    status = failed_status(policy, "TargetNotFound", "gone")
    assert status["lastChange"]["recorded"] is True
    assert status["lastChange"]["reason"] == "INC-123"


def test_a_change_made_ahead_is_judged_on_the_newest_copy_of_the_same_spec() -> None:
    """The pass reporting a change made ahead coalesces the rollout's events: the
    patch's answer (not observed yet) must not hide the copy of the completed rollout
    the pass runs with (it reported RolloutInProgress until the resync)."""
    from spillover_operator.reconciler.reconcile import newer_status

    def dep(generation: int, observed: int, uid: str = "u") -> dict[str, Any]:
        return {
            "metadata": {"uid": uid, "generation": generation},
            "status": {"observedGeneration": observed},
        }

    answered = dep(2, 1)
    assert newer_status(answered, dep(2, 2)) == dep(2, 2)
    assert newer_status(answered, None) is answered
    assert newer_status(answered, dep(1, 1)) is answered  # a copy from before the patch
    assert newer_status(answered, dep(3, 3)) is answered  # another spec since: not this
    assert newer_status(answered, dep(2, 2, uid="other")) is answered  # recreated
    assert newer_status(dep(2, 2), dep(2, 1)) == dep(2, 2)  # never an older status


# ---- decide: what a reconcile does with the policy read, on plain data ---------------

ALLOW_WRC = from_environ({ALLOWED_TARGETS_VAR: "wrc"})
WRC = {"metadata": {"name": "wrc", "namespace": "ns"}, "spec": {}}


def _no_read(what: str) -> Any:
    def read(name: str) -> Any:
        raise AssertionError(f"decide read {what} {name!r} and should not have")

    return read


def test_decide_gone_for_a_missing_or_deleting_policy() -> None:
    assert isinstance(
        decide("ns", "p", None, ALLOW_WRC, _no_read("policies"), _no_read("dep")), Gone
    )
    deleting = _policy("p", "2026-01-01T00:00:00Z", deleting=True)
    decision = decide(
        "ns", "p", PolicyCopy(deleting), ALLOW_WRC, _no_read("policies"), _no_read("dep")
    )
    assert decision == Gone("policy ns/p is gone or being deleted")


def test_decide_refuses_an_invalid_spec_with_every_problem_and_no_target() -> None:
    policy = _policy("p", "2026-01-01T00:00:00Z")
    policy["spec"]["thresholdBytes"] = 1
    decision = decide(
        "ns", "p", PolicyCopy(policy), ALLOW_WRC, _no_read("policies"), _no_read("dep")
    )
    assert isinstance(decision, Refused)
    assert (decision.outcome, decision.reason, decision.spec) == (
        Outcome.INVALID_SPEC,
        "InvalidSpec",
        None,
    )
    assert "spec.thresholdBytes" in decision.message
    assert decision.message.endswith(". Fix the policy; nothing was changed on the Deployment.")


def test_decide_refuses_a_target_not_allowed_before_reading_anything() -> None:
    policy = _policy("p", "2026-01-01T00:00:00Z", target="other")
    decision = decide(
        "ns", "p", PolicyCopy(policy), ALLOW_WRC, _no_read("policies"), _no_read("dep")
    )
    assert isinstance(decision, Refused)
    assert decision.outcome == Outcome.TARGET_NOT_ALLOWED and decision.warn
    assert decision.spec is not None and decision.spec.deployment == "other"


def test_decide_refuses_the_younger_of_two_policies_and_a_missing_deployment() -> None:
    older = PolicyCopy(_policy("a", "2026-01-01T00:00:00Z"))
    younger = PolicyCopy(_policy("b", "2026-01-02T00:00:00Z"))
    conflict = decide("ns", "b", younger, ALLOW_WRC, lambda _: [older, younger], _no_read("dep"))
    assert isinstance(conflict, Refused) and conflict.outcome == Outcome.CONFLICT
    assert "policy 'a' (older) already manages Deployment ns/wrc" in conflict.message
    missing = decide("ns", "a", older, ALLOW_WRC, lambda _: [older, younger], lambda _: None)
    assert isinstance(missing, Refused) and missing.outcome == Outcome.TARGET_NOT_FOUND
    assert missing.message.startswith("Deployment ns/wrc not found")


def test_decide_proceeds_with_the_parsed_spec_and_the_deployment_read() -> None:
    policy = PolicyCopy(_policy("a", "2026-01-01T00:00:00Z"))
    decision = decide("ns", "a", policy, ALLOW_WRC, lambda _: [policy], {"wrc": WRC}.get)
    assert isinstance(decision, Proceed)
    assert decision.spec == parse_spec(policy["spec"]) and decision.deployment is WRC


def test_decide_and_decide_reconcile_parse_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec is parsed where the copy came in (`PolicyCopy`): deciding only reads it."""
    policy, before = _stored_policy(KILL), _deployment([])
    copy = PolicyCopy(_policy("a", "2026-01-01T00:00:00Z"))
    reader = _index_reader(policy, before, ("policy", "spillover"))

    def refuse(spec: Any) -> Any:
        raise AssertionError("the spec was parsed again while deciding")

    monkeypatch.setattr("spillover_operator.domain.policy.parse_spec", refuse)
    assert isinstance(
        decide("ns", "a", copy, ALLOW_WRC, lambda _: [copy], {"wrc": WRC}.get), Proceed
    )
    assert isinstance(_decide(reader), Apply)


# ---- decide_reconcile: what one reconcile does, read through kopf's indexes ----------

# decide_reconcile asks the reader whether its copies are current and never sends a
# request: the connection only makes the reader one that could confirm them.
CAN_CONFIRM = Connection(ApiClient(Configuration()), "ns", "spillover-operator")
KILL = {"enabled": False, "target": {"deployment": "wrc"}}


def _index_reader(
    policy: dict[str, Any], deployment: dict[str, Any], *read: tuple[str, str]
) -> IndexReader:
    """The operator's reader over one policy and its Deployment, as kopf's indexes hold
    them; `read`: the copies already confirmed with the API."""
    name = policy["metadata"]["name"]
    indexes = {
        POLICIES: {key: [copy] for key, copy in policy_entry("ns", name, policy).items()},
        DEPLOYMENTS: {("ns", "wrc"): [deployment]},
        BY_TARGET: {("ns", "wrc"): [name]},
    }
    return IndexReader("ns", indexes, cluster=CAN_CONFIRM, read=frozenset(read))


def _decide(reader: IndexReader, early: EarlyApply | None = None) -> Any:
    return decide_reconcile("ns", "spillover", reader, ALLOW_WRC, early, no_config_maps)


def test_decide_reconcile_needs_the_policy_fresh_before_a_change_is_made_from_it() -> None:
    policy, before = _stored_policy(KILL), _deployment([])
    assert _decide(_index_reader(policy, before)) == NeedsFresh(policy="spillover")

    decision = _decide(_index_reader(policy, before, ("policy", "spillover")))
    assert isinstance(decision, Apply)
    assert decision.spec == parse_spec(KILL) and decision.deployment == before
    assert decision.early is None
    changes = decision.planner(before).changes
    assert [(c.name, c.after) for c in changes if c.name == ENABLED_VAR] == [(ENABLED_VAR, "false")]


def test_decide_reconcile_needs_the_deployment_fresh_before_nothing_to_change() -> None:
    policy = _stored_policy(KILL)
    in_sync = _after(_deployment([]), parse_spec(KILL))
    assert _decide(_index_reader(policy, in_sync)) == NeedsFresh(deployment="wrc")

    decision = _decide(_index_reader(policy, in_sync, ("deployment", "wrc")))
    assert isinstance(decision, Settled)
    assert decision.plan.patch is None and decision.after == in_sync


def test_decide_reconcile_needs_the_policy_fresh_before_a_refresh_step() -> None:
    policy = _stored_policy(KILL)
    policy["metadata"]["annotations"] = {REFRESH_REQUEST_ANNOTATION: "r1"}
    in_sync = _after(_deployment([]), parse_spec(KILL))
    # Asked first, even with the Deployment confirmed: the refresh step is taken from
    # what the policy's status says was refreshed already.
    confirmed_deployment = _index_reader(policy, in_sync, ("deployment", "wrc"))
    assert _decide(confirmed_deployment) == NeedsFresh(policy="spillover")

    both = _index_reader(policy, in_sync, ("deployment", "wrc"), ("policy", "spillover"))
    assert isinstance(_decide(both), Settled)


def test_decide_reconcile_reports_a_change_made_ahead_as_made() -> None:
    policy, before = _stored_policy(KILL), _deployment([])
    spec = parse_spec(KILL)
    answered = _after(before, spec)
    answered["metadata"]["generation"] = 3  # the patch's answer: a new generation
    early = EarlyApply(spec, answered, plan_apply(before, spec, config_maps=no_config_maps))
    decision = _decide(_index_reader(policy, before), early)
    assert isinstance(decision, Settled)
    assert decision.plan is early.plan and decision.early is early
    assert decision.after == early.after  # the copy read is older than the patch's answer

    other = EarlyApply(parse_spec({**KILL, "enabled": True}), early.after, early.plan)
    assert _decide(_index_reader(policy, before), other) == NeedsFresh(policy="spillover")


def test_decide_reconcile_refuses_a_container_it_cannot_find_with_the_policy() -> None:
    raw = {**KILL, "target": {"deployment": "wrc", "container": "missing"}}
    policy = _stored_policy(raw)
    decision = _decide(_index_reader(policy, _deployment([])))
    assert isinstance(decision, Refused) and decision.policy == policy
    assert decision.outcome == Outcome.TARGET_NOT_FOUND
    assert decision.message.endswith(". Nothing was changed.")


def test_decide_reconcile_passes_on_what_decide_refuses() -> None:
    policy = _stored_policy({**KILL, "target": {"deployment": "other"}})
    decision = _decide(_index_reader(policy, _deployment([])))
    assert isinstance(decision, Refused) and decision.outcome == Outcome.TARGET_NOT_ALLOWED
    assert decision.policy == policy
