"""apply.decision: a verdict.json's decision as a SpilloverPolicy spec change, and the
refusals (inconclusive, incomplete, simulated, unreadable), through the command too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spillover_harness.apply.decision import (
    DecisionRefused,
    apply_patch,
    describe_change,
    read_decision,
    spec_patch,
)
from spillover_harness.cli import main
from spillover_harness.plan.matrix import load_matrix
from spillover_operator.exit_codes import BAD_INPUT, INCOMPLETE, INCONCLUSIVE


def verdict_dir(tmp_path: Path, **fields: Any) -> Path:
    data = {
        "decision": "32768",
        "decided": True,
        "incomplete": None,
        "stage": "minikube",
        "matrix": "spillover-default",
        **fields,
    }
    (tmp_path / "verdict.json").write_text(json.dumps(data), encoding="utf-8")
    return tmp_path


def test_decisions_map_to_spec_patches() -> None:
    assert spec_patch("false") == {"enabled": False}
    assert spec_patch("131072") == {"enabled": True, "thresholdBytes": None}
    assert spec_patch("32768") == {"enabled": True, "thresholdBytes": 32768}
    assert spec_patch("65536") == {"enabled": True, "thresholdBytes": 65536}
    with pytest.raises(DecisionRefused):
        spec_patch("inconclusive")


def test_the_deciding_configurations_budget_is_applied(tmp_path: Path) -> None:
    text = (
        Path(__file__).parents[3] / "harness/spillover_harness/plan/matrices/spillover-default.yaml"
    ).read_text(encoding="utf-8")
    text = text.replace(
        'CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"',
        'CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"\n'
        '      CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES: "8388608"',
    )
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    matrix = load_matrix(path)
    assert spec_patch("32768", matrix)["budgetBytes"] == 8388608
    assert "budgetBytes" not in spec_patch("131072", matrix)  # 128KiB sets none: kept


def test_describe_change_names_each_changed_field() -> None:
    spec = {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": "w"}}
    patch = spec_patch("131072")
    assert describe_change(spec, patch) == ["thresholdBytes: 32768 -> unset"]
    assert apply_patch(spec, patch) == {"enabled": True, "target": {"deployment": "w"}}
    assert describe_change({"enabled": False}, spec_patch("false")) == []
    assert describe_change({"enabled": True}, spec_patch("false")) == ["enabled: true -> false"]


@pytest.mark.parametrize(
    ("fields", "kind", "code"),
    [
        ({"decision": "inconclusive", "decided": False}, "inconclusive", INCONCLUSIVE),
        (
            {
                "decision": "inconclusive",
                "decided": False,
                "incomplete": {"missing": 3, "judged": False},
            },
            "incomplete",
            INCOMPLETE,
        ),
        ({"incomplete": {"missing": 3, "judged": True}}, "incomplete", INCOMPLETE),
        ({"stage": "sim"}, "simulated", BAD_INPUT),
        ({"decision": 5}, "unreadable", BAD_INPUT),
    ],
)
def test_refusals(tmp_path: Path, fields: dict[str, Any], kind: str, code: int) -> None:
    results = verdict_dir(tmp_path, **fields)
    with pytest.raises(DecisionRefused) as info:
        read_decision(results)
    assert info.value.kind == kind
    manifest = tmp_path / "policy.yaml"
    manifest.write_text(
        "kind: SpilloverPolicy\nmetadata: {name: spillover}\nspec:\n  enabled: true\n"
    )
    before = manifest.read_text()
    assert main(["apply-decision", "--results", str(results), "--gitops", str(manifest)]) == code
    assert manifest.read_text() == before  # nothing applied


def test_a_verdict_of_a_simulated_platform_is_refused_like_sim(tmp_path: Path) -> None:
    results = verdict_dir(tmp_path, stage="minikube")
    stage = {"stage": "minikube", "driver": {"kind": "cluster", "profile": "local",
                                             "simulated_platform": True}}  # fmt: skip
    (results / "stage.json").write_text(json.dumps(stage), encoding="utf-8")
    with pytest.raises(DecisionRefused, match=r"simulated platform .* profile 'local'") as info:
        read_decision(results)
    assert info.value.kind == "simulated"
    assert read_decision(results, allow_simulated=True).decision == "32768"
    assert main(["apply-decision", "--results", str(results), "--dry-run"]) == BAD_INPUT


def test_a_faulted_stage_is_refused_even_with_allow_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = verdict_dir(tmp_path, stage="sim")
    stage = {"stage": "sim", "driver": {"kind": "sim", "faults": ["default-threshold"]}}
    (results / "stage.json").write_text(json.dumps(stage), encoding="utf-8")
    with pytest.raises(DecisionRefused, match=r"faults injected \(default-threshold\)") as info:
        read_decision(results, allow_simulated=True)
    assert info.value.kind == "faulted"
    argv = ["apply-decision", "--results", str(results), "--dry-run", "--allow-simulated"]
    assert main(argv) == BAD_INPUT
    assert "never a decision to apply" in capsys.readouterr().err


def test_a_simulated_decision_is_marked_so_the_commit_message_does_not_call_it_validated(
    tmp_path: Path,
) -> None:
    from spillover_harness.cli.apply_decision import commit_message

    assert read_decision(verdict_dir(tmp_path, stage="sim"), allow_simulated=True).simulated
    assert not read_decision(verdict_dir(tmp_path, stage="minikube")).simulated
    assert "validated decision" in commit_message(simulated=False)
    assert "not validated on the platform" in commit_message(simulated=True)


def test_opt_ins(tmp_path: Path) -> None:
    judged = verdict_dir(tmp_path, incomplete={"missing": 3, "judged": True}, stage="sim")
    decision = read_decision(judged, allow_incomplete=True, allow_simulated=True)
    assert decision.decision == "32768"


def test_no_verdict_names_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(DecisionRefused, match="no verdict; run the stage first"):
        read_decision(tmp_path)


def test_a_verdict_that_is_no_object_is_refused_as_unreadable(tmp_path: Path) -> None:
    (tmp_path / "verdict.json").write_text("[]", encoding="utf-8")
    with pytest.raises(DecisionRefused, match=r"not a verdict \(a JSON list") as info:
        read_decision(tmp_path)
    assert info.value.kind == "unreadable"
    assert main(["apply-decision", "--results", str(tmp_path), "--dry-run"]) == BAD_INPUT
