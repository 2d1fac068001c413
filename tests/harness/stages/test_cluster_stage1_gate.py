"""The Stage 1 gate of stage dev, called directly: which Stage 1 results let dev start.

A decision counts as reached when the matrix's decision chain can end in it (a
step's default or the fallback), so a chain ending in 65536 is accepted like the
default chain's 131072 / 32768 / false. The CLI path on a real control plane is
tests/integration/test_cluster_gate.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spillover_harness.plan.matrix import Matrix, load_matrix, parse_matrix
from spillover_harness.stages.cluster_stage import Stage1GateError, check_stage1, stage1_decided

VERSION = "sha256:a"


def _stage1(tmp: Path, stage: str, version: str, decision: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "stage.json").write_text(
        json.dumps({"stage": stage, "driver": {"kind": "cluster", "mcp_host_version": version}})
    )
    (tmp / "verdict.json").write_text(json.dumps({"decision": decision}))
    return tmp


def _matrix_with_decision(
    chain: list[dict[str, str]], fallback: str, *, with_64kib: bool = False
) -> Matrix:
    """The default matrix with another decision chain (validated like a matrix file).

    `with_64kib`: its 32KiB configuration becomes 64KiB (threshold 65536), so a step
    may default to 65536 (a step's default must be its configuration's threshold)."""
    data: dict[str, Any] = load_matrix().model_dump(mode="json", by_alias=True)
    if with_64kib:
        for config in data["configurations"]:
            if config["name"] == "32KiB":
                config["name"] = "64KiB"
                config["env"]["CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD"] = "65536"
    data["decision"] = {"chain": chain, "fallback": fallback}
    return parse_matrix(data, source="test")


def test_the_default_chain_accepts_its_decisions_and_refuses_the_rest(tmp_path: Path) -> None:
    matrix = load_matrix()
    for decision in ("131072", "32768"):
        ok = _stage1(tmp_path / decision, "minikube", VERSION, decision)
        assert f"decision {decision} ({ok})" in check_stage1(ok, VERSION, matrix)
    for decision in ("inconclusive", "65536", ""):
        refused = _stage1(tmp_path / f"refused-{decision}", "minikube", VERSION, decision)
        with pytest.raises(Stage1GateError, match=f"no accepted verdict \\(decision '{decision}'"):
            check_stage1(refused, VERSION, matrix)


def test_a_stage1_that_decided_false_keeps_stage2_closed_unless_the_flag_says_so(
    tmp_path: Path,
) -> None:
    """`false` is a reached decision (spillover off), but it leaves no default for
    Stage 2 to validate: refused with the flag that overrides it named, and let through
    with `allow_false` (`--override-stage1-false`), the line saying so."""
    matrix = load_matrix()
    off = _stage1(tmp_path / "false", "minikube", VERSION, "false")
    with pytest.raises(Stage1GateError, match="decided `false`") as info:
        check_stage1(off, VERSION, matrix)
    assert "--override-stage1-false" in str(info.value)
    assert "OVERRIDE_STAGE1_FALSE=1" in str(info.value)
    line = check_stage1(off, VERSION, matrix, allow_false=True)
    assert line.startswith(
        "**Stage 1 decided `false`; Stage 2 ran anyway (--override-stage1-false)**"
    )
    # the flag lets only `false` through: every other check of the gate stays
    with pytest.raises(Stage1GateError, match="no accepted verdict"):
        refused = _stage1(tmp_path / "inc", "minikube", VERSION, "inconclusive")
        check_stage1(refused, VERSION, matrix, allow_false=True)
    with pytest.raises(Stage1GateError, match="validated mcp-host"):
        check_stage1(off, "sha256:other", matrix, allow_false=True)


def test_a_chain_ending_in_65536_lets_its_stage1_verdict_through(tmp_path: Path) -> None:
    matrix = _matrix_with_decision(
        [{"config": "64KiB", "default": "65536"}], "false", with_64kib=True
    )
    ok = _stage1(tmp_path / "ok", "minikube", VERSION, "65536")
    line = check_stage1(ok, VERSION, matrix)
    assert line == f"Stage 1 accepted for this mcp-host version: decision 65536 ({ok})"
    # ...and that chain cannot reach 131072: such a verdict is not this matrix's decision
    other = _stage1(tmp_path / "other", "minikube", VERSION, "131072")
    with pytest.raises(Stage1GateError, match="no accepted verdict"):
        check_stage1(other, VERSION, matrix)


def test_the_fallback_is_a_decision_too() -> None:
    matrix = _matrix_with_decision(
        [{"config": "128KiB", "default": "131072"}, {"config": "32KiB", "default": "32768"}],
        "65536",
    )
    assert stage1_decided({"decision": "65536"}, matrix)
    assert stage1_decided({"decision": "32768"}, matrix)
    assert not stage1_decided({"decision": "false"}, matrix)
    assert not stage1_decided({"decision": "inconclusive"}, matrix)
    assert not stage1_decided({}, matrix)


def test_verdict_json_decided_is_what_the_gate_reads() -> None:
    """verdict.json written by the evaluator carries `decided`; the gate takes it over
    the chain (which only serves verdict.json files from before that field)."""
    matrix = load_matrix()
    assert stage1_decided({"decision": "131072", "decided": True}, matrix)
    assert not stage1_decided({"decision": "131072", "decided": False}, matrix)
    assert stage1_decided({"decision": "65536", "decided": True}, matrix)
    assert not stage1_decided({"decision": "131072", "decided": "yes"}, matrix)


def test_the_gate_refuses_another_version_stage_or_missing_results(tmp_path: Path) -> None:
    matrix = load_matrix()
    ok = _stage1(tmp_path / "ok", "minikube", VERSION, "131072")
    with pytest.raises(Stage1GateError, match="validated mcp-host 'sha256:a'"):
        check_stage1(ok, "sha256:b", matrix)
    with pytest.raises(Stage1GateError, match="not minikube"):
        check_stage1(_stage1(tmp_path / "sim", "sim", VERSION, "131072"), VERSION, matrix)
    with pytest.raises(Stage1GateError, match="no Stage 1 results"):
        check_stage1(tmp_path / "missing", VERSION, matrix)
    local = _stage1(tmp_path / "local", "minikube", VERSION, "131072")
    stage = json.loads((local / "stage.json").read_text())
    stage["driver"]["simulated_platform"] = True
    (local / "stage.json").write_text(json.dumps(stage))
    with pytest.raises(Stage1GateError, match="simulated platform"):
        check_stage1(local, VERSION, matrix)
    with pytest.raises(Stage1GateError, match="--override-stage1"):
        check_stage1(tmp_path / "missing", VERSION, matrix)


@pytest.mark.parametrize(
    ("verdict", "stage", "needle"),
    [
        ("[1, 2]", None, "verdict.json: a JSON list, not an object"),
        ('{"decided": true}', None, "verdict.json: no `decision`"),
        ("{not json", None, "(JSONDecodeError)"),
        (None, '{"stage": "minikube", "driver": "x"}', "driver: Input should be a valid"),
    ],
)
def test_results_that_are_not_a_stage1_verdict_are_named(
    tmp_path: Path, verdict: str | None, stage: str | None, needle: str
) -> None:
    """Read through the models (`readback`): a file the stage would not write is refused
    with its path and what is wrong, never an AttributeError from a dict lookup."""
    results = _stage1(tmp_path / "bad", "minikube", VERSION, "131072")
    if verdict is not None:
        (results / "verdict.json").write_text(verdict)
    if stage is not None:
        (results / "stage.json").write_text(stage)
    with pytest.raises(Stage1GateError, match="no Stage 1 results") as info:
        check_stage1(results, VERSION, load_matrix())
    assert needle in str(info.value)
    assert "--override-stage1" in str(info.value)
