"""The matrix file: the packaged default loads as docs/reference.md §2 says, and every
mistake names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from repo_paths import REPO_ROOT
from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.matrix import KNOWN_INPUTS, MatrixError, load_matrix

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
    on_disk = load_matrix(repo / "harness/spillover_harness/plan/matrices/spillover-default.yaml")
    assert on_disk == load_matrix()


def test_a_good_small_matrix_loads(tmp_path: Path) -> None:
    m = load_matrix(write(tmp_path, GOOD))
    assert m.repetitions.for_stage("sim") == 2 and m.size_class("summarize", "document") == "medium"


BAD: list[tuple[str, str, str, list[str]]] = [
    ("unknown-key", "concurrency: 2", "concurrency: 2\ncolour: blue", ["unknown key 'colour'"]),
    (
        "unknown-nested-key",
        "repetitions: {sim: 2, minikube: 1, dev: 1}",
        "repetitions: {sim: 2, minikube: 1, dev: 1, prod: 3}",
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
        ["line 4: off reads as a boolean only in YAML 1.1", 'quote it ("off")'],
    ),
    (
        "bare-off-baseline",
        'baseline: "off"',
        "baseline: off",
        ["off reads as a boolean only in YAML 1.1", 'quote it ("off")'],
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
    with pytest.raises(MatrixError, match="is a directory, not a matrix file"):
        load_matrix(tmp_path)


def test_good_fixture_is_valid_yaml() -> None:
    assert yaml.safe_load(GOOD)["configurations"][0]["name"] == "off"


# -- every value checked before any run (issue 12, item 3) ------------------------------

THRESHOLD_KEY = "configurations.2.env.CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD"
ENABLED_KEY = "configurations.0.env.CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED"
BUDGET_KEY = "configurations.1.env.CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES"
THRESHOLD_ALLOWED = "allowed: a decimal integer from 4096 to 1048576"
BUDGET_ALLOWED = "allowed: a decimal integer from 1048576 to 268435456"
ENABLED_ALLOWED = 'allowed: exactly "true" or "false"'
THRESHOLD_LINE = '{CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"}'
ENABLED_LINE = '{CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}'
BUDGET_LINE = "  - name: 128KiB\n"


def threshold(value: str) -> tuple[str, str]:
    return THRESHOLD_LINE, THRESHOLD_LINE.replace('"32768"', value)


def enabled(value: str) -> tuple[str, str]:
    return ENABLED_LINE, ENABLED_LINE.replace('"false"', value)


def budget(value: str) -> tuple[str, str]:
    return (
        BUDGET_LINE,
        f"{BUDGET_LINE}    env: {{CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES: {value}}}\n",
    )


# (id, (old, new), the key the message must name, what else it must say)
BAD_VALUES: list[tuple[str, tuple[str, str], str, list[str]]] = [
    (
        "threshold-too-small",
        threshold('"100"'),
        THRESHOLD_KEY,
        ["'100' is out of range", THRESHOLD_ALLOWED],
    ),
    (
        "threshold-too-large",
        threshold('"2000000"'),
        THRESHOLD_KEY,
        ["'2000000' is out of range", THRESHOLD_ALLOWED],
    ),
    (
        "threshold-32k",
        threshold('"32k"'),
        THRESHOLD_KEY,
        ["'32k' is not a decimal integer", THRESHOLD_ALLOWED],
    ),
    ("threshold-32KiB", threshold('"32KiB"'), THRESHOLD_KEY, ["not a decimal integer"]),
    ("threshold-inner-space", threshold('"32 768"'), THRESHOLD_KEY, ["not a decimal integer"]),
    ("threshold-blank", threshold('"  "'), THRESHOLD_KEY, ["empty value", "leave the key out"]),
    ("threshold-negative", threshold('"-32768"'), THRESHOLD_KEY, ["not a decimal integer"]),
    ("threshold-hex", threshold('"0x8000"'), THRESHOLD_KEY, ["not a decimal integer"]),
    ("threshold-empty", threshold('""'), THRESHOLD_KEY, ["empty value", "leave the key out"]),
    ("threshold-unquoted", threshold("32768"), THRESHOLD_KEY, ["valid string"]),
    ("budget-too-small", budget('"1000"'), BUDGET_KEY, ["'1000' is out of range", BUDGET_ALLOWED]),
    ("budget-too-large", budget('"300000000"'), BUDGET_KEY, ["out of range", BUDGET_ALLOWED]),
    ("budget-16MiB", budget('"16MiB"'), BUDGET_KEY, ["not a decimal integer", BUDGET_ALLOWED]),
    ("enabled-no", enabled('"no"'), ENABLED_KEY, ["'no'", ENABLED_ALLOWED]),
    ("enabled-False", enabled('"False"'), ENABLED_KEY, ["'False'", ENABLED_ALLOWED]),
    ("enabled-0", enabled('"0"'), ENABLED_KEY, ["'0'", ENABLED_ALLOWED]),
    ("enabled-off", enabled('"off"'), ENABLED_KEY, ["'off'", ENABLED_ALLOWED]),
    (
        "baseline-not-off",
        ("    env: " + ENABLED_LINE + "\n", ""),
        "configurations.0.env",
        ["the baseline 'off'", 'CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"', "got {}"],
    ),
    (
        "baseline-enabled-true",
        enabled('"true"'),
        "configurations.0.env",
        ["the baseline 'off'", "allowed: an env that sets"],
    ),
    (
        "unknown-recipe",
        ("  - name: code-review", "  - name: code-reveiw"),
        "recipes.0.name",
        ["unknown recipe 'code-reveiw'", "allowed: code-review, summarize"],
    ),
    (
        "unknown-input",
        ("{name: large, size_class: large}", "{name: huge, size_class: large}"),
        "recipes.0.inputs.0.name",
        ["unknown input 'huge' of recipe 'code-review'", "allowed: small, medium, large"],
    ),
    (
        "wrong-size-class",
        ("{name: large, size_class: large}", "{name: large, size_class: small}"),
        "recipes.0.inputs.0.size_class",
        ["'code-review/large' is a large input", "allowed: large", "got 'small'"],
    ),
    (
        "duplicate-top-level-key",
        ("seed: 7", "seed: 7\nseed: 8"),
        "'seed'",
        ["line 3: duplicate key", "first at line 2"],
    ),
    (
        "duplicate-env-key",
        (
            THRESHOLD_LINE,
            THRESHOLD_LINE[:-1] + ', CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "65536"}',
        ),
        "'CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD'",
        ["duplicate key", "keep one"],
    ),
    (
        "duplicate-config-field",
        ("  - name: 128KiB\n", "  - name: 128KiB\n    name: 64KiB\n"),
        "'name'",
        ["duplicate key"],
    ),
    (
        "chain-default-not-a-number",
        ('default: "32768"', 'default: "32k"'),
        "decision.chain.1.default",
        ["'32k' is not the threshold configuration '32KiB' runs with", 'allowed: "32768"'],
    ),
    (
        "chain-default-other-threshold",
        ('default: "131072"', 'default: "65536"'),
        "decision.chain.0.default",
        ["'65536'", "configuration '128KiB'", 'allowed: "131072"'],
    ),
    (
        "chain-config-is-off",
        ("  - name: 128KiB\n", "  - name: 128KiB\n    env: " + ENABLED_LINE + "\n"),
        "decision.chain.0.config",
        ["configuration '128KiB' sets", "allowed: a configuration with spillover on"],
    ),
    (
        "fallback-no",
        ('fallback: "false"', 'fallback: "no"'),
        "decision.fallback",
        ["'no'", 'allowed: "false"'],
    ),
    (
        "fallback-out-of-range",
        ('fallback: "false"', 'fallback: "100"'),
        "decision.fallback",
        ["'100'", "or a decimal integer from 4096 to 1048576"],
    ),
]


@pytest.mark.parametrize(
    ("kind", "change", "key", "expected"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES]
)
def test_every_value_is_checked_before_any_run(
    tmp_path: Path, kind: str, change: tuple[str, str], key: str, expected: list[str]
) -> None:
    old, new = change
    assert old in GOOD, kind
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    message = str(info.value)
    line = next((m for m in message.splitlines() if key in m), None)
    assert line is not None, f"the key {key} is not named: {message}"
    assert line.startswith(f"{path}: "), line
    for part in expected:
        assert part in line, line


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    """A reviewer fixes the file in one pass: each bad value has its own line."""
    text = GOOD.replace('"32768"}', '"32k"}', 1).replace(ENABLED_LINE, enabled('"no"')[1], 1)
    with pytest.raises(MatrixError) as info:
        load_matrix(write(tmp_path, text))
    lines = str(info.value).splitlines()
    assert any(THRESHOLD_KEY in m for m in lines) and any(ENABLED_KEY in m for m in lines)


def test_values_the_platform_accepts_load(tmp_path: Path) -> None:
    """Bounds included, an explicit ENABLED=true, a budget, and a chain ending in 65536."""
    text = (
        GOOD.replace('"32768"}', '"65536"}', 1)
        .replace("name: 32KiB", "name: 64KiB")
        .replace('{config: 32KiB, default: "32768"}', '{config: 64KiB, default: "65536"}')
        .replace(
            BUDGET_LINE,
            BUDGET_LINE + '    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "true", '
            'CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES: "268435456"}\n',
        )
    )
    m = load_matrix(write(tmp_path, text))
    assert m.decision_values == ("131072", "65536", "false")
    assert (
        m.configuration("128KiB").env["CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES"] == "268435456"
    )


def test_surrounding_whitespace_is_read_as_the_mcp_host_reads_it(tmp_path: Path) -> None:
    """` false ` is the kill switch and `32768 ` is 32768 on the platform
    (reference.md §1.3): the matrix takes them and keeps the text the mcp-host runs with,
    so the baseline and the chain are judged on it."""
    text = GOOD.replace('"32768"}', '" 32768 "}', 1).replace(ENABLED_LINE, enabled('"false "')[1])
    m = load_matrix(write(tmp_path, text))
    assert m.configuration("off").env == {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"}
    assert m.configuration("32KiB").env == {"CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "32768"}
    assert m.decision_values == ("131072", "32768", "false")


@pytest.mark.parametrize("value", ["4096", "1048576"])
def test_threshold_bounds_are_inclusive(tmp_path: Path, value: str) -> None:
    text = GOOD.replace("name: 32KiB", "name: t").replace(
        '{config: 32KiB, default: "32768"}', f'{{config: t, default: "{value}"}}'
    )
    m = load_matrix(write(tmp_path, text.replace('"32768"}', f'"{value}"}}', 1)))
    assert m.decision_values[1] == value


def test_known_inputs_are_what_the_fixtures_build() -> None:
    fixtures = build_fixtures(1)
    # every input the set can give, the ones built on first use too (without building them)
    built = {(recipe, name, size) for (recipe, name), size in fixtures.inputs().items()}
    table = {(r, i, size) for r, inputs in KNOWN_INPUTS.items() for i, size in inputs.items()}
    assert built == table
