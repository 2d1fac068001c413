"""The decision values come from the matrix, not from the CLI (issue 8): a matrix whose
chain ends in 65536 is decided 65536 and exits 0, through `run --stage sim` with the
real simulator and through `evaluate` / `report`. The old CLI hard-coded
131072 / 32768 / false and exited "inconclusive" on it."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from spillover_harness.cli import main
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.records import RunKey, RunRecord, run_id_for
from spillover_operator.exit_codes import OK

# Only code-review/small: on the simulator no tool result of that input reaches
# 64 KiB, so 64KiB behaves like off and passes.
SIM_MATRIX = """\
name: chain-ends-in-65536
seed: 20261130
configurations:
  - name: "off"
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}
  - name: 64KiB
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "65536"}
recipes:
  - name: code-review
    inputs: [{name: small, size_class: small}]
repetitions: {sim: 2, minikube: 1, dev: 1}
run_timeout_s: 60
concurrency: 4
acceptance: {baseline: "off", token_tolerance: 0.1, quality_recipes: []}
decision:
  chain:
    - {config: 64KiB, default: "65536"}
  fallback: "false"
"""

# The default matrix with 32KiB replaced by 64KiB, the last step of the chain.
DEFAULT = (
    resources.files("spillover_harness.plan.matrices")
    .joinpath("spillover-default.yaml")
    .read_text(encoding="utf-8")
)
CHAIN_MATRIX = (
    DEFAULT.replace("  - name: 32KiB\n", "  - name: 64KiB\n")
    .replace('THRESHOLD: "32768"', 'THRESHOLD: "65536"')
    .replace('{config: 32KiB, default: "32768"}', '{config: 64KiB, default: "65536"}')
)


def write_matrix(directory: Path, text: str) -> Path:
    path = directory / "matrix.yaml"
    path.write_text(text, encoding="utf-8")
    assert load_matrix(path).decision_values[-2] == "65536"
    return path


def test_run_sim_decides_65536_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = write_matrix(tmp_path, SIM_MATRIX)
    out = tmp_path / "out"
    code = main(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                 "--no-progress"])  # fmt: skip
    stdout = capsys.readouterr().out
    assert json.loads((out / "verdict.json").read_text())["decision"] == "65536"
    assert "decision: 65536 (64KiB passed)" in stdout.splitlines()
    assert code == OK

    # evaluate and report without --matrix: the matrix stored in stage.json is the one
    # that made the records, so they know its chain (the default matrix has no 64KiB)
    code = main(["evaluate", "--records", str(out / "runs.jsonl"), "--format", "json"])
    assert json.loads(capsys.readouterr().out)["decision"] == "65536"
    assert code == OK
    code = main(["report", "--records", str(out / "runs.jsonl"), "--out", str(tmp_path / "r")])
    assert "decision: 65536 (64KiB passed)" in capsys.readouterr().out.splitlines()
    assert code == OK


def good(config: str, recipe: str, inp: str, size: str, rep: int, **fields: object) -> RunRecord:
    key = RunKey("sim", config, recipe, inp, rep)
    data: dict[str, object] = {
        "run_id": run_id_for(key),
        "stage": "sim",
        "config": config,
        "recipe": recipe,
        "input": inp,
        "size_class": size,
        "repetition": rep,
        "outcome": "succeeded",
        "hit_iteration_limit": False,
        "iterations": 5,
        "input_tokens": 1000 if config == "off" else 900,
        "output_tokens": 100,
        "duration_s": 10.0,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
        "started_at": "2026-11-30T10:00:00+00:00",
        "finished_at": "2026-11-30T10:01:00+00:00",
    }
    data.update(fields)
    return RunRecord.model_validate(data)


@pytest.mark.parametrize("command", ["evaluate", "report"])
def test_a_chain_ending_in_65536_is_decided_after_128kib_fails(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """128KiB fails (a .spill entry in one run), 64KiB passes: the decision is the last
    step of the chain, 65536, exit 0."""
    matrix_path = write_matrix(tmp_path, CHAIN_MATRIX)
    matrix = load_matrix(matrix_path)
    records = [
        good(c.name, r.name, i.name, i.size_class, rep,
             **({"disk_clean": False} if (c.name, i.name, rep) == ("128KiB", "small", 1) else {}))
        for rep in range(1, matrix.repetitions.sim + 1)
        for r, i in matrix.cells()
        for c in matrix.configurations
    ]  # fmt: skip
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    argv = [command, "--records", str(path), "--matrix", str(matrix_path)]
    argv += ["--format", "json"] if command == "evaluate" else ["--out", str(tmp_path / "r")]
    code = main(argv)
    stdout = capsys.readouterr().out
    if command == "evaluate":
        assert json.loads(stdout)["decision"] == "65536"
    else:
        assert "decision: 65536 (128KiB failed: no_leak; 64KiB passed)" in stdout.splitlines()
    assert code == OK
