"""recipe_reconcile: one refresh step per reconcile from what the cluster says now and
the round's record in status (an operator restarted mid-refresh resumes from it), and
Events aggregated per owner. The client calls are replaced by plain functions; the
whole path runs against the API server in tests/integration/test_refresh_convergence.py."""

from __future__ import annotations

from typing import Any

import pytest
from spillover_operator.domain.policy import parse_spec
from spillover_operator.domain.recipe_pods import (
    Owner,
    OwnerState,
    PodVerdict,
    RecipePods,
    RefreshStep,
)
from spillover_operator.reconciler import recipe_reconcile
from spillover_operator.reconciler.recipe_reconcile import (
    RefreshRecord,
    describe_step,
    previous_refreshes,
    reconcile_recipe_pods,
)

D1, D2 = Owner("Deployment", "d1"), Owner("Deployment", "d2")
T0, AT, LATER = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z", "2026-01-01T01:00:05Z"
SPEC = parse_spec({"target": {"deployment": "wrc"}, "enabled": False,
                   "recipePods": {"refresh": "OnKillSwitch"}})  # fmt: skip


def v(name: str, owner: Owner, revision: str, created: str = T0, state: str = "stale") -> Any:
    return PodVerdict(name, owner, created, "mcp-host", {}, state, "", revision=revision)  # type: ignore[arg-type]


class Cluster:
    """What the client would answer: the pods, the owners' states; restarts recorded."""

    def __init__(self, pods: list[PodVerdict], owners: dict[Owner, OwnerState]) -> None:
        self.pods = RecipePods("s", pods)
        self.owners = owners
        self.restarts: list[str] = []

    def observe_refresh(self, *_: Any, **__: Any) -> tuple[RecipePods, dict[Owner, OwnerState]]:
        return self.pods, self.owners

    def observe_recipe_pods(self, *_: Any, **__: Any) -> RecipePods:
        return self.pods

    def restart_workload(self, _conn: Any, kind: str, name: str, _patch: Any) -> dict[str, Any]:
        self.restarts.append(f"{kind}/{name}")
        return {"metadata": {"name": name, "generation": 7}}


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster([], {})
    for name in ("observe_refresh", "observe_recipe_pods", "restart_workload"):
        monkeypatch.setattr(recipe_reconcile, name, getattr(c, name))
    return c


def run(policy: dict[str, Any], now: str = AT) -> recipe_reconcile.RecipeOutcome:
    return reconcile_recipe_pods(
        None,  # type: ignore[arg-type]
        policy,
        SPEC,
        {},
        rollout_complete=True,
        config_maps=lambda _: None,
        now=now,
        last_applied=None,
        refusal=lambda _: None,
    )


def policy_with(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "generation": 4}, "status": {"recipePods": status or {}}}


def test_a_restart_records_the_generation_it_wrote_and_resumes_from_status(
    cluster: Cluster,
) -> None:
    cluster.pods = RecipePods("s", [v("a", D1, "h1"), v("b", D2, "k1")])
    cluster.owners = {
        D1: OwnerState(D1, 6, "h1", True),
        D2: OwnerState(D2, 2, "k1", True),
    }
    first = run(policy_with())
    assert cluster.restarts == ["Deployment/d1"]
    assert first.status["refreshed"] == [
        {"owner": "Deployment/d1", "at": AT, "pods": 1, "times": 1, "generation": 7}
    ]
    # A new operator (or the next reconcile) reads the record: the copy of d1 it sees
    # is older than the restart (generation 6 < 7): it waits, never restarts d1 again.
    again = run(policy_with(first.status), now=LATER)
    assert cluster.restarts == ["Deployment/d1"]
    assert "waiting for Deployment/d1" in again.condition.message
    assert again.recheck_seconds == recipe_reconcile.RECHECK_SECONDS
    # d1 rolled out (generation 7 observed, its new pods current): on to d2.
    cluster.pods = RecipePods("s", [v("a2", D1, "h2", LATER, "current"), v("b", D2, "k1")])
    cluster.owners[D1] = OwnerState(D1, 7, "h2", True)
    run(policy_with(again.status), now=LATER)
    assert cluster.restarts == ["Deployment/d1", "Deployment/d2"]


def test_recipe_pods_events_are_posted_per_owner_change_not_per_count(cluster: Cluster) -> None:
    """A rollout of many pods changes the counts on every look: one RecipePods Event
    when the reason or the owners with stale pods change, one RecipePodsRefresh per
    restart."""
    cluster.pods = RecipePods("s", [v(f"a{i}", D1, "h1") for i in range(30)])
    cluster.owners = {D1: OwnerState(D1, 1, "h1", True)}
    out = run(policy_with())
    reasons = [reason for _, reason, _ in out.events]
    assert reasons == ["RecipePodsRefresh", "RecipePods"]
    status = out.status
    posted = 0
    for n in range(29, 0, -1):  # the rollout replaces them one by one
        pods = [v(f"a{i}", D1, "h1") for i in range(n)]
        pods += [v(f"b{i}", D1, "h2", LATER, "current") for i in range(30 - n)]
        cluster.pods = RecipePods("s", pods)
        cluster.owners = {D1: OwnerState(D1, 7, "h2", False)}
        out = run(policy_with(status), now=LATER)
        posted += len(out.events)
        status = out.status
    assert posted == 0
    cluster.pods = RecipePods("s", [v(f"b{i}", D1, "h2", LATER, "current") for i in range(30)])
    cluster.owners = {D1: OwnerState(D1, 7, "h2", True)}
    out = run(policy_with(status), now=LATER)
    assert [(t, r) for t, r, _ in out.events] == [("Normal", "RecipePods")]
    assert out.condition.reason == "AllCurrent"


def test_the_record_round_trips_and_another_round_starts_empty() -> None:
    record = RefreshRecord()
    record.note(D1, AT, 5, 9)
    record.note(D1, LATER, 5, None)
    body = {"refreshRound": "4/", "refreshed": record.to_status()}
    back = previous_refreshes(body, "4/")
    assert (back.at, back.times, back.generations) == ({D1: LATER}, {D1: 2}, {})
    assert previous_refreshes(body, "5/").at == {}


def test_describe_step_says_when_it_is_again() -> None:
    step = RefreshStep("restart", D1, ("a", "b"))
    assert describe_step(step) == "rollout restart of Deployment/d1 (2 stale pods)"
    assert describe_step(step, 2).endswith("(2 stale pods, again: 2nd time in this round)")
