"""leadership: who may take the leader Lease, and when a leader trusts itself (the
requests, on a real API server: tests/integration/test_leader_election.py)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from spillover_operator.domain import leadership
from spillover_operator.domain.leadership import Action, Endpoint, Term, decide

WALL = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _lease(holder: str | None, renewed_ago: float = 0.0, duration: int = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "leaseDurationSeconds": duration,
        "renewTime": leadership.micro_time(WALL - datetime.timedelta(seconds=renewed_ago)),
        "leaseTransitions": 2,
    }
    if holder is not None:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": leadership.LEASE_NAME, "resourceVersion": "7"}, "spec": spec}


def test_no_lease_is_created() -> None:
    assert decide(None, "b", None, 100.0).action is Action.CREATE


def test_our_own_lease_is_renewed_at_once_even_after_a_restart() -> None:
    # A restarted container of the same pod has the same identity: no wait.
    assert decide(_lease("b"), "b", None, 100.0).action is Action.RENEW


def test_a_released_lease_is_taken_at_once() -> None:
    assert decide(_lease(None), "b", None, 100.0).action is Action.TAKE
    assert decide(_lease(""), "b", None, 100.0).action is Action.TAKE


def test_a_fresh_lease_of_another_is_waited_for_and_remembered() -> None:
    decision = decide(_lease("a"), "b", None, 100.0)
    assert decision.action is Action.WAIT
    assert "a leads" in decision.reason
    assert decision.seen is not None and decision.seen.at == 100.0


def test_a_lease_unchanged_for_its_duration_by_our_clock_is_taken() -> None:
    lease = _lease("a")
    first = decide(lease, "b", None, 100.0)
    later = decide(lease, "b", first.seen, 114.9)
    assert later.action is Action.WAIT and later.seen == first.seen
    taken = decide(lease, "b", first.seen, 115.0)
    assert taken.action is Action.TAKE
    assert "has not renewed the Lease for 15 s" in taken.reason


def test_a_renewal_starts_the_wait_again() -> None:
    first = decide(_lease("a", renewed_ago=5), "b", None, 100.0)
    renewed = decide(_lease("a", renewed_ago=0), "b", first.seen, 114.0)
    assert renewed.action is Action.WAIT
    assert renewed.seen is not None and renewed.seen.at == 114.0
    # 15 s after the renewal was seen, not after the first read.
    assert decide(_lease("a"), "b", renewed.seen, 120.0).action is Action.WAIT
    assert decide(_lease("a"), "b", renewed.seen, 129.0).action is Action.TAKE


def test_the_wall_clock_is_never_believed() -> None:
    # renewTime far in the past (a leader long gone, or our clock ahead): still a full
    # duration by our own clock, as after an API outage that cut the leader off too.
    decision = decide(_lease("a", renewed_ago=3600), "b", None, 100.0)
    assert decision.action is Action.WAIT
    assert decide(_lease("a", renewed_ago=-10), "b", None, 100.0).action is Action.WAIT


def test_after_a_failed_read_the_wait_starts_again() -> None:
    # The election forgets what it saw when a read fails (seen=None).
    lease = _lease("a")
    first = decide(lease, "b", None, 100.0)
    assert decide(lease, "b", None, 200.0).action is Action.WAIT
    assert decide(lease, "b", first.seen, 200.0).action is Action.TAKE


def test_the_lease_s_own_duration_counts() -> None:
    lease = _lease("a", duration=60)
    first = decide(lease, "b", None, 0.0)
    assert decide(lease, "b", first.seen, 30.0).action is Action.WAIT
    assert decide(lease, "b", first.seen, 60.0).action is Action.TAKE


def test_taking_another_s_lease_counts_a_transition_renewing_ours_does_not() -> None:
    taken = leadership.lease_spec("b", WALL, lease=_lease("a"))
    assert taken["holderIdentity"] == "b"
    assert taken["leaseTransitions"] == 3
    assert taken["acquireTime"] == taken["renewTime"] == leadership.micro_time(WALL)
    assert taken["leaseDurationSeconds"] == leadership.DURATION_SECONDS
    renewed = leadership.lease_spec("b", WALL, lease=_lease("b"))
    assert "acquireTime" not in renewed and "leaseTransitions" not in renewed
    created = leadership.lease_spec("b", WALL)
    assert created["leaseTransitions"] == 0 and "acquireTime" in created


def test_a_released_lease_has_no_holder() -> None:
    spec = leadership.released_spec(WALL)
    assert spec["holderIdentity"] is None  # a merge patch removes the field
    assert leadership.holder_of({"spec": {"renewTime": spec["renewTime"]}}) == ""


def test_the_leader_trusts_itself_until_the_renew_deadline() -> None:
    term = Term(deadline=10.0)
    assert not term.confirmed(0.0)
    term.renewed(100.0)
    assert term.confirmed(109.9)
    assert not term.confirmed(110.0)
    term.renewed(95.0)  # a renewal that started earlier never moves the start back
    assert term.renewed_at == 100.0
    term.end()
    assert not term.confirmed(100.0)


def test_the_leader_stops_trusting_itself_before_a_standby_may_take_over() -> None:
    # The standby's first sight of a renewal comes after the renewal started: it takes
    # over at least DURATION after that start, the leader stops at RENEW_DEADLINE.
    assert leadership.RENEW_DEADLINE_SECONDS < leadership.DURATION_SECONDS
    assert leadership.RENEW_SECONDS < leadership.RENEW_DEADLINE_SECONDS


@pytest.mark.parametrize(
    ("argv", "namespaces"),
    [
        (["kopf", "run", "--standalone", "--namespace=clerum", "-m", "x"], ("clerum",)),
        (["kopf", "run", "--namespace", "b", "-n", "a", "-n", "a"], ("a", "b")),
        (["kopf", "run", "--namespace=a,b"], ("a", "b")),
        (["kopf", "run", "--namespace=team-*", "-n", "!x"], ()),
        (["kopf", "run", "--all-namespaces"], ()),
    ],
)
def test_the_namespaces_come_from_kopf_s_command_line(
    argv: list[str], namespaces: tuple[str, ...]
) -> None:
    assert leadership.kopf_run_options(argv).namespaces == namespaces


def test_the_readiness_endpoint_comes_from_kopf_s_command_line() -> None:
    options = leadership.kopf_run_options(
        ["kopf", "run", "--liveness=http://0.0.0.0:8080/healthz", "-n", "x"]
    )
    assert options.liveness == Endpoint("0.0.0.0", 8080, "/healthz")
    other = leadership.kopf_run_options(["kopf", "run", "--liveness", "http://127.0.0.1:9/h"])
    assert other.liveness == Endpoint("127.0.0.1", 9, "/h")
    assert leadership.kopf_run_options(["kopf", "run"]).liveness is None


# ---- leader_summary: what `spilloverctl status` says about who leads


def test_leader_summary_names_a_current_holder_and_its_renewal_age() -> None:
    assert leadership.leader_summary(_lease("op-a", 3), WALL) == (
        "op-a (leader Lease renewed 3 s ago)"
    )


def test_leader_summary_says_nobody_leads_past_the_lease_duration() -> None:
    message = leadership.leader_summary(_lease("op-a", 120), WALL)
    assert message.startswith("none for 105 s: op-a last renewed the leader Lease 120 s ago")


def test_leader_summary_of_a_released_or_missing_lease() -> None:
    released = leadership.leader_summary(_lease(None, 1), WALL)
    assert released.startswith("none: the Lease 'spillover-operator-leader' was released")
    assert leadership.leader_summary(None, WALL).startswith("none yet (no Lease")


def test_leader_summary_of_a_lease_without_a_renew_time() -> None:
    lease = _lease("op-b")
    del lease["spec"]["renewTime"]
    assert leadership.leader_summary(lease, WALL) == (
        "op-b (its Lease 'spillover-operator-leader' has no renewTime)"
    )
