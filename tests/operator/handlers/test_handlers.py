"""The small parts of the kopf handler layer: the index, kopf's settings, the runtime kept
in kopf's memo, metrics (on a registry of the test's own)."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import kopf
import pytest
from kubernetes.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry
from spillover_operator.client import Connection
from spillover_operator.domain import settings
from spillover_operator.domain.constants import FINALIZER
from spillover_operator.domain.model import PolicySpec
from spillover_operator.handlers import metrics, runtime
from spillover_operator.handlers.policies import index_entry
from spillover_operator.reconciler.reconcile import Outcome, ReconcileResult


def test_index_entry_keys_by_namespace_and_target() -> None:
    spec = {"target": {"deployment": "wrc"}}
    assert index_entry("clerum", "spillover", spec) == {("clerum", "wrc"): "spillover"}


def test_index_entry_keeps_an_invalid_policy_reachable_by_its_target() -> None:
    # An invalid policy is still reconciled on Deployment events (to report InvalidSpec).
    spec = {"thresholdBytes": 1, "target": {"deployment": "wrc"}}
    assert index_entry("clerum", "bad", spec) == {("clerum", "wrc"): "bad"}
    assert index_entry("clerum", "bad", {"target": "nope"}) == {}


def test_configure_sets_namespaced_role_friendly_settings() -> None:
    settings = kopf.OperatorSettings()
    runtime.configure(settings)
    assert settings.peering.standalone is True
    assert settings.scanning.disabled is True
    assert settings.persistence.finalizer == FINALIZER
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.posting.level == logging.WARNING


def test_kopf_records_the_spec_alone_whatever_labels_and_annotations_a_policy_carries() -> None:
    """kopf's last-handled-configuration (the annotation it writes on every handled
    change) holds the spec and nothing of the policy's metadata: 1800 labels (344 KB)
    would not fit the API server's 256 KiB for all annotations."""
    settings = kopf.OperatorSettings()
    runtime.configure(settings)
    storage = settings.persistence.diffbase_storage
    spec = {"enabled": False, "target": {"deployment": "wrc"}}
    labels = {f"team.example.com/label-{i:04d}": "v" * 63 for i in range(1800)}
    body = kopf.Body(
        {
            "apiVersion": "spillover.clerum.io/v1alpha1",
            "kind": "SpilloverPolicy",
            "metadata": {
                "name": "spillover",
                "namespace": "clerum",
                "uid": "u-1",
                "labels": labels,
                "annotations": {"example.com/notes": "x" * 60_000},
            },
            "spec": spec,
            "status": {"observedGeneration": 1},
        }
    )
    essence = storage.build(body=body)
    assert essence == {"spec": spec}
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=essence)
    (written,) = [
        v
        for k, v in patch["metadata"]["annotations"].items()
        if k.endswith("last-handled-configuration")
    ]
    assert json.loads(written) == {"spec": spec}
    assert len(written) < 200
    # kopf reads back what it wrote; a change of the labels alone is no change to it.
    meta = body["metadata"]
    stored = kopf.Body({**body, "metadata": {**meta, **patch["metadata"]}})
    assert storage.fetch(body=stored) == essence
    relabelled = kopf.Body({**body, "metadata": {**meta, "labels": {"team": "other"}}})
    assert storage.build(body=relabelled) == essence


def test_the_runtime_defaults_to_the_default_settings() -> None:
    conn = Connection(ApiClient(Configuration()), "ns", "spillover-operator")
    rt = runtime.OperatorRuntime(conn, metrics.Metrics(CollectorRegistry()))
    assert rt.settings == settings.OperatorSettings()
    assert rt.settings.target_refusal("workflow-recipe-controller") is None


def test_the_runtime_lives_in_the_memo() -> None:
    memo = kopf.Memo()
    with pytest.raises(RuntimeError, match="start-up handler has not run"):
        runtime.of(memo)
    conn = Connection(ApiClient(Configuration()), "ns", "spillover-operator")
    rt = runtime.OperatorRuntime(conn, metrics.Metrics(CollectorRegistry()))
    memo[runtime.MEMO_KEY] = rt
    copied = kopf.Memo(memo)  # kopf gives each object a shallow copy of the memo
    assert runtime.of(copied) is rt
    assert runtime.of(copied).lock is rt.lock


def test_metrics_record_and_forget() -> None:
    registry = CollectorRegistry()
    m = metrics.Metrics(registry)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    spec = PolicySpec(False, None, None, "wrc", None, "Retain")
    m.record("ns-m", "p", ReconcileResult(Outcome.DRIFT_CORRECTED, "x", spec, ready=True))
    assert sample("spillover_operator_policy_enabled", namespace="ns-m", policy="p") == 0
    assert sample("spillover_operator_policy_ready", namespace="ns-m", policy="p") == 1
    assert sample("spillover_operator_drift_corrections_total", namespace="ns-m", policy="p") == 1
    assert sample("spillover_operator_reconcile_total", result="drift_corrected") == 1
    assert sample("spillover_operator_last_apply_timestamp_seconds", namespace="ns-m", policy="p")
    m.record_failure(metrics.ERROR_API_UNAVAILABLE)
    assert sample("spillover_operator_reconcile_total", result="error") == 1
    assert sample("spillover_operator_reconcile_errors_total", reason="api_unavailable") == 1
    assert sample("spillover_operator_reconcile_errors_total", reason="apply_failed") == 0
    m.record("ns-m", "p", ReconcileResult(Outcome.GONE, "gone"))
    assert sample("spillover_operator_policy_enabled", namespace="ns-m", policy="p") is None


def test_reconcile_errors_start_at_zero_for_every_reason() -> None:
    """rate()/increase() miss a counter's first increment unless the series existed
    before it: each error reason is exposed at 0 before any error (the alert
    SpilloverOperatorReconcileErrors relies on it)."""
    registry = CollectorRegistry()
    metrics.Metrics(registry)
    for reason in metrics.ERROR_REASONS:
        assert (
            registry.get_sample_value(
                "spillover_operator_reconcile_errors_total", {"reason": reason}
            )
            == 0
        )
    assert registry.get_sample_value("spillover_operator_reconcile_total", {"result": "error"}) == 0


def test_an_unknown_error_reason_is_refused() -> None:
    m = metrics.Metrics(CollectorRegistry())
    with pytest.raises(ValueError, match="unknown reconcile error reason"):
        m.record_failure("oops")


def test_heartbeat_records_when_the_lease_was_renewed_per_namespace() -> None:
    registry = CollectorRegistry()
    m = metrics.Metrics(registry)
    assert (
        registry.get_sample_value(
            "spillover_operator_heartbeat_timestamp_seconds", {"namespace": "ns-h"}
        )
        is None
    )
    before = time.time()
    m.beat("ns-h")
    stamp = registry.get_sample_value(
        "spillover_operator_heartbeat_timestamp_seconds", {"namespace": "ns-h"}
    )
    assert stamp is not None and before <= stamp <= time.time()


def test_metrics_for_the_process_carry_the_process_series() -> None:
    m = metrics.Metrics.for_process()
    names = {family.name for family in m.registry.collect()}
    assert "spillover_operator_reconcile" in names
    assert "python_info" in names  # the platform collector, as the default registry has


def test_liveness_names_a_missing_watch_after_the_start_grace() -> None:
    names = ["watcher for spilloverpolicies.v1alpha1.spillover.clerum.io@ns", "other"]
    assert runtime.watch_problems(names, uptime=5.0) == []
    assert runtime.watch_problems(names, uptime=60.0) == ["no running watch on deployments"]
    both = [*names, "watcher for deployments.v1.apps@ns"]
    assert runtime.watch_problems(both, uptime=60.0) == []


def _runtime() -> runtime.OperatorRuntime:
    conn = Connection(ApiClient(Configuration()), "ns", "spillover-operator")
    return runtime.OperatorRuntime(conn, metrics.Metrics(CollectorRegistry()))


def test_an_older_deployment_generation_is_stale() -> None:
    rt = _runtime()
    assert rt.note_generation("ns", "wrc", 3)
    assert rt.note_generation("ns", "wrc", 3)  # a status update of the same spec
    assert not rt.note_generation("ns", "wrc", 2)
    assert rt.note_generation("ns", "other", 1)  # per Deployment
    assert rt.note_generation("ns", "wrc", None)  # nothing known: not stale


def test_a_newer_pass_replaces_the_reader_and_keeps_the_changes_to_report() -> None:
    rt = _runtime()
    rt.leave_pass("ns", "wrc", "reader-1", {"p": "early-p"})
    rt.leave_pass("ns", "wrc", "reader-2", {"q": "early-q"})
    assert rt.has_pass("ns", "wrc")
    left = rt.take_pass("ns", "wrc")
    assert left is not None
    assert left.reader == "reader-2"
    assert left.early == {"p": "early-p", "q": "early-q"}
    assert rt.take_pass("ns", "wrc") is None and not rt.has_pass("ns", "wrc")


def test_passes_wait_while_a_policy_handler_waits_for_the_lock() -> None:
    rt = _runtime()
    assert not rt.handler_waiting("ns", "wrc")
    with rt.waiting_for("ns", "wrc"):
        with rt.waiting_for("ns", "wrc"):
            assert rt.handler_waiting("ns", "wrc")
        assert rt.handler_waiting("ns", "wrc")
        assert not rt.handler_waiting("ns", "other")
    assert not rt.handler_waiting("ns", "wrc")


def test_a_pass_left_while_the_lock_is_held_runs_after_it_is_let_go() -> None:
    """The hand-over `_drain` relies on: an event that finds the lock taken leaves its
    pass and returns; the holder schedules the drain after letting go."""
    from spillover_operator.handlers import policies

    rt = _runtime()
    ran: list[str] = []

    def record(rt_: runtime.OperatorRuntime, ns: str, dep: str, _: object) -> None:
        left = rt_.take_pass(ns, dep)
        if left is not None:
            ran.append(str(left.reader))

    logger = logging.getLogger("test")
    lock = rt.lock_for("ns", "wrc")
    with lock:
        rt.leave_pass("ns", "wrc", "during")
        policies._drain(rt, "ns", "wrc", logger, record)  # the lock is held: nothing runs
        assert ran == [] and rt.has_pass("ns", "wrc")
    with rt.waiting_for("ns", "wrc"):
        policies._drain(rt, "ns", "wrc", logger, record)  # a handler waits: it goes first
        assert ran == []
    policies._drain(rt, "ns", "wrc", logger, record)
    assert ran == ["during"] and not rt.has_pass("ns", "wrc")


def test_a_waiting_refresh_is_looked_at_again_once_however_many_asked() -> None:
    rt = _runtime()
    done = threading.Event()
    ran: list[str] = []

    def look(what: str) -> None:
        ran.append(what)
        done.set()

    assert rt.later_once(("ns", "wrc"), 0.05, look, "first")
    assert not rt.later_once(("ns", "wrc"), 0.05, look, "second")  # one pending already
    assert done.wait(5)
    time.sleep(0.1)
    assert ran == ["first"]
    assert rt.later_once(("ns", "wrc"), 0.01, look, "again")  # after it ran: again


def test_an_event_of_a_recipe_deployment_leaves_a_pass_for_the_policy_selecting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its rollout is what a refresh waits for: a Deployment no policy targets, whose
    pod template a policy's recipe-pod selector matches, counts as a pod event."""
    from spillover_operator.handlers import policies

    rt = _runtime()
    called: list[Any] = []

    class Reader:
        namespace = "ns"

        def names_targeting(self, name: str) -> list[str]:
            return []

    monkeypatch.setattr(
        policies, "pod_event", lambda rt_, reader, labels, logger: called.append(labels)
    )
    logger = logging.getLogger("test")
    labels = {"app.kubernetes.io/name": "mcp-host"}
    policies.deployment_event(rt, Reader(), "mcp-host-r1", 2, logger, labels)  # type: ignore[arg-type]
    policies.deployment_event(rt, Reader(), "other", 2, logger, None)  # type: ignore[arg-type]
    assert called == [labels]


def test_a_pod_events_pass_waits_for_its_burst_unless_something_else_is_due() -> None:
    """A pass left with `settle` is not run by a drain before it is due (the burst's
    later events join it); a pass left without (a policy or target Deployment event)
    makes it due at once; the earliest due time of a burst is kept."""
    from spillover_operator.handlers import policies

    rt = _runtime()
    ran: list[str] = []

    def record(rt_: runtime.OperatorRuntime, ns: str, dep: str, _: object) -> None:
        left = rt_.take_pass(ns, dep)
        if left is not None:
            ran.append(str(left.reader))

    logger = logging.getLogger("test")
    rt.leave_pass("ns", "wrc", "pod-1", settle=60)
    first = rt.pass_wait("ns", "wrc")
    assert 59 < first <= 60
    rt.leave_pass("ns", "wrc", "pod-2", settle=120)  # joins the burst: still due at 60 s
    assert rt.pass_wait("ns", "wrc") <= first
    policies._drain(rt, "ns", "wrc", logger, record)
    assert ran == [] and rt.has_pass("ns", "wrc")
    rt.leave_pass("ns", "wrc", "deployment-event")
    assert rt.pass_wait("ns", "wrc") == 0
    policies._drain(rt, "ns", "wrc", logger, record)
    assert ran == ["deployment-event"] and not rt.has_pass("ns", "wrc")
    assert rt.pass_wait("ns", "wrc") == 0  # none left


def _pass_recorder() -> tuple[list[str], threading.Event, Any]:
    """A `_run_pass` stand-in: takes the pass left, records its reader, sets the event."""
    drained = threading.Event()
    ran: list[str] = []

    def record(rt_: runtime.OperatorRuntime, ns: str, dep: str, _: object) -> None:
        left = rt_.take_pass(ns, dep)
        if left is not None:
            ran.append(str(left.reader))
        drained.set()

    return ran, drained, record


def test_a_pod_events_pass_runs_once_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_settle_then_drain` has the pass threads drain it once it is due (its timer),
    once for the burst however many events asked."""
    from spillover_operator.handlers import policies

    rt = _runtime()
    ran, drained, record = _pass_recorder()
    monkeypatch.setattr(policies, "_run_pass", record)
    logger = logging.getLogger("test")
    rt.leave_pass("ns", "wrc", "pod-1", settle=0.3)
    policies._settle_then_drain(rt, "ns", "wrc", logger)
    rt.leave_pass("ns", "wrc", "pod-2", settle=0.3)
    policies._settle_then_drain(rt, "ns", "wrc", logger)
    assert drained.wait(5)  # the timer ran it
    assert ran == ["pod-2"]
    rt.pass_threads.shutdown(wait=True)
    assert ran == ["pod-2"] and not rt.has_pass("ns", "wrc")  # one drain for the burst


def test_a_rollout_steps_pass_settles_and_its_end_runs_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A target Deployment's event that is a step of its rollout leaves a pass that
    waits `ROLLOUT_STEP_SETTLE_SECONDS` (the burst's later steps join it, then its timer
    runs it once); the event that ends the rollout runs its pass at once."""
    from spillover_operator.handlers import policies

    rt = _runtime()
    ran, drained, record = _pass_recorder()

    class Reader:
        namespace = "ns"

        def __init__(self, label: str) -> None:
            self.label = label

        def names_targeting(self, name: str) -> list[str]:
            return ["spillover"]

        def __str__(self) -> str:
            return self.label

    monkeypatch.setattr(policies, "_run_pass", record)
    monkeypatch.setattr(policies, "ROLLOUT_STEP_SETTLE_SECONDS", 0.3)
    logger = logging.getLogger("test")
    for step in ("step-1", "step-2"):
        policies.deployment_event(rt, Reader(step), "wrc", 2, logger, None, rollout_step=True)  # type: ignore[arg-type]
    assert 0 < rt.pass_wait("ns", "wrc") <= 0.3  # not run yet: it settles
    assert drained.wait(5)  # its timer ran it
    rt.pass_threads.shutdown(wait=True)
    assert ran == ["step-2"]  # one pass for the burst, with the latest reader

    rt = _runtime()
    drained.clear()
    timers: list[float] = []  # the step's timer, recorded rather than started
    monkeypatch.setattr(rt, "later", lambda delay, work, *args: timers.append(delay))
    monkeypatch.setattr(policies, "ROLLOUT_STEP_SETTLE_SECONDS", 60)
    policies.deployment_event(rt, Reader("step"), "wrc", 2, logger, None, rollout_step=True)  # type: ignore[arg-type]
    assert len(timers) == 1 and 59 < timers[0] <= 60
    policies.deployment_event(rt, Reader("end"), "wrc", 2, logger, None)  # type: ignore[arg-type]
    assert drained.wait(5)  # at once, not after the step's 60 s
    rt.pass_threads.shutdown(wait=True)
    assert ran == ["step-2", "end"] and not rt.has_pass("ns", "wrc")
