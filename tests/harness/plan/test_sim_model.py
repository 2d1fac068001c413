"""The simulator's model parameters (plan/sim_model.py): today's constants are the defaults,
a matrix's `sim_model:` section sets them (validated like the rest of the matrix), and
a run on the simulator follows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spillover_harness.cli import main
from spillover_harness.plan.matrix import MatrixError, load_matrix
from spillover_harness.plan.sim_model import PARAMETERS, SimModel, parameter
from spillover_harness.results.results_dir import matrix_hash
from spillover_harness.sim.steprun import StepLimits

MATRIX = """\
name: model-params
seed: 20261130
configurations:
  - name: "off"
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}
  - name: 32KiB
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"}
recipes:
  - name: summarize
    inputs: [{name: document, size_class: medium}]
repetitions: {sim: 2, minikube: 1, dev: 1}
run_timeout_s: 900
concurrency: 2
acceptance: {baseline: "off", token_tolerance: 0.1, quality_recipes: [summarize]}
decision:
  chain:
    - {config: 32KiB, default: "32768"}
  fallback: "false"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_former_constants() -> None:
    m = SimModel()
    assert (m.full_read_limit, m.window_before, m.window_after, m.wide_window) == (
        65536,
        2048,
        6144,
        24576,
    )
    assert (m.lazy_reader_p, m.lazy_read_fraction) == (0.2, 0.5)
    assert (m.context_window_tokens, m.max_iterations) == (200_000, 25)
    assert StepLimits.from_model(m) == StepLimits()
    assert {p.name for p in PARAMETERS} == set(SimModel.__dataclass_fields__)
    for p in PARAMETERS:  # every sensitivity value is a valid value, and not the default
        assert all(p.low <= v <= p.high for v in p.sweep), p.name
        assert p.default not in p.sweep, p.name
        assert p.low <= p.default <= p.high, p.name


def test_matrix_section_sets_the_model(tmp_path: Path) -> None:
    m = load_matrix(write(tmp_path, MATRIX + "sim_model: {max_iterations: 12, lazy_reader_p: 1}\n"))
    model = m.simulator_model()
    assert model.max_iterations == 12
    assert model.lazy_reader_p == 1.0 and isinstance(model.lazy_reader_p, float)
    assert model.changed() == {"max_iterations": 12, "lazy_reader_p": 1.0}
    plain = load_matrix(write(tmp_path, MATRIX))
    assert plain.simulator_model() == SimModel()
    assert matrix_hash(plain) != matrix_hash(m)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{read_window: 3}", "key 'sim_model.read_window': unknown simulator model parameter"),
        ("{max_iterations: 0}", "key 'sim_model.max_iterations': 0 is out of range"),
        ("{max_iterations: 2.5}", "key 'sim_model.max_iterations': 2.5 is not an integer"),
        ("{lazy_reader_p: 1.5}", "key 'sim_model.lazy_reader_p': 1.5 is out of range"),
        ("{lazy_reader_p: true}", "sim_model.lazy_reader_p"),
        ("{max_iterations: '12'}", "sim_model.max_iterations"),
    ],
)
def test_matrix_section_is_validated(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(MatrixError) as info:
        load_matrix(write(tmp_path, MATRIX + f"sim_model: {section}\n"))
    assert message in str(info.value)
    assert str(tmp_path / "matrix.yaml") in str(info.value)


def test_unknown_parameter_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="full_read_limit"):
        parameter("nope")


def test_a_run_follows_the_matrix_model(tmp_path: Path) -> None:
    """With the defaults, a lazy reader among the 2 seeds misses the end of the spilled
    document and 32KiB fails summary quality; with `lazy_reader_p: 0` (no lazy reader)
    the same matrix passes it."""
    runs = {}
    for name, extra in (("plain", ""), ("diligent", "sim_model: {lazy_reader_p: 0.0}\n")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(MATRIX + extra, encoding="utf-8")
        out = tmp_path / name
        code = main(["run", "--stage", "sim", "--matrix", str(path), "--out", str(out)])
        assert code == 0
        runs[name] = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    quality = {
        k: v["configs"]["32KiB"]["criteria"]["summary_quality"]["status"] for k, v in runs.items()
    }
    assert quality == {"plain": "fail", "diligent": "pass"}
