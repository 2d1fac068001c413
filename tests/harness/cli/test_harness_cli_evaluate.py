"""`evaluate`, `report` and `fixtures export` on records made by a real `run
--stage sim`, and the clear errors for bad inputs."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from harness_cli import Run
from spillover_harness.cli import main
from spillover_operator.exit_codes import BAD_INPUT, INCONCLUSIVE, OK

DECISIONS = {"131072", "32768", "false", "inconclusive"}
CRITERIA = {"success_rate", "iteration_limit", "input_tokens", "summary_quality", "no_leak"}


def small_matrix(directory: Path, *, reps: int = 2) -> Path:
    text = (
        resources.files("spillover_harness.plan.matrices")
        .joinpath("spillover-default.yaml")
        .read_text(encoding="utf-8")
    )
    path = directory / "matrix.yaml"
    path.write_text(text.replace("  sim: 5\n", f"  sim: {reps}\n"), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def sim_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real sim stage (2 repetitions) shared by the tests of this module."""
    base = tmp_path_factory.mktemp("sim")
    out = base / "out"
    code = main(
        [
            "run",
            "--stage",
            "sim",
            "--matrix",
            str(small_matrix(base)),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code in (OK, INCONCLUSIVE)
    return out


def test_evaluate_json_prints_one_object_with_the_documented_keys(
    sim_results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["evaluate", "--records", str(sim_results / "runs.jsonl"), "--format", "json"])
    stdout = capsys.readouterr().out
    data = json.loads(stdout)  # the whole stdout is exactly one JSON document
    assert isinstance(data, dict)
    assert data["decision"] in DECISIONS
    assert code == (INCONCLUSIVE if data["decision"] == "inconclusive" else OK)
    assert set(data["configs"]) == {"128KiB", "32KiB"}
    for cfg in data["configs"].values():
        assert cfg["verdict"] in {"pass", "fail", "inconclusive"}
        assert set(cfg["criteria"]) == CRITERIA
        for criterion in cfg["criteria"].values():
            assert criterion["status"] in {"pass", "fail", "inconclusive"}
    # the default matrix has the same configurations and cells: same verdict as the run's
    assert data["decision"] == json.loads((sim_results / "verdict.json").read_text())["decision"]


def test_evaluate_markdown(sim_results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["evaluate", "--records", str(sim_results / "runs.jsonl")])
    out = capsys.readouterr().out
    decision = json.loads((sim_results / "verdict.json").read_text())["decision"]
    assert code in (OK, INCONCLUSIVE) and decision in out and out.lstrip().startswith("#")


def test_report_writes_the_report(
    sim_results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    code = main(["report", "--records", str(sim_results / "runs.jsonl"), "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code in (OK, INCONCLUSIVE)
    assert (out / "report.md").exists() and (out / "verdict.json").exists()
    assert list((out / "plots").glob("*.png"))
    assert f"report: {out / 'report.md'}" in stdout and "decision: " in stdout


def corrupt(sim_results: Path, tmp_path: Path, lineno: int, new_line: str) -> Path:
    lines = (sim_results / "runs.jsonl").read_text().splitlines()
    lines[lineno - 1] = new_line
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: "{oops", "not valid JSON"),
        (lambda d: json.dumps({**d, "input_tokens": True}), "field 'input_tokens'"),
        (lambda d: json.dumps({**d, "iterations": -1}), "cannot be negative"),
        (
            lambda d: json.dumps({k: v for k, v in d.items() if k != "outcome"}),
            "missing field 'outcome'",
        ),
        (lambda d: json.dumps({**d, "extra": 1}), "unknown field 'extra'"),
        (lambda d: json.dumps({**d, "finished_at": "soon"}), "field 'finished_at'"),
    ],
    ids=["not-json", "bool-for-int", "negative", "missing", "unknown", "timestamp"],
)
@pytest.mark.parametrize("command", ["evaluate", "report"])
def test_a_bad_line_is_named_and_exits_2(
    command: str,
    change: object,
    expected: str,
    sim_results: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    original = json.loads((sim_results / "runs.jsonl").read_text().splitlines()[2])
    assert callable(change)
    path = corrupt(sim_results, tmp_path, 3, change(original))
    argv = [command, "--records", str(path)]
    if command == "report":
        argv += ["--out", str(tmp_path / "r")]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == BAD_INPUT and captured.out == ""
    assert captured.err.startswith(f"error: bad records file: {path}:3: ")
    assert expected in captured.err
    assert "Traceback" not in captured.err


def test_missing_records_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["evaluate", "--records", str(tmp_path / "nope.jsonl")])
    assert code == BAD_INPUT and "no such records file" in capsys.readouterr().err


def test_records_of_another_matrix_are_refused(
    sim_results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = json.loads((sim_results / "runs.jsonl").read_text().splitlines()[0])
    path = corrupt(sim_results, tmp_path, 1, json.dumps({**original, "config": "16KiB"}))
    code = main(["evaluate", "--records", str(path), "--format", "json"])
    captured = capsys.readouterr()
    assert code == BAD_INPUT and captured.out == ""
    assert "configurations not in the matrix: 16KiB" in captured.err
    assert "--matrix" in captured.err


def test_records_of_several_stages_are_refused(
    sim_results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = json.loads((sim_results / "runs.jsonl").read_text().splitlines()[0])
    path = corrupt(sim_results, tmp_path, 1, json.dumps({**original, "stage": "dev"}))
    code = main(["evaluate", "--records", str(path)])
    assert code == BAD_INPUT and "mix stages (dev, sim)" in capsys.readouterr().err


def test_an_empty_records_file_is_refused_as_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing to evaluate is not a verdict of nothing: the file is named, stdout stays
    empty (a script reading JSON gets none), exit 2."""
    path = tmp_path / "runs.jsonl"
    path.write_text("\n\n")
    code = main(["evaluate", "--records", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == BAD_INPUT
    assert out == ""
    assert f"{path}: the records file is empty" in err


def test_fixtures_export_is_deterministic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fixtures", "export", str(tmp_path / "a"), "--seed", "5"]) == 0
    assert main(["fixtures", "export", str(tmp_path / "b"), "--seed", "5"]) == 0
    assert "fixture files under" in capsys.readouterr().out
    files_a = sorted(
        p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file()
    )
    files_b = sorted(
        p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file()
    )
    assert files_a and files_a == files_b
    for rel in files_a:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()


def test_fixtures_export_into_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    assert main(["fixtures", "export", str(target)]) == BAD_INPUT
    assert "is not a directory" in capsys.readouterr().err


def test_report_of_no_records_is_refused_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text("")
    code = main(["report", "--records", str(path), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == BAD_INPUT
    assert "the records file is empty" in err
    assert not (tmp_path / "r" / "verdict.json").exists()
    assert not (tmp_path / "r" / "report.md").exists()


def test_fixtures_export_writes_the_16_mib_input_only_with_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """code-review/budget-16MiB (~18 MB) and summarize/document-140k are built only when
    asked for: a plain export leaves them out, `--all` writes them with the others and
    lists them in the manifest."""
    assert main(["fixtures", "export", str(tmp_path / "plain"), "--seed", "5"]) == 0
    assert main(["fixtures", "export", str(tmp_path / "all"), "--seed", "5", "--all"]) == 0
    capsys.readouterr()

    def inputs(root: Path) -> set[str]:
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        return {f"{f['recipe']}/{f['input']}" for f in manifest["fixtures"]}

    assert "code-review/budget-16MiB" not in inputs(tmp_path / "plain")
    assert not (tmp_path / "plain" / "code-review" / "budget-16MiB").exists()
    built_on_use = {"code-review/budget-16MiB", "summarize/document-140k"}
    assert not built_on_use & inputs(tmp_path / "plain")
    assert inputs(tmp_path / "all") == inputs(tmp_path / "plain") | built_on_use
    written = (tmp_path / "all" / "code-review" / "budget-16MiB").rglob("*")
    assert sum(p.stat().st_size for p in written if p.is_file()) > 16 * 1024 * 1024


def test_a_token_rule_at_the_lowest_confidence_the_docs_allow_evaluates(
    cli: Run, tmp_path: Path
) -> None:
    """`input_tokens: {rule: non_inferiority, confidence: 0.5}` (the matrix allows 0.5 to
    0.999): at 0.5 the one-sided bound is the middle of the bootstrap, and the stage is
    judged, through `run` and again through `evaluate`, instead of crashing after every
    run was spent."""
    import yaml

    default = resources.files("spillover_harness.plan.matrices") / "spillover-default.yaml"
    data = yaml.safe_load(default.read_text(encoding="utf-8"))
    data["acceptance"]["rules"] = {
        "input_tokens": {"rule": "non_inferiority", "margin": 0.1, "confidence": 0.5}
    }
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "sim"
    code, stdout, stderr = cli(
        ["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out), "--no-progress"]
    )
    assert code in (OK, INCONCLUSIVE), stderr
    assert "Traceback" not in stderr and "confidence must be" not in stderr
    assert "rules: input_tokens by non-inferiority" in stdout
    code, stdout, stderr = cli(
        ["evaluate", "--records", str(out / "runs.jsonl"), "--format", "json"]
    )
    assert code in (OK, INCONCLUSIVE), stderr
    assert '"input_tokens": "non_inferiority"' in stdout
