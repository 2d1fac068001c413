"""The one Event body (posting it on a real API server: tests/integration/test_client_api.py)."""

from __future__ import annotations

import datetime

from spillover_operator.client import event_body

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
OBJ = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "wrc", "namespace": "clerum", "uid": "u1", "resourceVersion": "7"},
}


def test_event_body_refers_to_the_object_and_names_the_component() -> None:
    body = event_body(
        OBJ, "Normal", "Applied", "x" * 2000, component="spilloverctl", now=NOW, instance="host"
    )
    assert body["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "wrc",
        "namespace": "clerum",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert body["metadata"] == {"generateName": "wrc.", "namespace": "clerum"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-01-02T03:04:05Z"
    assert body["source"] == {"component": "spilloverctl"}
    assert body["reportingComponent"] == "spilloverctl"
    assert body["reportingInstance"] == "host"
    assert (body["type"], body["reason"], body["count"]) == ("Normal", "Applied", 1)
    assert len(body["message"]) == 1000 and body["message"].endswith("…")


def test_a_short_message_is_kept_and_no_instance_is_left_out() -> None:
    body = event_body(OBJ, "Warning", "R", "short", component="spillover-operator", now=NOW)
    assert body["message"] == "short"
    assert "reportingInstance" not in body
