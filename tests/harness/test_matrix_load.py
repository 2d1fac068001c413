"""The matrix file: the packaged default loads as docs/reference.md §2 says, and every
mistake names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from repo_paths import REPO_ROOT
from spillover_harness.matrix import MatrixError, load_matrix

GOOD = """\
name: small
seed: 7
configurations:
  - name: "off"
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}
  - name: 128KiB
  - name: 32KiB
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"}
recipes:
  - name: code-review
    inputs: [{name: large, size_class: large}]
  - name: summarize
    inputs: [{name: document, size_class: medium}]
repetitions: {sim: 2, minikube: 1, dev: 1}
run_timeout_s: 60
concurrency: 2
acceptance: {baseline: "off", token_tolerance: 0.1, quality_recipes: [summarize]}
decision:
  chain:
    - {config: 128KiB, default: "131072"}
    - {config: 32KiB, default: "32768"}
  fallback: "false"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_default_matrix_is_the_spec_matrix() -> None:
    m = load_matrix()
    assert m.name == "spillover-default"
    assert [c.name for c in m.configurations] == ["off", "128KiB", "32KiB"]
    assert m.configuration("off").env == {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"}
    assert m.configuration("128KiB").env == {}
    assert m.configuration("32KiB").env == {"CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "32768"}
    cells = [(r.name, i.name, i.size_class) for r, i in m.cells()]
    assert cells == [
        ("code-review", "small", "small"),
        ("code-review", "medium", "medium"),
        ("code-review", "large", "large"),
        ("summarize", "document", "medium"),
    ]
    assert (m.repetitions.sim, m.repetitions.minikube, m.repetitions.dev) == (5, 2, 5)
    assert m.acceptance.baseline == "off"
    assert m.acceptance.token_tolerance == pytest.approx(0.10)
    assert [(s.config, s.default) for s in m.decision.chain] == [
        ("128KiB", "131072"),
        ("32KiB", "32768"),
    ]
    assert m.decision.fallback == "false"


def test_the_makefile_path_is_the_packaged_default() -> None:
    repo = REPO_ROOT
    on_disk = load_matrix(repo / "harness/spillover_harness/matrices/spillover-default.yaml")
    assert on_disk == load_matrix()


def test_a_good_small_matrix_loads(tmp_path: Path) -> None:
    m = load_matrix(write(tmp_path, GOOD))
    assert m.repetitions.for_stage("sim") == 2 and m.size_class("summarize", "document") == "medium"


BAD: list[tuple[str, str, str, list[str]]] = [
    ("unknown-key", "concurrency: 2", "concurrency: 2\ncolour: blue", ["unknown key 'colour'"]),
    (
        "unknown-nested-key",
        "run_timeout_s: 60",
        "run_timeout_s: 60\nrepetitions: {sim: 2, minikube: 1, dev: 1, prod: 3}",
        ["unknown key 'repetitions.prod'"],
    ),
    ("wrong-type", "concurrency: 2", "concurrency: two", ["key 'concurrency'"]),
    (
        "timeout-as-string",
        "run_timeout_s: 60",
        'run_timeout_s: "60"',
        ["key 'run_timeout_s'"],
    ),
    (
        "unknown-config-in-chain",
        '{config: 32KiB, default: "32768"}',
        '{config: 16KiB, default: "16384"}',
        ["decision.chain.1.config", "'16KiB'", "not a configuration"],
    ),
    (
        "missing-baseline",
        'acceptance: {baseline: "off", ',
        "acceptance: {",
        ["missing key 'acceptance.baseline'"],
    ),
    (
        "baseline-not-a-configuration",
        'acceptance: {baseline: "off", ',
        'acceptance: {baseline: "none", ',
        ["acceptance.baseline", "'none'"],
    ),
    (
        "bare-off-name",
        '  - name: "off"',
        "  - name: off",
        ["key 'configurations.0.name'", "got False", 'quote it, e.g. "off"'],
    ),
    (
        "bare-off-baseline",
        'baseline: "off"',
        "baseline: off",
        ["key 'acceptance.baseline'", "got False", "quote it"],
    ),
    (
        "bare-false-env",
        'CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"',
        "CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: false",
        ["key 'configurations.0.env.CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED'", "quote it"],
    ),
    (
        "duplicate-config-names",
        "  - name: 32KiB\n",
        "  - name: 128KiB\n",
        ["duplicate configuration names: 128KiB"],
    ),
    (
        "duplicate-input-names",
        "inputs: [{name: large, size_class: large}]",
        "inputs: [{name: large, size_class: large}, {name: large, size_class: small}]",
        ["recipes.0", "duplicate input names: large"],
    ),
    (
        "unknown-env-var",
        '{CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"}',
        '{SPILLOVER_THRESHOLD: "32768"}',
        ["configurations.2", "SPILLOVER_THRESHOLD"],
    ),
    (
        "bad-size-class",
        "{name: document, size_class: medium}",
        "{name: document, size_class: huge}",
        ["key 'recipes.1.inputs.0.size_class'"],
    ),
    (
        "unknown-quality-recipe",
        "quality_recipes: [summarize]",
        "quality_recipes: [summarise]",
        ["acceptance.quality_recipes", "'summarise'"],
    ),
    ("zero-reps", "{sim: 2,", "{sim: 0,", ["key 'repetitions.sim'"]),
]


@pytest.mark.parametrize(("kind", "old", "new", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_matrix_names_file_and_key(
    tmp_path: Path, kind: str, old: str, new: str, expected: list[str]
) -> None:
    assert old in GOOD, kind
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    for part in expected:
        assert part in message, message
    assert "{'name'" not in message, "the whole mapping must not be echoed"


def test_not_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "name: [unclosed\n  - x: {")
    with pytest.raises(MatrixError, match=rf"^{path}: not valid YAML"):
        load_matrix(path)


def test_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- a\n- b\n")
    with pytest.raises(MatrixError, match="must be a YAML mapping"):
        load_matrix(path)


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="must be a YAML mapping"):
        load_matrix(write(tmp_path, ""))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="no such matrix file"):
        load_matrix(tmp_path / "nope.yaml")
    with pytest.raises(MatrixError, match="cannot read the matrix file"):
        load_matrix(tmp_path)


def test_good_fixture_is_valid_yaml() -> None:
    assert yaml.safe_load(GOOD)["configurations"][0]["name"] == "off"
