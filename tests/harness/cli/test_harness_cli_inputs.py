"""Every input checked where it is used (issue 21, item 5), through `spillover-harness`
as a user runs it: each bad input of the issue's lists ends with exit 2, one line
naming the problem and the fix, no traceback, and nothing written or half-applied.

The stage these tests break is a real one: a small matrix run on the simulator once
per module, copied into each test's own directory before it is edited.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness_cli import Run, lines_of, run_sim_stage, write_lines
from matrix_builders import small_matrix
from repo_paths import REPO_ROOT
from spillover_harness.results.records import RunKey, run_id_for
from spillover_operator.exit_codes import BAD_INPUT, OK

MATRIX_TEXT = small_matrix("inputs", input_name="small")
MANIFEST = (REPO_ROOT / "manifests" / "samples" / "threshold-32kib.yaml").read_text("utf-8")
ONE_MB = 1024 * 1024


def refused(result: tuple[int, str, str], *needles: str) -> str:
    """Assert exit 2, no traceback, one error line holding every needle; return it."""
    code, _, err = result
    assert "Traceback" not in err, err
    assert code == BAD_INPUT, err
    lines = [
        line
        for line in err.splitlines()
        if line.strip() and not line.startswith(("usage:", " ", "note:"))
    ]
    assert len(lines) == 1, err  # one line: the problem and the fix
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert len(lines[0]) < 1500, f"{len(lines[0])} characters"  # long values are cut
    return lines[0]


@pytest.fixture(scope="module")
def stage_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_sim_stage(tmp_path_factory.mktemp("stage"), MATRIX_TEXT)


@pytest.fixture
def stage(stage_dir: Path, tmp_path: Path) -> Path:
    """This test's own copy of the simulated stage's results directory."""
    copy = tmp_path / "sim"
    shutil.copytree(stage_dir, copy)
    return copy


def edit_json(path: Path, **fields: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data), encoding="utf-8")


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# -- the records checks, wired into evaluate, report and apply-decision -------------------


def two_different_records_of_one_run(results: Path) -> str:
    records = lines_of(results)
    write_lines(results, [*records, {**records[0], "input_tokens": records[0]["input_tokens"] + 1}])
    return "two different records of the same run"


def a_repetition_beyond_the_matrix(results: Path) -> str:
    records = lines_of(results)
    r = records[0]
    r["repetition"] = 3  # the matrix runs 2
    r["run_id"] = run_id_for(RunKey(r["stage"], r["config"], r["recipe"], r["input"], 3))
    write_lines(results, records)
    return "repetition 3 is outside the matrix's 2 repetition(s)"


def a_run_id_that_contradicts_its_record(results: Path) -> str:
    records = lines_of(results)
    records[0]["config"] = "128KiB" if records[0]["config"] == "off" else "off"
    write_lines(results, [records[0]])
    return "does not match the record's stage/config/recipe/input/repetition"


def a_stage_file_of_another_stage(results: Path) -> str:
    edit_json(results / "stage.json", stage="minikube")
    return "says the directory holds stage minikube"


def a_stage_file_with_fewer_repetitions(results: Path) -> str:
    data = json.loads((results / "stage.json").read_text(encoding="utf-8"))
    data["matrix"]["repetitions"]["sim"] = 1
    (results / "stage.json").write_text(json.dumps(data), encoding="utf-8")
    return "repetition 2"


RECORD_PROBLEMS = [
    two_different_records_of_one_run,
    a_repetition_beyond_the_matrix,
    a_run_id_that_contradicts_its_record,
    a_stage_file_of_another_stage,
    a_stage_file_with_fewer_repetitions,
]


@pytest.mark.parametrize("problem", RECORD_PROBLEMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("command", ["evaluate", "report", "apply-decision"])
def test_records_that_do_not_fit_are_refused(
    cli: Run, stage: Path, tmp_path: Path, command: str, problem: Callable[[Path], str]
) -> None:
    needle = problem(stage)
    before = snapshot(stage)
    records = str(stage / "runs.jsonl")
    if command == "evaluate":
        refused(cli(["evaluate", "--records", records, "--format", "json"]), needle)
    elif command == "report":
        out = tmp_path / "report"
        refused(cli(["report", "--records", records, "--out", str(out)]), needle)
        assert not out.exists()  # nothing written
    else:
        manifest = tmp_path / "policy.yaml"
        manifest.write_text(MANIFEST, encoding="utf-8")
        argv = ["apply-decision", "--results", str(stage), "--gitops", str(manifest),
                "--allow-simulated"]  # fmt: skip
        line = refused(cli(argv))
        assert "stage" in line or needle in line  # the stage's mismatch is named first
        assert manifest.read_text(encoding="utf-8") == MANIFEST  # nothing applied
    assert snapshot(stage) == before


def test_a_stage_file_with_fewer_repetitions_is_refused_even_with_another_matrix(
    cli: Run, stage: Path, tmp_path: Path
) -> None:
    """--matrix allows 5 repetitions; the stage.json beside the records says 1."""
    a_stage_file_with_fewer_repetitions(stage)
    matrix = tmp_path / "wide.yaml"
    matrix.write_text(MATRIX_TEXT.replace("sim: 2", "sim: 5"), encoding="utf-8")
    argv = ["evaluate", "--records", str(stage / "runs.jsonl"), "--matrix", str(matrix)]
    refused(cli(argv), "but the matrix in", "runs 1 repetition(s) of stage sim")


def test_the_unedited_stage_still_evaluates_and_reports(
    cli: Run, stage: Path, tmp_path: Path
) -> None:
    code, out, err = cli(["evaluate", "--records", str(stage / "runs.jsonl"), "--format", "json"])
    assert code == OK, err
    assert json.loads(out)["decision"] == "131072"
    code, _, err = cli(["report", "--records", str(stage / "runs.jsonl"), "--out", str(stage)])
    assert code == OK, err


# -- duplicate keys, in every YAML and JSON the harness reads -----------------------------


def test_a_duplicate_key_in_a_matrix(cli: Run, tmp_path: Path) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX_TEXT + "seed: 7\n", encoding="utf-8")
    out = tmp_path / "out"
    refused(cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out)]),
            "duplicate key 'seed'", "keep one")  # fmt: skip
    assert not out.exists()


def test_a_duplicate_key_in_a_profile(cli: Run, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("name: p\nnamespace: a\nnamespace: b\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = ["run", "--stage", "minikube", "--profile", str(profile), "--out", str(out)]
    refused(cli(argv), "duplicate key 'namespace'", "line 3")
    assert not out.exists()


def test_a_duplicate_key_in_a_gitops_manifest(cli: Run, stage: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "policy.yaml"
    text = MANIFEST.replace("  enabled: true\n", "  enabled: false\n  enabled: true\n")
    manifest.write_text(text, encoding="utf-8")
    argv = ["apply-decision", "--results", str(stage), "--gitops", str(manifest),
            "--allow-simulated"]  # fmt: skip
    refused(cli(argv), "duplicate key 'enabled'")
    assert manifest.read_text(encoding="utf-8") == text


def test_a_duplicate_key_in_a_record_line(cli: Run, stage: Path) -> None:
    path = stage / "runs.jsonl"
    first, *rest = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text(first.replace('"outcome": ', '"outcome": "failed", "outcome": ', 1)
                    + "".join(rest), encoding="utf-8")  # fmt: skip
    refused(cli(["evaluate", "--records", str(path)]), "runs.jsonl:1", "duplicate key 'outcome'")


@pytest.mark.parametrize("name", ["verdict.json", "stage.json"])
def test_a_duplicate_key_in_a_results_file(cli: Run, stage: Path, tmp_path: Path,
                                           name: str) -> None:  # fmt: skip
    path = stage / name
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("{", '{"stage": "minikube", ', 1), encoding="utf-8")
    manifest = tmp_path / "policy.yaml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    argv = ["apply-decision", "--results", str(stage), "--gitops", str(manifest),
            "--allow-simulated"]  # fmt: skip
    refused(cli(argv), name, "duplicate key 'stage'")
    assert manifest.read_text(encoding="utf-8") == MANIFEST
    if name == "stage.json":
        refused(cli(["evaluate", "--records", str(stage / "runs.jsonl")]), "duplicate key")


# -- numbers bounded before use -----------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        pytest.param("9" * 5000, "is too large", id="5000-digit-int"),
        pytest.param("1" + "0" * 400, "is too large", id="10**400"),
        pytest.param("1e400", "not finite", id="1e400"),
        pytest.param("NaN", "not a number JSON allows", id="nan"),
        pytest.param("Infinity", "not a number JSON allows", id="infinity"),
    ],
)
def test_a_huge_or_infinite_number_in_a_record(cli: Run, stage: Path, raw: str,
                                               needle: str) -> None:  # fmt: skip
    path = stage / "runs.jsonl"
    first, *rest = path.read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(first)
    broken = first.replace(f'"input_tokens": {record["input_tokens"]}', f'"input_tokens": {raw}')
    assert broken != first
    path.write_text(broken + "".join(rest), encoding="utf-8")
    refused(cli(["evaluate", "--records", str(path)]), "runs.jsonl:1", needle)


def test_a_record_nested_100000_deep(cli: Run, stage: Path) -> None:
    path = stage / "runs.jsonl"
    first, *rest = path.read_text(encoding="utf-8").splitlines(keepends=True)
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(first.replace('"notes": [', f'"notes": [{deep}, ', 1) + "".join(rest),
                    encoding="utf-8")  # fmt: skip
    refused(cli(["evaluate", "--records", str(path)]), "runs.jsonl:1", "nested more than")


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        pytest.param("sim: 2,", "sim: 1000000000,", "repetitions.sim", id="repetitions-1e9"),
        pytest.param("run_timeout_s: 900", "run_timeout_s: .inf", ".inf is not a finite",
                     id="run-timeout-inf"),
        pytest.param("name: inputs", 'name: ""', "key 'name'", id="empty-name"),
        pytest.param("seed: 20261130", "seed: " + "9" * 5000, "is too large", id="huge-seed"),
        pytest.param("run_timeout_s: 900", "run_timeout_s: " + "9" * 5000, "is too large",
                     id="huge-timeout"),
        pytest.param("run_timeout_s: 900", "run_timeout_s: .nan", "not a finite",
                     id="run-timeout-nan"),
        pytest.param("concurrency: 2", "1: 2\nconcurrency: 2", "not a string",
                     id="non-string-key"),
    ],
)  # fmt: skip
def test_a_bad_number_or_name_in_a_matrix(cli: Run, tmp_path: Path, old: str, new: str,
                                          needle: str) -> None:  # fmt: skip
    matrix = tmp_path / "m.yaml"
    assert old in MATRIX_TEXT
    matrix.write_text(MATRIX_TEXT.replace(old, new, 1), encoding="utf-8")
    out = tmp_path / "out"
    refused(cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out)]), needle)
    assert not out.exists()


def test_the_runs_of_a_stage_are_bounded_before_they_are_planned(cli: Run, tmp_path: Path) -> None:
    """Each bound alone would pass (10000 repetitions are allowed); 5 configurations x
    3 cells x 10000 repetitions are 150000 runs, more than a stage may plan."""
    cells = "[" + ", ".join(f"{{name: {n}, size_class: {n}}}"
                            for n in ("small", "medium", "large")) + "]"  # fmt: skip
    text = MATRIX_TEXT.replace("sim: 2,", "sim: 10000,").replace(
        "inputs: [{name: small, size_class: small}]", f"inputs: {cells}"
    ).replace("name: 128KiB\n", 'name: 128KiB\n  - name: 32KiB\n    env: '
              '{CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"}\n'
              '  - name: 64KiB\n    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "65536"}\n'
              '  - name: 16KiB\n    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "16384"}\n'
              )  # fmt: skip
    matrix = tmp_path / "m.yaml"
    matrix.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    code, _, err = cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out)])
    assert code == BAD_INPUT and "Traceback" not in err, err
    assert "150000 runs for stage sim" in err and "lower the repetitions" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        pytest.param(["run", "--stage", "sim", "--out", "o", "--concurrency", "100000"],
                     "must be <= 64", id="run-concurrency"),
        pytest.param(["sweep", "--out", "o", "--concurrency", "100000"], "must be <= 64",
                     id="sweep-concurrency"),
        pytest.param(["run", "--stage", "sim", "--out", "o", "--concurrency", "9" * 5000],
                     "not an integer", id="5000-digit-concurrency"),
        pytest.param(["run", "--stage", "minikube", "--profile", "minikube", "--out", "o",
                      "--apply-timeout", "inf"], "not a finite number", id="apply-timeout-inf"),
        pytest.param(["run", "--stage", "minikube", "--profile", "minikube", "--out", "o",
                      "--apply-timeout", "nan"], "not a finite number", id="apply-timeout-nan"),
        pytest.param(["run", "--stage", "minikube", "--profile", "minikube", "--out", "o",
                      "--apply-timeout", "1e9"], "out of range", id="apply-timeout-1e9"),
        pytest.param(["sensitivity", "--out", "o", "--values", "max_iterations=inf"],
                     "not a finite number", id="sensitivity-inf"),
        pytest.param(["fixtures", "export", "o", "--seed", "9" * 5000], "not an integer",
                     id="fixtures-seed-5000-digits"),
        pytest.param(["sweep", "--out", "o", "--thresholds", "9" * 5000],
                     "not a comma-separated list", id="sweep-5000-digits"),
    ],
)  # fmt: skip
def test_bad_numbers_on_the_command_line(cli: Run, tmp_path: Path, argv: list[str], needle: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    refused(cli(argv), needle)
    assert not (tmp_path / "o").exists()


def test_a_non_integer_for_an_integer_parameter_is_refused(cli: Run, tmp_path: Path) -> None:
    """`max_iterations=10.7` ran 10 iterations before."""
    out = tmp_path / "o"
    argv = ["sensitivity", "--out", str(out), "--values", "max_iterations=10.7"]
    refused(cli(argv), "max_iterations", "10.7 is not an integer")
    assert not out.exists()


# -- what raised a traceback ----------------------------------------------------------------


def test_a_non_utf8_profile(cli: Run, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_bytes(b"name: caf\xe9\n")
    out = tmp_path / "out"
    argv = ["run", "--stage", "minikube", "--profile", str(profile), "--out", str(out)]
    refused(cli(argv), "not UTF-8", "save the profile file as UTF-8")
    assert not out.exists()


def test_a_profile_that_is_a_directory(cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["run", "--stage", "minikube", "--profile", str(tmp_path), "--out", str(out)]
    refused(cli(argv), "is a directory, not a profile file")
    assert not out.exists()


@pytest.mark.parametrize("option", ["run", "report", "fixtures"])
def test_a_5000_character_out(cli: Run, stage: Path, tmp_path: Path, option: str) -> None:
    long = str(tmp_path / ("x" * 5000))
    argv = {
        "run": ["run", "--stage", "sim", "--out", long],
        "report": ["report", "--records", str(stage / "runs.jsonl"), "--out", long],
        "fixtures": ["fixtures", "export", long],
    }[option]
    line = refused(cli(argv), "is too long", "pass a shorter path")
    assert "x" * 200 not in line  # the path is cut, not echoed whole


def test_resume_where_the_records_file_is_a_directory(cli: Run, tmp_path: Path) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX_TEXT, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out), "--no-progress"]
    assert cli(argv)[0] == OK
    (out / "runs.jsonl").unlink()
    (out / "runs.jsonl").mkdir()
    refused(cli([*argv, "--resume"]), "runs.jsonl: is a directory", "move it aside")
    assert (out / "runs.jsonl").is_dir() and not any((out / "runs.jsonl").iterdir())


@pytest.mark.parametrize("where", ["matrix", "profile", "record"])
def test_a_1mb_bad_scalar_is_not_echoed_back(cli: Run, stage: Path, tmp_path: Path,
                                             where: str) -> None:  # fmt: skip
    big = "y" * ONE_MB
    out = tmp_path / "out"
    if where == "matrix":
        matrix = tmp_path / "m.yaml"
        matrix.write_text(MATRIX_TEXT.replace("run_timeout_s: 900", f"run_timeout_s: {big}"),
                          encoding="utf-8")  # fmt: skip
        argv = ["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out)]
    elif where == "profile":
        profile = tmp_path / "p.yaml"
        profile.write_text(f"name: p\nnamespace: {big.upper()}\n", encoding="utf-8")
        argv = ["run", "--stage", "minikube", "--profile", str(profile), "--out", str(out)]
    else:
        records = lines_of(stage)
        write_lines(stage, [{**records[0], "outcome": big}])
        argv = ["evaluate", "--records", str(stage / "runs.jsonl")]
    code, _, err = cli(argv)
    assert code == BAD_INPUT and "Traceback" not in err
    assert len(err) < 4000, f"{len(err)} characters of stderr"
    assert "y" * 100 not in err.lower() and "…" in err


# -- apply-decision: the platform's bounds, the matrix's chain, stage.json ------------------


def apply_argv(stage: Path, manifest: Path, *extra: str) -> list[str]:
    return ["apply-decision", "--results", str(stage), "--gitops", str(manifest), *extra]


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("decision", "needle"),
    [
        pytest.param("12", "outside the bytes a SpilloverPolicy's thresholdBytes takes (4096..",
                     id="below-the-platform-minimum"),
        pytest.param("9" * 5000, "not a threshold or false", id="5000-digits"),
        pytest.param("65536", "is not one the matrix 'inputs' can reach (131072, false)",
                     id="outside-the-chain"),
    ],
)  # fmt: skip
def test_an_edited_decision_is_not_applied(cli: Run, stage: Path, manifest: Path,
                                           decision: str, needle: str) -> None:  # fmt: skip
    edit_json(stage / "verdict.json", decision=decision)
    refused(cli(apply_argv(stage, manifest, "--allow-simulated")), needle)
    assert manifest.read_text(encoding="utf-8") == MANIFEST


def test_a_verdict_whose_stage_was_removed_is_still_simulated(
    cli: Run, stage: Path, manifest: Path
) -> None:
    edit_json(stage / "verdict.json", stage=None)
    refused(cli(apply_argv(stage, manifest)), "comes from the simulator", "--allow-simulated")
    assert manifest.read_text(encoding="utf-8") == MANIFEST
    # and with the bypass, the verdict still contradicts stage.json
    refused(cli(apply_argv(stage, manifest, "--allow-simulated")), "says the directory holds")
    assert manifest.read_text(encoding="utf-8") == MANIFEST


def test_a_verdict_claiming_another_stage_than_stage_json(
    cli: Run, stage: Path, manifest: Path
) -> None:
    edit_json(stage / "verdict.json", stage="dev")
    refused(cli(apply_argv(stage, manifest)), "comes from the simulator")
    refused(cli(apply_argv(stage, manifest, "--allow-simulated")), "verdict names stage 'dev'")
    assert manifest.read_text(encoding="utf-8") == MANIFEST


def test_report_into_another_stages_directory_keeps_its_verdict(
    cli: Run, stage: Path, stage_dir: Path, tmp_path: Path
) -> None:
    records = lines_of(stage)
    write_lines(stage, records[:1])  # an incomplete stage, reported anyway
    other = tmp_path / "other"
    shutil.copytree(stage_dir, other)
    before = snapshot(other)
    argv = ["report", "--records", str(stage / "runs.jsonl"), "--allow-incomplete",
            "--out", str(other)]  # fmt: skip
    refused(cli(argv), "holds another stage's results", "pass a new --out")
    assert snapshot(other) == before


def test_gitops_on_a_symlink_edits_its_target(cli: Run, stage: Path, tmp_path: Path) -> None:
    target = tmp_path / "real" / "policy.yaml"
    target.parent.mkdir()
    target.write_text(MANIFEST, encoding="utf-8")
    link = tmp_path / "policy.yaml"
    link.symlink_to(target)
    code, out, err = cli(apply_argv(stage, link, "--allow-simulated"))
    assert code == OK, err
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert "thresholdBytes" not in target.read_text(encoding="utf-8")  # 131072: the default
    assert "spec.thresholdBytes: 32768 -> unset" in out
