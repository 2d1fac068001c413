"""heartbeat.presence: what the operator's Lease says about a namespace."""

from __future__ import annotations

import datetime

from spillover_operator.domain import heartbeat

NOW = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _lease(seconds_ago: float, duration: int = 30) -> dict[str, object]:
    renewed = NOW - datetime.timedelta(seconds=seconds_ago)
    return {
        "spec": {
            "holderIdentity": "op-1",
            "leaseDurationSeconds": duration,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
    }


def test_no_lease_means_no_operator_watches_the_namespace() -> None:
    seen = heartbeat.presence("team", None, NOW)
    assert seen.watched is False
    assert "no operator watches namespace 'team'" in seen.message
    assert "--namespace=team" in seen.message


def test_a_fresh_lease_is_a_watching_operator() -> None:
    seen = heartbeat.presence("team", _lease(4), NOW)
    assert seen.watched is True and "op-1" in seen.message


def test_a_lease_older_than_its_duration_is_an_operator_that_stopped() -> None:
    seen = heartbeat.presence("team", _lease(95), NOW)
    assert seen.watched is False and "not running" in seen.message and "95 s ago" in seen.message


def test_a_lease_without_renew_time_is_unknown() -> None:
    assert heartbeat.presence("team", {"spec": {}}, NOW).watched is None
