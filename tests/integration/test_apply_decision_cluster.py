"""`spillover-harness apply-decision` against a real Kubernetes API server (the local
control plane): the decision of a stage set on the SpilloverPolicy through the client
library, --dry-run, the refusals, a missing policy, and with the real operator running
the decision reaching the WRC Deployment's env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    container_manifest,
    create_object,
    deployment_manifest,
    env_map,
    is_ready,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import running_operator
from kubernetes import client
from matrix_builders import small_matrix
from record_builders import CELLS, make_dataset, make_record, plain_record
from spillover_harness.cli import main
from spillover_harness.results.records import RunRecord
from spillover_operator import exit_codes
from spillover_operator.domain.model import ENABLED_VAR, THRESHOLD_VAR

pytestmark = pytest.mark.integration

SIM_MATRIX = small_matrix("apply-small", input_name="large")


def verdict(directory: Path, **fields: Any) -> Path:
    """A stage's verdict.json as the evaluator writes it (the fields apply-decision reads),
    beside a runs.jsonl of the stage (apply-decision checks the records the verdict was
    judged from, and refuses a verdict without them)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "decision": "false",
        "decided": True,
        "incomplete": None,
        "stage": "minikube",
        "matrix": "spillover-default",
        **fields,
    }
    (directory / "verdict.json").write_text(json.dumps(data), encoding="utf-8")
    if data["decided"] is True and data["decision"] in ("131072", "32768", "false"):
        records = records_deciding(data["decision"])
    else:  # a verdict apply-decision refuses before it reads the records
        recipe, inp, _ = CELLS[0]
        records = [make_record(lambda _c: {}, "off", recipe, inp, stage="minikube", repetition=1)]
    text = "".join(json.dumps(r.to_json()) + "\n" for r in records)
    (directory / "runs.jsonl").write_text(text, encoding="utf-8")
    return directory


def records_deciding(decision: str) -> list[RunRecord]:
    """A minikube stage of the default matrix whose records decide `decision`
    (apply-decision evaluates them again): a configuration fails criterion 3 by
    spending five times off's input tokens in every cell."""
    failing = {"131072": (), "32768": ("128KiB",), "false": ("128KiB", "32KiB")}[decision]
    costly = [{"input_tokens": 5000}, {"input_tokens": 5000}]
    cells = {(c, recipe, inp): costly for c in failing for recipe, inp, _ in CELLS}
    return make_dataset(plain_record, cells, n=2, stage="minikube")


def apply(cluster: LocalCluster, namespace: str, results: Path, *argv: str) -> int:
    return main(
        [
            "apply-decision",
            "--results",
            str(results),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-n",
            namespace,
            *argv,
        ]
    )


def test_simulated_stage_decision_set_on_the_policy(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": "wrc"}}
    create_object(admin, policy_manifest(namespace, spec))
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(SIM_MATRIX, encoding="utf-8")
    results = tmp_path / "sim"
    assert main(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(results)]) == 0
    generation = read_policy(admin, namespace)["metadata"]["generation"]
    capsys.readouterr()

    assert apply(control_plane, namespace, results) == exit_codes.BAD_INPUT  # simulated
    assert apply(control_plane, namespace, results, "--allow-simulated", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"would change SpilloverPolicy {namespace}/spillover" in out
    assert "spec.thresholdBytes: 32768 -> unset" in out
    assert read_policy(admin, namespace)["metadata"]["generation"] == generation

    assert apply(control_plane, namespace, results, "--allow-simulated") == 0
    pol = read_policy(admin, namespace)
    assert "thresholdBytes" not in pol["spec"] and pol["spec"]["enabled"] is True
    assert pol["spec"]["target"] == {"deployment": "wrc"}  # the rest of the spec kept
    assert pol["metadata"]["generation"] == generation + 1
    assert "spilloverctl -n" in capsys.readouterr().out

    # Again: nothing to change, nothing written.
    assert apply(control_plane, namespace, results, "--allow-simulated") == 0
    assert "already says this" in capsys.readouterr().out
    assert read_policy(admin, namespace)["metadata"]["generation"] == generation + 1

    # A cluster stage's verdict: 32768, then the kill switch.
    assert apply(control_plane, namespace, verdict(tmp_path / "t", decision="32768")) == 0
    assert read_policy(admin, namespace)["spec"]["thresholdBytes"] == 32768
    assert apply(control_plane, namespace, verdict(tmp_path / "k", decision="false")) == 0
    pol = read_policy(admin, namespace)
    assert pol["spec"]["enabled"] is False and pol["spec"]["thresholdBytes"] == 32768


def test_refusals_and_a_missing_policy(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}})
    )
    generation = read_policy(admin, namespace)["metadata"]["generation"]
    inconclusive = verdict(tmp_path / "i", decision="inconclusive", decided=False)
    assert apply(control_plane, namespace, inconclusive) == exit_codes.INCONCLUSIVE
    incomplete = verdict(
        tmp_path / "m",
        decision="inconclusive",
        decided=False,
        incomplete={"missing": 4, "judged": False},
    )
    assert apply(control_plane, namespace, incomplete) == exit_codes.INCOMPLETE
    assert read_policy(admin, namespace)["metadata"]["generation"] == generation
    capsys.readouterr()
    decided = verdict(tmp_path / "d", decision="32768")
    assert apply(control_plane, namespace, decided, "--policy", "nope") == exit_codes.NOT_FOUND
    assert "nope" in capsys.readouterr().err


def test_the_operator_rolls_the_applied_decision_out(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    containers = [container_manifest("controller", "example.invalid/wrc:1", {})]
    create_object(
        admin,
        deployment_manifest(
            "wrc", containers, namespace=namespace, labels={"app": "wrc"}, replicas=1
        ),
    )
    create_object(
        admin,
        policy_manifest(
            namespace, {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": "wrc"}}
        ),
    )
    with running_operator(control_plane.kubeconfig, namespace, tmp_path / "logs"):
        wait_for(
            "the operator to apply 32768",
            lambda: (
                env_map(read_deployment(admin, namespace, "wrc"), "controller").get(THRESHOLD_VAR)
                == "32768"
                or None
            ),
        )
        assert apply(control_plane, namespace, verdict(tmp_path / "v", decision="131072")) == 0
        wait_for(
            "the operator to apply the decision 131072 (threshold unset)",
            lambda: (
                (
                    (env := env_map(read_deployment(admin, namespace, "wrc"), "controller"))
                    and THRESHOLD_VAR not in env
                    and env.get(ENABLED_VAR) == "true"
                )
                or None
            ),
        )
        wait_for(
            "the policy to be Ready for the decision's generation",
            lambda: is_ready(read_policy(admin, namespace)) or None,
        )
