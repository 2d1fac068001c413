"""`spillover-harness report --compare A B` (`make compare-stages`): two stage
directories side by side, on stdout; a directory that holds no stage is refused (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness_cli import Run
from matrix_builders import small_matrix
from spillover_operator.exit_codes import BAD_INPUT, INCONCLUSIVE, OK

REPO = Path(__file__).resolve().parents[3]

SECOND_CONFIG = """\
  - name: 32KiB
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: "32768"}
"""


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two real sim stages of one matrix with different seeds (the runs differ)."""
    from spillover_harness.cli import main

    base = tmp_path_factory.mktemp("compare")
    dirs = []
    for seed in ("20261130", "7"):
        matrix = base / f"m-{seed}.yaml"
        text = small_matrix("compare", extra_configurations=SECOND_CONFIG)
        matrix.write_text(text.replace("seed: 20261130", f"seed: {seed}"), encoding="utf-8")
        out = base / f"sim-{seed}"
        code = main(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                     "--no-progress"])  # fmt: skip
        assert code in (OK, INCONCLUSIVE)
        dirs.append(out)
    return dirs[0], dirs[1]


def _verdict(path: Path) -> dict[str, object]:
    data = json.loads((path / "verdict.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_compare_puts_two_stages_side_by_side(cli: Run, stages: tuple[Path, Path]) -> None:
    a, b = stages
    code, out, err = cli(["report", "--compare", str(a), str(b)])
    assert code == OK, err
    va, vb = _verdict(a), _verdict(b)
    assert out.startswith("# Stage comparison: `sim` vs `sim`\n")
    rows = out.splitlines()
    assert f"| decision | `{va['decision']}` | `{vb['decision']}` |" in rows
    stability = next(r for r in rows if r.startswith("| stability |"))
    for v in (va, vb):
        share = v["stability"]["decision"]  # type: ignore[index]
        assert f"`{v['decision']}` in {share:.1%} of 1,000 resamples" in stability
    assert "| figures | modelled | modelled |" in rows
    provenance = next(r for r in rows if r.startswith("| provenance |"))
    assert provenance.count("spillover-harness ") == 2
    # per-criterion status of every judged configuration, both sides
    for name in ("128KiB", "32KiB"):
        for key, crit in va["configs"][name]["criteria"].items():  # type: ignore[index]
            row = next(r for r in rows if r.startswith(f"| `{name}` | {key}"))
            status = crit["status"]
            other = vb["configs"][name]["criteria"][key]["status"]  # type: ignore[index]
            assert status in row and other in row
            assert row.split("|")[2].strip().endswith("≠") == (status != other)
    # key figures per configuration, baseline included, labelled modelled on the simulator
    for name in ("off", "128KiB", "32KiB"):
        assert any(r.startswith(f"| `{name}` | median duration (s) |") for r in rows)
        assert any(r.startswith(f"| `{name}` | succeeded |") for r in rows)
    assert "(modelled)" in next(r for r in rows if "median status report (bytes)" in r)


def test_a_measured_side_is_not_labelled_modelled(
    cli: Run, stages: tuple[Path, Path], tmp_path: Path
) -> None:
    """A cluster stage's figures are measured: only the simulator's side says modelled."""
    a, _ = stages
    cluster = tmp_path / "minikube"
    shutil.copytree(a, cluster)
    stage = json.loads((cluster / "stage.json").read_text(encoding="utf-8"))
    stage.update(stage="minikube", driver={"kind": "cluster", "profile": "minikube"})
    stage["provenance"].update(simulator_parameters=None, profile="minikube")
    (cluster / "stage.json").write_text(json.dumps(stage), encoding="utf-8")
    verdict = _verdict(cluster)
    verdict["stage"] = "minikube"
    (cluster / "verdict.json").write_text(json.dumps(verdict), encoding="utf-8")
    code, out, err = cli(["report", "--compare", str(cluster), str(a)])
    assert code == OK, err
    rows = out.splitlines()
    assert "| figures | measured | modelled |" in rows
    duration = next(r for r in rows if r.startswith("| `128KiB` | median duration (s) |"))
    cells = [c.strip() for c in duration.split("|")]
    assert not cells[3].endswith("(modelled)") and cells[4].endswith("(modelled)")
    assert "profile `minikube`" in next(r for r in rows if r.startswith("| provenance |"))


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p, "not a directory"),
        (lambda p: (p.mkdir(), p)[1], "stage.json: no such file: not a stage directory"),
    ],
    ids=["missing", "no-stage-json"],
)
def test_compare_refuses_a_directory_that_is_no_stage(
    cli: Run, stages: tuple[Path, Path], tmp_path: Path, make: object, needle: str
) -> None:
    a, _ = stages
    bad = make(tmp_path / "nothing")  # type: ignore[operator]
    code, out, err = cli(["report", "--compare", str(a), str(bad)])
    assert code == BAD_INPUT
    assert out == ""
    assert f"--compare: {bad} is not a stage directory to compare" in err
    assert needle in err
    assert "spillover-harness run --out DIR" in err


def test_compare_refuses_a_stage_without_a_verdict(
    cli: Run, stages: tuple[Path, Path], tmp_path: Path
) -> None:
    a, _ = stages
    half = tmp_path / "half"
    half.mkdir()
    shutil.copyfile(a / "stage.json", half / "stage.json")
    code, _, err = cli(["report", "--compare", str(half), str(a)])
    assert code == BAD_INPUT
    assert f"{half / 'verdict.json'}: no such file" in err
    (half / "verdict.json").write_text('{"decision": 5}', encoding="utf-8")
    code, _, err = cli(["report", "--compare", str(half), str(a)])
    assert code == BAD_INPUT and "decision: Input should be a valid string" in err


def test_compare_takes_no_records_or_out(cli: Run, stages: tuple[Path, Path]) -> None:
    a, b = stages
    code, _, err = cli(["report", "--compare", str(a), str(b), "--out", str(a)])
    assert code == BAD_INPUT and "drop --out" in err
    code, _, err = cli(["report", "--out", str(a)])
    assert code == BAD_INPUT and "report needs --records FILE and --out DIR" in err


def test_report_help_explains_compare(cli: Run) -> None:
    code, out, _ = cli(["report", "--help"])
    assert code == 0
    assert "--compare A B" in out
    assert "spillover-harness report --compare results/minikube results/dev" in out


def test_make_compare_stages_runs_the_comparison(stages: tuple[Path, Path]) -> None:
    """`make compare-stages A=.. B=..`, as a user types it (the virtualenv this test runs
    in, taken as installed: `-o` keeps make from reinstalling it)."""
    a, b = stages
    venv = Path(sys.prefix)
    proc = subprocess.run(
        ["make", "--no-print-directory", "-s", "-o", f"{venv}/.installed-3", "compare-stages",
         f"VENV={venv}", f"A={a}", f"B={b}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == OK, proc.stderr
    assert proc.stdout.startswith("# Stage comparison: `sim` vs `sim`\n")
    assert f"|  | A: `{a}` | B: `{b}` |" in proc.stdout.splitlines()
    missing = b.parent / "no-such-stage"
    proc = subprocess.run(
        ["make", "--no-print-directory", "-s", "-o", f"{venv}/.installed-3", "compare-stages",
         f"VENV={venv}", f"A={a}", f"B={missing}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode != OK
    assert f"--compare: {missing} is not a stage directory to compare" in proc.stderr
