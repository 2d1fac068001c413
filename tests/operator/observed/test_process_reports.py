"""A process's report is read once for that process, not at every look: what a
reconcile a second or a `kill --wait` look at every event would otherwise ask every
recipe pod's process again through the pod proxy."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from spillover_operator.client.connection import Connection
from spillover_operator.domain.mcp_host import REPORT_ANNOTATION
from spillover_operator.domain.recipe_pods import ReportUnavailable
from spillover_operator.observed.pods import ProcessReports, process_key

CONN = Connection(ApiClient(Configuration()), "ns", "spilloverctl", server="https://a:6443")
OFF = {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"}
ON = {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "true"}


def pod(name: str = "mcp-1", uid: str = "u1", **containers: str) -> dict[str, Any]:
    ids = containers or {"mcp-host": "containerd://aaa"}
    return {
        "metadata": {"name": name, "uid": uid, "annotations": {REPORT_ANNOTATION: "8080/s"}},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": n, "containerID": c} for n, c in ids.items()],
        },
    }


class Process:
    """What each process answers, by pod name, counting the reads (stands in for the
    pod proxy, which needs a pod network this unit test does not have)."""

    def __init__(self, answers: Mapping[str, Any]) -> None:
        self.answers = dict(answers)
        self.reads: list[str] = []

    def __call__(self, conn: Connection, pod: Mapping[str, Any]) -> dict[str, str | None]:
        name = str(pod["metadata"]["name"])
        self.reads.append(name)
        answer = self.answers[name]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_process_is_asked_once_within_the_ttl_and_again_after_it() -> None:
    process, clock = Process({"mcp-1": OFF}), Clock()
    reports = ProcessReports(process, ttl=30.0, clock=clock)
    assert [reports.read(CONN, pod()) for _ in range(5)] == [OFF] * 5
    assert process.reads == ["mcp-1"]
    clock.now += 30.0
    process.answers["mcp-1"] = ON  # an image that reads its values anew is seen then
    assert reports.read(CONN, pod()) == ON
    assert process.reads == ["mcp-1", "mcp-1"]


def test_a_restarted_container_or_a_new_pod_is_a_new_process() -> None:
    process = Process({"mcp-1": ON})
    reports = ProcessReports(process, clock=Clock())
    assert reports.read(CONN, pod()) == ON
    process.answers["mcp-1"] = OFF
    assert reports.read(CONN, pod(**{"mcp-host": "containerd://bbb"})) == OFF
    assert reports.read(CONN, pod(uid="u2")) == OFF  # the same name, another pod
    assert len(process.reads) == 3


def test_a_report_that_could_not_be_read_is_asked_again() -> None:
    process = Process({"mcp-1": ReportUnavailable("no answer within 2 s")})
    reports = ProcessReports(process, clock=Clock())
    for _ in range(2):
        with pytest.raises(ReportUnavailable):
            reports.read(CONN, pod())
    process.answers["mcp-1"] = OFF
    assert reports.read(CONN, pod()) == OFF
    assert reports.read(CONN, pod()) == OFF
    assert process.reads == ["mcp-1"] * 3


def test_a_container_without_an_id_yet_is_read_every_time() -> None:
    process = Process({"mcp-1": OFF})
    reports = ProcessReports(process, clock=Clock())
    starting = pod(**{"mcp-host": "containerd://aaa", "sidecar": ""})
    assert process_key(CONN, starting) is None
    reports.read(CONN, starting)
    reports.read(CONN, starting)
    assert len(process.reads) == 2


def test_another_cluster_or_namespace_is_another_process() -> None:
    keys = {
        process_key(CONN, pod()),
        process_key(CONN.in_namespace("other"), pod()),
        process_key(
            Connection(ApiClient(Configuration()), "ns", "spilloverctl", server="https://b:6443"),
            pod(),
        ),
    }
    assert len(keys) == 3 and None not in keys


def test_at_most_max_entries_are_kept_the_oldest_read_going_first() -> None:
    names = [f"mcp-{i}" for i in range(4)]
    process = Process(dict.fromkeys(names, OFF))
    reports = ProcessReports(process, max_entries=3, clock=Clock())
    for i, name in enumerate(names):
        reports.read(CONN, pod(name, uid=f"u{i}"))
    reports.read(CONN, pod("mcp-3", uid="u3"))  # kept
    reports.read(CONN, pod("mcp-0", uid="u0"))  # dropped for mcp-3: read again
    assert process.reads == [*names, "mcp-0"]


def test_threads_sharing_one_read_each_process_and_agree() -> None:
    process = Process({f"mcp-{i}": OFF for i in range(50)})
    reports = ProcessReports(process, clock=Clock())
    pods = [pod(f"mcp-{i}", uid=f"u{i}") for i in range(50)]
    results: list[Any] = []

    def look() -> None:
        results.extend(reports.read(CONN, p) for p in pods)

    threads = [threading.Thread(target=look) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [OFF] * 200
    assert set(process.reads) == {f"mcp-{i}" for i in range(50)}
    # Two threads may both read a process not kept yet; once kept, nobody reads it.
    before = len(process.reads)
    assert [reports.read(CONN, p) for p in pods] == [OFF] * 50
    assert len(process.reads) == before
