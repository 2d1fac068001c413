"""`spilloverctl status` logic: `assess` on plain dicts finds every mismatch between the
policy and the Deployment, and the text/JSON views show them."""

from __future__ import annotations

import copy
import json
from typing import Any

from spillover_operator.cli.report import format_text, report_to_json, summary
from spillover_operator.domain.assess import assess
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR

ALL = f"{ENABLED_VAR},{THRESHOLD_VAR},{BUDGET_VAR}"


def policy(
    *,
    enabled: bool = True,
    threshold: int | None = None,
    generation: int = 3,
    observed: int | None = 3,
    ready: str = "True",
    reason: str = "Applied",
    container: str | None = None,
    extra_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"enabled": enabled, "target": {"deployment": "wrc"}}
    if threshold is not None:
        spec["thresholdBytes"] = threshold
    if container is not None:
        spec["target"]["container"] = container
    spec.update(extra_spec or {})
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": "Ready",
                "status": ready,
                "reason": reason,
                "message": "m",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            },
            {
                "type": "Applied",
                "status": ready,
                "reason": reason,
                "message": "m",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            },
        ]
    }
    if observed is not None:
        status["observedGeneration"] = observed
    if not enabled:
        status["killSwitch"] = {"engagedAt": "2025-01-01T00:00:00Z"}
    return {
        "apiVersion": "spillover.clerum.io/v1alpha1",
        "kind": "SpilloverPolicy",
        "metadata": {"name": "spillover", "namespace": "clerum", "generation": generation},
        "spec": spec,
        "status": status,
    }


def deployment(
    env: dict[str, str] | None = None,
    *,
    replicas: int = 2,
    updated: int = 2,
    available: int = 2,
    generation: int = 5,
    observed: int = 5,
) -> dict[str, Any]:
    if env is None:
        env = {ENABLED_VAR: "true", PASSTHROUGH_VAR: ALL}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "wrc", "namespace": "clerum", "generation": generation},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "controller",
                            "env": [{"name": k, "value": v} for k, v in env.items()],
                        },
                        {"name": "sidecar"},
                    ]
                }
            },
        },
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "updatedReplicas": updated,
            "readyReplicas": available,
            "availableReplicas": available,
        },
    }


def messages(report: Any) -> list[str]:
    return [str(f) for f in report.findings]


def test_consistent_when_applied_and_rolled_out() -> None:
    report = assess(policy(), deployment())
    assert report.consistent, messages(report)
    assert report.findings == []
    assert report.container_name == "controller"
    assert summary(report).startswith("OK: spillover is ON")


def test_kill_switch_engaged_and_applied_is_consistent() -> None:
    dep = deployment({ENABLED_VAR: "false", PASSTHROUGH_VAR: ALL})
    report = assess(policy(enabled=False), dep)
    assert report.consistent, messages(report)
    assert "OFF (kill switch engaged)" in summary(report)
    assert "engaged at 2025-01-01T00:00:00Z" in format_text(report)


def test_policy_changed_with_no_operator_running() -> None:
    report = assess(policy(enabled=False, generation=4, observed=3), deployment())
    assert not report.consistent
    text = messages(report)
    assert any(
        m.startswith("MISMATCH: policy says enabled=false, the WRC container has ")
        and f"{ENABLED_VAR}=true" in m
        and "the operator has not applied it yet" in m
        and "is it running?" in m
        for m in text
    ), text
    assert any(m.startswith("PENDING:") and "generation 4" in m for m in text), text


def test_never_observed_policy() -> None:
    report = assess(policy(observed=None), deployment({PASSTHROUGH_VAR: ALL}))
    text = messages(report)
    assert any("never" in m and "is it running?" in m for m in text), text
    # The Deployment has no ENABLED variable: unset means the mcp-host default (on), but
    # the operator writes `true` explicitly, so it is a mismatch.
    assert any(f"{ENABLED_VAR}=unset" in m for m in text), text


def test_drift_after_the_operator_applied() -> None:
    dep = deployment({ENABLED_VAR: "true", THRESHOLD_VAR: "8192", PASSTHROUGH_VAR: ALL})
    report = assess(policy(threshold=32768), dep)
    [finding] = report.findings
    assert finding.severity == "MISMATCH"
    assert "policy says thresholdBytes=32768" in finding.message
    assert f"{THRESHOLD_VAR}=8192" in finding.message
    assert "drift" in finding.message


def test_unset_threshold_on_the_policy_but_set_on_the_deployment() -> None:
    dep = deployment({ENABLED_VAR: "true", THRESHOLD_VAR: "8192", PASSTHROUGH_VAR: ALL})
    report = assess(policy(), dep)
    [finding] = report.findings
    assert "thresholdBytes=unset (mcp-host default 131072)" in finding.message


def test_passthrough_missing_a_name() -> None:
    dep = deployment({ENABLED_VAR: "true", PASSTHROUGH_VAR: f"FOO, {ENABLED_VAR},{THRESHOLD_VAR}"})
    report = assess(policy(), dep)
    assert report.passthrough_missing == [BUDGET_VAR]
    [finding] = report.findings
    assert finding.area == "passthrough"
    assert f"lacks {BUDGET_VAR}" in finding.message
    assert f"MISSING {BUDGET_VAR}" in format_text(report)


def test_passthrough_absent() -> None:
    report = assess(policy(), deployment({ENABLED_VAR: "true"}))
    assert report.passthrough_missing == [ENABLED_VAR, THRESHOLD_VAR, BUDGET_VAR]
    assert not report.consistent


def test_value_from_is_reported_not_trusted() -> None:
    dep = deployment()
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    env[0] = {"name": ENABLED_VAR, "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}
    report = assess(policy(), dep)
    # Without a ConfigMap lookup the value cannot be read: unknown, never trusted.
    assert any(
        f"{ENABLED_VAR}=unknown (env (configMapKeyRef x/y)" in m for m in messages(report)
    ), messages(report)
    assert not report.consistent
    # With the ConfigMap read, the value in effect is what it holds.
    report = assess(policy(), dep, config_maps=lambda name: {"y": "true"} if name == "x" else None)
    assert report.resolved is not None
    assert report.resolved[ENABLED_VAR].value == "true"
    assert report.consistent, messages(report)


def test_rollout_in_progress_is_not_consistent() -> None:
    report = assess(policy(), deployment(updated=1, available=1))
    [finding] = report.findings
    assert finding.severity == "PENDING"
    assert finding.area == "rollout"
    assert "updated 1" in finding.message
    assert "rollout: updated 1/2" in format_text(report)
    assert "IN PROGRESS" in format_text(report)


def test_rollout_not_yet_observed_by_the_deployment_controller() -> None:
    report = assess(policy(), deployment(generation=6, observed=5))
    assert [f.area for f in report.findings] == ["rollout"]


def test_ready_false_from_the_operator() -> None:
    report = assess(policy(ready="False", reason="Conflict"), deployment())
    [finding] = report.findings
    assert finding.area == "operator"
    assert "Ready=False reason=Conflict" in finding.message


def test_ready_false_explains_an_env_mismatch() -> None:
    report = assess(policy(enabled=False, ready="False", reason="TargetNotFound"), deployment())
    env = [f for f in report.findings if f.area == "env"]
    assert len(env) == 1
    assert "could not apply it (Ready=False reason=TargetNotFound" in env[0].message


def test_missing_deployment() -> None:
    report = assess(policy(), None)
    assert not report.deployment_found
    assert any("'wrc' does not exist" in m for m in messages(report))
    assert "NOT FOUND" in format_text(report)


def test_missing_container() -> None:
    report = assess(policy(container="main"), deployment())
    [finding] = report.findings
    assert finding.area == "target"
    assert "container 'main' not found" in finding.message


def test_named_container_is_compared() -> None:
    dep = deployment()
    dep["spec"]["template"]["spec"]["containers"][1]["env"] = [
        {"name": ENABLED_VAR, "value": "false"},
        {"name": PASSTHROUGH_VAR, "value": ALL},
    ]
    assert assess(policy(enabled=False, container="sidecar"), dep).consistent
    assert not assess(policy(enabled=False), dep).consistent


def test_invalid_spec_is_flagged() -> None:
    report = assess(policy(extra_spec={"thresholdBytes": 5}), deployment())
    spec_findings = [f for f in report.findings if f.area == "spec"]
    assert spec_findings
    assert "spec.thresholdBytes" in spec_findings[0].message
    assert report.spec is None
    assert "spec (invalid)" in format_text(report)


def test_direct_mode_ignores_only_operator_findings() -> None:
    stale = policy(enabled=False, generation=4, observed=3)
    dep = deployment({ENABLED_VAR: "false", PASSTHROUGH_VAR: ALL})
    report = assess(stale, dep)
    assert not report.consistent  # the policy status is stale ...
    assert report.problems(ignore=("operator",)) == []  # ... but the Deployment is right
    rolling = assess(stale, deployment({ENABLED_VAR: "false", PASSTHROUGH_VAR: ALL}, updated=1))
    assert [f.area for f in rolling.problems(ignore=("operator",))] == ["rollout"]


def test_assess_does_not_modify_its_inputs() -> None:
    pol, dep = policy(enabled=False, generation=4), deployment()
    before = copy.deepcopy((pol, dep))
    assess(pol, dep)
    assert (pol, dep) == before


def test_text_view_marks_each_variable() -> None:
    text = format_text(assess(policy(enabled=False, generation=4), deployment()))
    lines = text.splitlines()
    enabled_line = next(line for line in lines if line.strip().startswith(ENABLED_VAR))
    assert enabled_line.rstrip().endswith("MISMATCH")
    threshold_line = next(line for line in lines if line.strip().startswith(THRESHOLD_VAR))
    assert threshold_line.rstrip().endswith("ok")
    assert "generation:   4 (observed by the operator: 3)" in text
    assert lines[-1].startswith("NOT CONSISTENT: 2 problems")


def test_json_view_is_serialisable_and_complete() -> None:
    report = assess(policy(enabled=False, generation=4), deployment())
    doc = json.loads(json.dumps(report_to_json(report)))
    assert doc["consistent"] is False
    assert doc["policy"]["generation"] == 4
    assert doc["policy"]["observedGeneration"] == 3
    assert doc["deployment"]["env"][ENABLED_VAR] == "true"
    assert doc["deployment"]["expectedEnv"][ENABLED_VAR] == "false"
    assert doc["deployment"]["rollout"]["complete"] is True
    assert {f["severity"] for f in doc["findings"]} == {"MISMATCH", "PENDING"}


def test_stale_status_effective_is_noted_without_failing() -> None:
    pol = policy()
    pol["status"]["effective"] = {"enabled": "false", "passthrough": ALL}
    report = assess(pol, deployment())
    assert report.consistent  # a note, not a problem
    [note] = report.findings
    assert note.severity == "NOTE"
    assert "status.effective" in note.message and "stale" in note.message
    pol["status"]["effective"] = {"enabled": "true", "passthrough": ALL}
    assert assess(pol, deployment()).findings == []


def test_ready_false_during_a_rollout_is_pending_not_a_mismatch() -> None:
    report = assess(
        policy(ready="False", reason="RolloutInProgress"), deployment(updated=1, available=1)
    )
    assert {f.severity for f in report.findings} == {"PENDING"}
    assert not report.consistent


# ---- recipe pods ---------------------------------------------------------------------


def test_stale_recipe_pods_are_pending_and_listed_per_pod() -> None:
    from spillover_operator.domain.assess import with_recipe_pods
    from spillover_operator.domain.recipe_pods import assess_pods

    report = assess(policy(enabled=False), deployment({ENABLED_VAR: "false", PASSTHROUGH_VAR: ALL}))
    assert report.consistent and report.spec is not None and report.desired_env is not None
    pods = [
        {
            "metadata": {
                "name": name,
                "creationTimestamp": "2020-01-01T00:00:00Z",
                "labels": {"app.kubernetes.io/name": "mcp-host"},
                "ownerReferences": [{"kind": "StatefulSet", "name": "mcp", "controller": True}],
            },
            "spec": {
                "containers": [{"name": "mcp-host", "env": [{"name": ENABLED_VAR, "value": v}]}]
            },
        }
        for name, v in (("mcp-0", "true"), ("mcp-1", "false"))
    ]
    found = assess_pods(
        pods, report.spec, report.desired_env, selector="app.kubernetes.io/name=mcp-host"
    )
    full = with_recipe_pods(report, found)
    assert not full.consistent
    assert [f.area for f in full.problems()] == ["recipe-pods"]
    text = format_text(full)
    assert (
        "recipe mcp-host pods (app.kubernetes.io/name=mcp-host): 2 matched, 1 current, 1 stale"
        in text
    )
    row = next(line for line in text.splitlines() if "mcp-0" in line and "StatefulSet/mcp" in line)
    assert row.split()[-1] == "stale" and "true" in row
    assert summary(full).endswith("recipe pods: 1 stale of 2")
    doc = report_to_json(full)
    assert doc["recipePods"]["stalePods"] == ["mcp-0"]
    # Without waiting for the pods (--no-wait-recipe-pods) the rest is consistent.
    assert not full.problems(ignore=("recipe-pods",))
