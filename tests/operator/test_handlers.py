"""The small pure parts of the kopf handler layer: the index, the settings, metrics."""

from __future__ import annotations

import logging

import kopf
import pytest
from prometheus_client import REGISTRY
from spillover_operator.constants import FINALIZER
from spillover_operator.handlers import metrics, runtime
from spillover_operator.handlers.policies import index_entry
from spillover_operator.policy import PolicySpec
from spillover_operator.reconcile import Outcome, ReconcileResult


def test_index_entry_keys_by_namespace_and_target() -> None:
    spec = {"target": {"deployment": "wrc"}}
    assert index_entry("clerum", "spillover", spec) == {("clerum", "wrc"): "spillover"}


def test_index_entry_keeps_an_invalid_policy_reachable_by_its_target() -> None:
    # An invalid policy is still reconciled on Deployment events (to report InvalidSpec).
    spec = {"thresholdBytes": 1, "target": {"deployment": "wrc"}}
    assert index_entry("clerum", "bad", spec) == {("clerum", "wrc"): "bad"}
    assert index_entry("clerum", "bad", {"target": "nope"}) == {}


def test_configure_sets_namespaced_role_friendly_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.METRICS_PORT_VAR, "0")
    monkeypatch.setattr(runtime, "get_clients", lambda: None)
    settings = kopf.OperatorSettings()
    runtime.configure(settings)
    assert settings.peering.standalone is True
    assert settings.scanning.disabled is True
    assert settings.persistence.finalizer == FINALIZER
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.posting.level == logging.WARNING


@pytest.mark.parametrize(
    ("value", "message"),
    [("soon", "must be a number, got 'soon'"), ("0.5", "must be at least 1")],
)
def test_bad_resync_setting_is_named(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv(runtime.RESYNC_VAR, value)
    with pytest.raises(runtime.ConfigError, match=f"{runtime.RESYNC_VAR} {message}"):
        runtime.resync_seconds()


def test_resync_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.RESYNC_VAR, raising=False)
    assert runtime.resync_seconds() == runtime.DEFAULT_RESYNC_SECONDS


def _sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_metrics_record_and_forget() -> None:
    spec = PolicySpec(False, None, None, "wrc", None, "Retain")
    before = _sample("spillover_operator_reconcile_total", result="drift_corrected") or 0.0
    metrics.record("ns-m", "p", ReconcileResult(Outcome.DRIFT_CORRECTED, "x", spec, ready=True))
    assert _sample("spillover_operator_policy_enabled", namespace="ns-m", policy="p") == 0
    assert _sample("spillover_operator_policy_ready", namespace="ns-m", policy="p") == 1
    assert _sample("spillover_operator_drift_corrections_total", namespace="ns-m", policy="p") == 1
    assert _sample("spillover_operator_reconcile_total", result="drift_corrected") == before + 1
    assert _sample("spillover_operator_last_apply_timestamp_seconds", namespace="ns-m", policy="p")
    metrics.record("ns-m", "p", ReconcileResult(Outcome.GONE, "gone"))
    assert _sample("spillover_operator_policy_enabled", namespace="ns-m", policy="p") is None
