"""recipe_pods: selectors, owners, the current/stale/unknown verdict, the refresh steps
and the RecipePodsCurrent condition, from plain dicts."""

from __future__ import annotations

from typing import Any

import pytest
from spillover_operator.domain.envplan import render_env
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR
from spillover_operator.domain.policy import InvalidSpecError, parse_spec, spec_to_json
from spillover_operator.domain.recipe_pods import (
    MAX_RESTARTS_PER_ROUND,
    NO_OWNER,
    WHY_CONFIG_MAP,
    WHY_ROLLING,
    Owner,
    OwnerState,
    PodVerdict,
    RecipePods,
    ReportUnavailable,
    assess_pods,
    classify,
    deployment_state,
    next_refresh,
    owner_of,
    pod_revision,
    recipe_condition,
    refresh_wanted,
    restart_patch,
    selector_matches,
    stateful_set_state,
)

LABELS = {"app.kubernetes.io/name": "mcp-host"}


def pod(
    name: str,
    env: dict[str, str] | list[dict[str, Any]] | None = None,
    *,
    created: str = "2026-01-01T00:00:00Z",
    owner: tuple[str, str] | None = ("ReplicaSet", "mcp-host-r1-abc"),
    labels: dict[str, str] | None = None,
    container: str = "mcp-host",
) -> dict[str, Any]:
    entries = (
        [{"name": k, "value": v} for k, v in env.items()] if isinstance(env, dict) else env or []
    )
    meta: dict[str, Any] = {
        "name": name,
        "creationTimestamp": created,
        "labels": dict(LABELS if labels is None else labels),
    }
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {"metadata": meta, "spec": {"containers": [{"name": container, "env": entries}]}}


RS = {
    "mcp-host-r1-abc": {
        "metadata": {
            "name": "mcp-host-r1-abc",
            "ownerReferences": [{"kind": "Deployment", "name": "mcp-host-r1", "controller": True}],
        }
    }
}


def spec(**fields: Any) -> Any:
    return parse_spec({"enabled": True, "target": {"deployment": "wrc"}, **fields})


OFF = render_env(spec(enabled=False))


def test_selector_matching() -> None:
    sel = {
        "matchLabels": {"a": "1"},
        "matchExpressions": [
            {"key": "b", "operator": "In", "values": ["x", "y"]},
            {"key": "c", "operator": "DoesNotExist"},
        ],
    }
    assert selector_matches(sel, {"a": "1", "b": "x"})
    assert not selector_matches(sel, {"a": "1", "b": "z"})
    assert not selector_matches(sel, {"a": "1", "b": "x", "c": ""})
    assert not selector_matches({"matchLabels": {"a": "1"}}, None)


def test_owner_resolves_a_replica_set_to_its_deployment() -> None:
    assert owner_of(pod("p"), RS) == Owner("Deployment", "mcp-host-r1")
    assert owner_of(pod("p", owner=("ReplicaSet", "orphan")), RS) == Owner("ReplicaSet", "orphan")
    assert owner_of(pod("p", owner=("StatefulSet", "s")), RS).restartable
    assert owner_of(pod("p", owner=None), RS) == NO_OWNER
    assert not NO_OWNER.recreates


def test_current_stale_and_unknown() -> None:
    current = classify(pod("a", {ENABLED_VAR: "false"}), OFF, container=None, owner=NO_OWNER)
    assert current.state == "current"
    # Not a value the mcp-host takes: it runs its default (on), so the kill switch is
    # not in effect there (counted stale, never current by a guess).
    shouting = classify(pod("a", {ENABLED_VAR: "FALSE"}), OFF, container=None, owner=NO_OWNER)
    assert shouting.state == "stale"
    stale = classify(pod("b", {ENABLED_VAR: "true"}), OFF, container=None, owner=NO_OWNER)
    assert stale.state == "stale" and f"{ENABLED_VAR}=true" in stale.why
    # Absent means the mcp-host default: spillover on.
    assert classify(pod("c"), OFF, container=None, owner=NO_OWNER).state == "stale"
    assert classify(pod("c"), render_env(spec()), container=None, owner=NO_OWNER).state == (
        "current"
    )
    secret = [{"name": ENABLED_VAR, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    unknown = classify(pod("d", secret), OFF, container=None, owner=NO_OWNER)
    assert unknown.state == "unknown" and "Secrets are not read" in unknown.why
    missing = classify(pod("e"), OFF, container="other", owner=NO_OWNER)
    assert missing.state == "unknown"


def test_config_map_values_are_resolved() -> None:
    ref = [{"name": ENABLED_VAR, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "on"}}}]
    env_from = [{"configMapRef": {"name": "cm2"}, "prefix": "CLERUM_"}]
    p = pod("a", ref)
    p["spec"]["containers"][0]["envFrom"] = env_from
    maps = {"cm": {"on": "false"}, "cm2": {"WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "4096"}}
    verdict = classify(p, OFF, container=None, owner=NO_OWNER, config_maps=maps.get)
    assert verdict.state == "stale"  # threshold 4096 from envFrom, the policy's is the default
    assert verdict.shown(THRESHOLD_VAR) == "4096" and verdict.shown(ENABLED_VAR) == "false"
    wanted = render_env(spec(enabled=False, thresholdBytes=4096))
    assert classify(p, wanted, container=None, owner=NO_OWNER, config_maps=maps.get).state == (
        "current"
    )


def test_container_choice_prefers_mcp_host() -> None:
    p = pod("a", {ENABLED_VAR: "false"})
    p["spec"]["containers"].insert(0, {"name": "sidecar", "env": []})
    assert classify(p, OFF, container=None, owner=NO_OWNER).state == "current"


def test_assess_pods_counts_and_lists_at_most_ten() -> None:
    pods = [pod(f"p{i:02}", {ENABLED_VAR: "true"}) for i in range(12)]
    pods.append(pod("other", {ENABLED_VAR: "true"}, labels={"app": "x"}))
    pods.append(pod("ok", {ENABLED_VAR: "false"}))
    result = assess_pods(pods, spec(enabled=False), OFF, selector="s", replica_sets=RS)
    status = result.to_status()
    assert status["matched"] == 13 and status["stale"] == 12 and status["current"] == 1
    # Counts and owners, never pod names (the policy's author may not list pods).
    assert status["staleOwners"] == [{"owner": "Deployment/mcp-host-r1", "stale": 12}]
    assert "p0" not in str(status) and "p1" not in str(status)
    assert result.pods[0].owner == Owner("Deployment", "mcp-host-r1")
    message = recipe_condition(result).message
    assert "stale pods by owner: Deployment/mcp-host-r1: 12" in message
    assert "p0" not in message and "p1" not in message


def verdict(name: str, owner: Owner, created: str, state: str = "stale") -> PodVerdict:
    return PodVerdict(name, owner, created, "mcp-host", {}, state, "")  # type: ignore[arg-type]


D1, D2, CM = Owner("Deployment", "d1"), Owner("Deployment", "d2"), Owner("ConfigMap", "run")


def test_refresh_one_owner_at_a_time_then_stale_after_refresh() -> None:
    pods = RecipePods(
        "s",
        [
            verdict("a", D1, "2026-01-01T00:00:00Z"),
            verdict("b", D2, "2026-01-01T00:00:00Z"),
            verdict("c", NO_OWNER, "2026-01-01T00:00:00Z"),
        ],
    )
    first = next_refresh(pods, {})
    assert (first.action, first.owner, first.unrefreshable) == ("restart", D1, ("c",))
    # d1 refreshed at 01:00, its old pod still there: wait.
    assert next_refresh(pods, {D1: "2026-01-01T01:00:00Z"}).action == "wait"
    # d1 replaced its pod with a current one: on to d2.
    replaced = RecipePods(
        "s",
        [
            verdict("a2", D1, "2026-01-01T01:00:05Z", "current"),
            verdict("b", D2, "2026-01-01T00:00:00Z"),
        ],
    )
    step = next_refresh(replaced, {D1: "2026-01-01T01:00:00Z"}, {D1: 1})
    assert (step.action, step.owner) == ("restart", D2)
    # ...but not before d1 has as many new pods as it had stale ones.
    gone = RecipePods("s", [verdict("b", D2, "2026-01-01T00:00:00Z")])
    assert next_refresh(gone, {D1: "2026-01-01T01:00:00Z"}, {D1: 1}).action == "wait"
    # d1's new pod (created after) still stale: restarted again, and once d1 was
    # restarted MAX_RESTARTS_PER_ROUND times, StaleAfterRefresh, and the refresh stops.
    again = RecipePods(
        "s", [verdict("a2", D1, "2026-01-01T01:00:05Z"), verdict("b", D2, "2026-01-01T00:00:00Z")]
    )
    retry = next_refresh(again, {D1: "2026-01-01T01:00:00Z"})
    assert (retry.action, retry.owner, retry.stale_after_refresh) == ("restart", D1, ())
    step = next_refresh(again, {D1: "2026-01-01T01:00:00Z"}, times={D1: MAX_RESTARTS_PER_ROUND})
    assert step.stale_after_refresh == (D1,)
    assert step.action == "none"
    done = next_refresh(RecipePods("s", []), {D1: "x"})
    assert done.action == "none"


def test_other_controllers_get_their_pods_deleted() -> None:
    pods = RecipePods("s", [verdict("a", CM, "2026-01-01T00:00:00Z")])
    step = next_refresh(pods, {})
    assert (step.action, step.pods) == ("delete", ("a",))


def test_owners_the_caller_may_not_refresh_are_refused_and_skipped() -> None:
    """The operator's refresh allow-list: a refused owner is neither restarted nor are
    its pods deleted; an allowed one after it is still refreshed."""
    pods = RecipePods(
        "s",
        [
            verdict("a", D1, "2026-01-01T00:00:00Z"),
            verdict("b", D2, "2026-01-01T00:00:00Z"),
            verdict("c", CM, "2026-01-01T00:00:00Z"),
        ],
    )
    step = next_refresh(pods, {}, may_refresh=lambda owner: owner == D2)
    assert (step.action, step.owner, step.refused) == ("restart", D2, (CM, D1))
    nothing = next_refresh(pods, {}, may_refresh=lambda owner: False)
    assert (nothing.action, nothing.owner, nothing.refused) == ("none", None, (CM, D1, D2))
    # Without the check (spilloverctl --direct acts with the caller's own permissions).
    assert next_refresh(pods, {}).refused == ()


def test_refresh_modes() -> None:
    never = spec().recipe_pods
    on_kill = spec(recipePods={"refresh": "OnKillSwitch"}).recipe_pods
    always = spec(recipePods={"refresh": "Always"}).recipe_pods
    assert not refresh_wanted(never, False, False) and refresh_wanted(never, True, True)
    assert refresh_wanted(on_kill, False, False) and not refresh_wanted(on_kill, True, False)
    assert refresh_wanted(always, True, False)


def test_restart_patch_touches_only_the_template_annotation() -> None:
    assert restart_patch("T") == {
        "spec": {
            "template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "T"}}}
        }
    }


def test_condition_reasons() -> None:
    stale = RecipePods("s", [verdict("a", D1, "t")])
    assert recipe_condition(RecipePods("s", [])).reason == "NoPods"
    assert recipe_condition(stale).reason == "Stale"
    after = recipe_condition(stale, stale_after_refresh=[D1])
    assert after.reason == "StaleAfterRefresh" and "Deployment/d1" in after.message
    unknown = RecipePods("s", [verdict("a", D1, "t", "unknown")])
    assert recipe_condition(unknown).reason == "Unknown"
    ok = recipe_condition(RecipePods("s", [verdict("a", D1, "t", "current")]))
    assert ok.status and ok.reason == "AllCurrent"


def test_a_recipe_container_no_matched_pod_has_is_named_with_the_fix() -> None:
    """spec.recipePods.container that the pods do not have cannot be refused at
    admission (pods come and go): RecipePodsCurrent says ContainerNotFound, naming it,
    the containers the pods have and what to write."""
    wrong = spec(recipePods={"container": "mcp"})
    two = pod("b", {ENABLED_VAR: "false"})
    two["spec"]["containers"].append({"name": "sidecar"})
    result = assess_pods(
        [pod("a", {ENABLED_VAR: "false"}), two], wrong, OFF, selector="s", replica_sets=RS
    )
    assert [p.state for p in result.pods] == ["unknown", "unknown"]
    assert "no container 'mcp' in the pod (its containers: mcp-host, sidecar)" in (
        result.pods[1].why
    )
    cond = recipe_condition(result)
    assert (cond.status, cond.reason) == (False, "ContainerNotFound")
    assert "spec.recipePods.container 'mcp' is not a container of 2 of the 2 matched pods" in (
        cond.message
    )
    assert "(they have: mcp-host, sidecar)" in cond.message
    assert "set spec.recipePods.container to the container that runs the mcp-host" in (cond.message)
    # Stale pods elsewhere keep their reason; the missing container is still named.
    stale = pod("c", {ENABLED_VAR: "true"}, container="mcp")
    mixed = assess_pods(
        [pod("a", {ENABLED_VAR: "false"}), stale], wrong, OFF, selector="s", replica_sets=RS
    )
    cond = recipe_condition(mixed)
    assert cond.reason == "Stale"
    assert "spec.recipePods.container 'mcp' is not a container of 1 of the 2" in cond.message
    # The container every pod has: no word of it.
    right = assess_pods(
        [pod("a", {ENABLED_VAR: "false"})],
        spec(enabled=False, recipePods={"container": "mcp-host"}),
        OFF,
        selector="s",
    )
    assert recipe_condition(right).reason == "AllCurrent"
    assert "spec.recipePods.container" not in recipe_condition(right).message


def test_spec_recipe_pods_defaults_and_validation() -> None:
    default = spec()
    assert default.recipe_pods.selector == {"matchLabels": LABELS}
    assert default.recipe_pods.refresh == "Never"
    assert "recipePods" not in spec_to_json(default)
    given = spec(recipePods={"refresh": "Always", "container": "mcp"})
    assert spec_to_json(given)["recipePods"]["refresh"] == "Always"
    with pytest.raises(InvalidSpecError) as exc:
        spec(
            recipePods={
                "refresh": "Sometimes",
                "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
                "extra": 1,
            }
        )
    text = str(exc.value)
    assert "spec.recipePods.refresh" in text and "Sometimes" in text
    assert "operator In needs at least one value" in text
    assert "spec.recipePods.extra: unknown field" in text
    with pytest.raises(InvalidSpecError, match="empty selector would match every pod"):
        spec(recipePods={"selector": {}})
    # refresh: null is no mode (a template's empty value): refused, never Never.
    with pytest.raises(InvalidSpecError) as exc:
        spec(recipePods={"refresh": None})
    assert "spec.recipePods.refresh: null is not a refresh mode" in str(exc.value)
    assert "Never, OnKillSwitch, Always, or remove the line (Never)" in str(exc.value)


def test_budget_unset_and_enabled_default_meanings() -> None:
    wanted = render_env(spec())
    p = pod("a", {ENABLED_VAR: "true", BUDGET_VAR: "16777216"})
    assert classify(p, wanted, container=None, owner=NO_OWNER).state == "current"


def test_a_config_map_changed_after_the_container_started_makes_the_pod_stale() -> None:
    import datetime

    ref = [{"name": ENABLED_VAR, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "on"}}}]
    p = pod("a", ref)
    p["status"] = {
        "containerStatuses": [
            {"name": "mcp-host", "state": {"running": {"startedAt": "2026-01-01T00:00:10Z"}}}
        ]
    }
    maps = {"cm": {"on": "false"}}

    def at(stamp: str) -> Any:
        return lambda name: datetime.datetime.fromisoformat(stamp)

    before = at("2026-01-01T00:00:05+00:00")
    after = at("2026-01-01T00:01:00+00:00")
    kwargs: dict[str, Any] = {"container": None, "owner": NO_OWNER, "config_maps": maps.get}
    assert classify(p, OFF, changed_at=before, **kwargs).state == "current"
    stale = classify(p, OFF, changed_at=after, **kwargs)
    assert stale.state == "stale" and "ConfigMap cm changed after the container started" in (
        stale.why
    )
    # Timestamps have one-second resolution: a change in the container's start second may
    # have come first, so the pod counts as stale...
    same = at("2026-01-01T00:00:10+00:00")
    assert classify(p, OFF, changed_at=same, **kwargs).state == "stale"
    # ...unless the pod comes from a rollout restart stamped at or after the change.
    p["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:10Z"}
    assert classify(p, OFF, changed_at=same, **kwargs).state == "current"
    p["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:09Z"}
    assert classify(p, OFF, changed_at=same, **kwargs).state == "stale"
    # A pod whose values come from literals is not affected by ConfigMap writes.
    assert classify(pod("b", {ENABLED_VAR: "false"}), OFF, changed_at=after, **kwargs).state == (
        "current"
    )


def test_an_explicit_default_or_an_invalid_size_runs_as_the_default() -> None:
    """The pod runs what the mcp-host reads (`model.read_env`): THRESHOLD=131072
    is the policy's unset threshold; an out-of-range one runs at the default too."""
    want = render_env(spec())  # threshold unset
    for raw in ("131072", " 131072 ", "100", "12ab"):
        got = classify(pod("a", {THRESHOLD_VAR: raw}), want, container=None, owner=NO_OWNER)
        assert got.state == "current", (raw, got.why)
    wrong = classify(pod("a", {THRESHOLD_VAR: "32768"}), want, container=None, owner=NO_OWNER)
    assert wrong.state == "stale"


def test_an_owner_whose_new_pods_started_before_the_value_reached_them_is_restarted_again() -> None:
    """Not StaleAfterRefresh: their spec is right, only the ConfigMap they read changed
    after they started (the WRC passed the value on after the refresh). Restarted again,
    up to MAX_RESTARTS_PER_ROUND times, then StaleAfterRefresh."""
    at = "2026-01-01T01:00:00Z"
    late = PodVerdict(
        "p-new",
        D1,
        "2026-01-01T01:00:05Z",
        "mcp-host",
        {},
        "stale",
        "ConfigMap cm changed",
        predates_change=True,
    )
    pods = RecipePods("s", [late])
    step = next_refresh(pods, {D1: at}, {D1: 1}, times={D1: 1})
    assert (step.action, step.owner, step.stale_after_refresh) == ("restart", D1, ())
    spent = next_refresh(pods, {D1: at}, {D1: 1}, times={D1: MAX_RESTARTS_PER_ROUND})
    assert spent.stale_after_refresh == (D1,)
    baked = PodVerdict("p-new", D1, "2026-01-01T01:00:05Z", "mcp-host", {}, "stale", "runs x")
    again = next_refresh(RecipePods("s", [baked]), {D1: at}, {D1: 1}, times={D1: 1})
    assert (again.action, again.stale_after_refresh) == ("restart", ())
    blamed = next_refresh(
        RecipePods("s", [baked]), {D1: at}, {D1: 1}, times={D1: MAX_RESTARTS_PER_ROUND}
    )
    assert blamed.stale_after_refresh == (D1,)


def test_new_pods_reading_a_config_map_that_still_holds_the_old_value_are_waited_for() -> None:
    """The refresh came before the WRC passed the value on: not the template's fault."""
    at = "2026-01-01T01:00:00Z"
    early = PodVerdict(
        "p-new",
        D1,
        "2026-01-01T01:00:05Z",
        "mcp-host",
        {},
        "stale",
        "runs x",
        from_config_map=True,
    )
    step = next_refresh(RecipePods("s", [early]), {D1: at}, {D1: 1}, times={D1: 1})
    assert (step.action, step.owner, step.stale_after_refresh) == ("wait", D1, ())


def _pod_with_env(enabled: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "mcp-host",
                                 "env": [{"name": ENABLED_VAR, "value": enabled}]}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def test_a_process_report_decides_once_the_spec_says_current() -> None:
    """The spec says the policy's values; what the process reports decides."""
    desired = {ENABLED_VAR: "false", THRESHOLD_VAR: None, BUDGET_VAR: None}
    pod = _pod_with_env("false")
    owner = Owner("Deployment", "d1")

    def reports(values: dict[str, str | None] | None) -> Any:
        return lambda _pod: values

    assert classify(pod, desired, container=None, owner=owner).state == "current"
    on = classify(pod, desired, container=None, owner=owner,
                  process_report=reports({ENABLED_VAR: None}))  # fmt: skip
    assert on.state == "stale"
    assert on.why == f"its process reports it runs {ENABLED_VAR}=true (policy: false)"
    off = classify(pod, desired, container=None, owner=owner,
                   process_report=reports({ENABLED_VAR: "false"}))  # fmt: skip
    assert (off.state, off.why) == ("current", "its process reports the policy's values")
    undeclared = classify(pod, desired, container=None, owner=owner, process_report=reports(None))
    assert undeclared.why == "runs the policy's values"

    def unreachable(_pod: Any) -> Any:
        raise ReportUnavailable("connection refused")

    unknown = classify(pod, desired, container=None, owner=owner, process_report=unreachable)
    assert unknown.state == "unknown" and "connection refused" in unknown.why
    # A spec that already says stale stays stale, whatever the process would say.
    stale = classify(_pod_with_env("true"), desired, container=None, owner=owner,
                     process_report=reports({ENABLED_VAR: "false"}))  # fmt: skip
    assert stale.state == "stale"


# ---- progress from the owners' rollout state ----------------------------------------

T0, AT = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"
LATER = "2026-01-01T01:00:05Z"


def rev(
    name: str,
    owner: Owner,
    revision: str,
    created: str = T0,
    state: str = "stale",
    **flags: bool,
) -> PodVerdict:
    return PodVerdict(
        name,
        owner,
        created,
        "mcp-host",
        {},
        state,
        "",
        revision=revision,
        **flags,  # type: ignore[arg-type]
    )


def settled(owner: Owner, revision: str, generation: int = 3) -> OwnerState:
    return OwnerState(owner, generation, revision, True, "rolled out")


def rolling(owner: Owner, revision: str | None, generation: int = 3) -> OwnerState:
    return OwnerState(owner, generation, revision, False, "waiting for rollout to finish")


def test_surge_pods_counted_before_do_not_hold_the_refresh_once_the_owner_settled() -> None:
    """Issue 19: the record said 37 stale pods (7 of them surge pods) for a 30-replica
    Deployment; 30 new pods never make 37. Its own status says when it is done."""
    new = [rev(f"d1-new-{i}", D1, "h2", LATER, "current") for i in range(30)]
    pods = RecipePods("s", [*new, rev("d2-old", D2, "k1")])
    legacy = next_refresh(pods, {D1: AT}, {D1: 37})
    assert legacy.action == "wait"  # counted: waits for 7 pods that never come
    step = next_refresh(pods, {D1: AT}, {D1: 37}, owners={D1: settled(D1, "h2")})
    assert (step.action, step.owner) == ("restart", D2)


def test_a_rollout_in_progress_is_waited_for_not_blamed() -> None:
    """Old pods (and ones an old ReplicaSet made after the restart) are of another
    revision: while the owner rolls out nothing is judged, then only its current pods."""
    pods = RecipePods(
        "s",
        [
            rev("d1-old", D1, "h1", T0),
            rev("d1-old-late", D1, "h1", LATER),  # an old ReplicaSet's, after the restart
            rev("d1-new", D1, "h2", LATER, "current"),
        ],
    )
    step = next_refresh(pods, {D1: AT}, {D1: 4}, times={D1: 1}, owners={D1: rolling(D1, "h2")})
    assert (step.action, step.owner, step.stale_after_refresh) == ("wait", D1, ())
    assert step.why == WHY_ROLLING
    # Settled, but a pod of the old revision still terminates: still rolling.
    step = next_refresh(pods, {D1: AT}, times={D1: 1}, owners={D1: settled(D1, "h2")})
    assert step.action == "wait"
    done = RecipePods("s", [rev("d1-new", D1, "h2", LATER, "current")])
    assert next_refresh(done, {D1: AT}, owners={D1: settled(D1, "h2")}).action == "none"


def test_a_copy_older_than_the_restart_is_not_judged() -> None:
    """Read from a cache before the controller saw the restart: the old revision looks
    settled; the generation the restart wrote tells it apart."""
    pods = RecipePods("s", [rev("d1-old", D1, "h1", T0)])
    step = next_refresh(
        pods, {D1: AT}, owners={D1: settled(D1, "h1", generation=2)}, generations={D1: 3}
    )
    assert (step.action, step.why) == ("wait", WHY_ROLLING)


def test_current_pods_still_stale_once_settled_are_restarted_again_then_blamed() -> None:
    pods = RecipePods("s", [rev("d1-new", D1, "h2", LATER, predates_change=True)])
    owners = {D1: settled(D1, "h2")}
    again = next_refresh(pods, {D1: AT}, times={D1: 1}, owners=owners, generations={D1: 3})
    assert (again.action, again.owner) == ("restart", D1)
    spent = next_refresh(
        pods, {D1: AT}, times={D1: MAX_RESTARTS_PER_ROUND}, owners=owners, generations={D1: 3}
    )
    assert (spent.action, spent.stale_after_refresh) == ("none", (D1,))
    waiting = RecipePods("s", [rev("d1-new", D1, "h2", LATER, from_config_map=True)])
    step = next_refresh(waiting, {D1: AT}, times={D1: 1}, owners=owners)
    assert (step.action, step.why) == ("wait", WHY_CONFIG_MAP)


def test_a_replica_change_mid_refresh_is_followed_not_counted() -> None:
    """Scaled from 4 to 6 during the refresh: 6 current pods and a settled Deployment
    are done; scaled to 2: 2 are done (never waits for the 4 counted)."""
    for n in (6, 2):
        pods = RecipePods("s", [rev(f"p{i}", D1, "h2", LATER, "current") for i in range(n)])
        step = next_refresh(pods, {D1: AT}, {D1: 4}, owners={D1: settled(D1, "h2")})
        assert step.action == "none", n


def test_an_owner_not_refreshed_yet_whose_own_rollout_replaces_its_stale_pods_waits() -> None:
    """A rollout begun before the refresh (or a restart whose record was lost when the
    operator restarted): not restarted again; another owner goes first."""
    pods = RecipePods("s", [rev("d1-old", D1, "h1"), rev("d2-old", D2, "k1")])
    owners = {D1: rolling(D1, "h2"), D2: settled(D2, "k1")}
    step = next_refresh(pods, {}, owners=owners)
    assert (step.action, step.owner) == ("restart", D2)
    only = RecipePods("s", [rev("d1-old", D1, "h1")])
    step = next_refresh(only, {}, owners=owners)
    assert (step.action, step.owner, step.why) == ("wait", D1, WHY_ROLLING)
    # Its current revision's pods are stale too: the rollout does not fix them.
    stale_new = RecipePods("s", [rev("d1-old", D1, "h1"), rev("d1-mid", D1, "h2")])
    assert next_refresh(stale_new, {}, owners=owners).action == "restart"
    # The controller has not observed its spec yet (revision unknown): wait for it.
    assert next_refresh(only, {}, owners={D1: rolling(D1, None)}).action == "wait"


def test_an_owner_whose_config_map_still_holds_the_old_value_is_not_restarted_yet() -> None:
    """A restart would bring the old value back (kill, then restore at once: the WRC
    has not passed the new value on): wait for it, restart the others meanwhile."""
    pods = RecipePods("s", [rev("d1-a", D1, "h1", from_config_map=True), rev("d2-a", D2, "k1")])
    owners = {D1: settled(D1, "h1"), D2: settled(D2, "k1")}
    step = next_refresh(pods, {}, owners=owners)
    assert (step.action, step.owner) == ("restart", D2)
    alone = RecipePods("s", [rev("d1-a", D1, "h1", from_config_map=True)])
    step = next_refresh(alone, {}, owners=owners)
    assert (step.action, step.owner, step.why) == ("wait", D1, WHY_CONFIG_MAP)
    changed = RecipePods("s", [rev("d1-a", D1, "h1", predates_change=True)])
    assert next_refresh(changed, {}, owners=owners).action == "restart"


def test_a_stuck_rollout_is_named_and_not_waited_for() -> None:
    stuck = OwnerState(D1, 3, "h2", False, "exceeded its progress deadline", stuck=True)
    pods = RecipePods("s", [rev("d1-old", D1, "h1"), rev("d2-old", D2, "k1")])
    step = next_refresh(pods, {D1: AT}, owners={D1: stuck, D2: settled(D2, "k1")})
    assert (step.action, step.owner, step.stalled) == ("restart", D2, (D1,))


def _rs(name: str, deployment: str, revision: str, hash_: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"pod-template-hash": hash_},
            "annotations": {"deployment.kubernetes.io/revision": revision},
            "ownerReferences": [{"kind": "Deployment", "name": deployment, "controller": True}],
        }
    }


def _deployment(generation: int, observed: int, revision: str, **status: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "d1",
            "generation": generation,
            "annotations": {"deployment.kubernetes.io/revision": revision},
        },
        "spec": {"replicas": 4},
        "status": {"observedGeneration": observed, **status},
    }


def test_deployment_state_reads_the_current_replica_set_and_the_rollout() -> None:
    sets = [_rs("d1-a", "d1", "1", "aaa"), _rs("d1-b", "d1", "2", "bbb"), _rs("x", "x", "2", "x")]
    done = _deployment(
        3, 3, "2", replicas=4, updatedReplicas=4, readyReplicas=4, availableReplicas=4
    )
    state = deployment_state(done, sets)
    assert (state.owner, state.revision, state.settled, state.generation) == (D1, "bbb", True, 3)
    surge = _deployment(
        3, 3, "2", replicas=5, updatedReplicas=4, readyReplicas=4, availableReplicas=4
    )
    assert deployment_state(surge, sets).settled is False  # an old replica is left
    unseen = _deployment(4, 3, "2", replicas=4, updatedReplicas=4, availableReplicas=4)
    assert deployment_state(unseen, sets).revision is None  # the restart not observed yet
    pod_ = pod("p", labels={**LABELS, "pod-template-hash": "bbb"})
    assert pod_revision(pod_) == "bbb"


def test_stateful_set_state() -> None:
    sts = {
        "metadata": {"name": "s", "generation": 2},
        "spec": {"replicas": 2},
        "status": {
            "observedGeneration": 2,
            "currentRevision": "s-1",
            "updateRevision": "s-2",
            "updatedReplicas": 1,
            "readyReplicas": 2,
            "replicas": 2,
        },
    }
    state = stateful_set_state(sts)
    assert (state.owner, state.revision, state.settled) == (Owner("StatefulSet", "s"), "s-2", False)
    sts["status"].update(currentRevision="s-2", updatedReplicas=2)
    assert stateful_set_state(sts).settled is True
