"""`spillover-harness sensitivity` end to end on the simulator: a small matrix, two
parameters with a few values each; which ones flip the decision and where, the
table, the tornado plot, resume, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_cli import Run
from matrix_builders import small_matrix
from spillover_harness.cli import main
from spillover_harness.results.records import read_records
from spillover_operator.exit_codes import BAD_INPUT, OK

MATRIX = small_matrix("sensitivity-small", input_name="large")


def test_sensitivity_names_the_flipping_parameter_and_value(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(MATRIX, encoding="utf-8")
    out = tmp_path / "sens"
    argv = [
        "sensitivity",
        "--parameters",
        "context_window_tokens,lazy_reader_p",
        "--values",
        "context_window_tokens=64000,400000",
        "--values",
        "lazy_reader_p=0,1",
        "--matrix",
        str(matrix),
        "--out",
        str(out),
    ]
    assert main(argv) == OK
    data = json.loads((out / "sensitivity.json").read_text(encoding="utf-8"))
    assert data["reference"]["decision"] == "131072"
    # A 64,000-token window: under `off` the large review overflows it after a few
    # iterations, having spent few tokens; 128KiB gets further and spends more, so it
    # is no longer below off's tokens (criterion 3) and the decision falls to false.
    # Summarize is not in this matrix, so the lazy reader changes nothing.
    assert data["flipping"] == ["context_window_tokens"]
    window = data["parameters"]["context_window_tokens"]
    assert window["flip_below"] == 64000 and window["flip_above"] is None
    assert [p["value"] for p in window["points"]] == [64000, 200000, 400000]
    assert data["parameters"]["lazy_reader_p"]["flip_below"] is None
    # The margins say how far: at the reference 128KiB's large review sits below off's
    # median input tokens (a strict limit of 1 as a ratio) with room to spare; at
    # 64,000 tokens it is above it, the criterion that flipped the decision.
    by_value = {p["value"]: p for p in window["points"]}
    at_ref = by_value[200000]["margins"]["128KiB"]["input_tokens"]
    at_flip = by_value[64000]["margins"]["128KiB"]["input_tokens"]
    assert at_ref["strict"] and at_ref["limit"] == 1 and at_ref["cell"] == "code-review/large"
    assert at_ref["margin"] == pytest.approx(1 - at_ref["value"]) and at_ref["margin"] > 0
    assert at_flip["margin"] < 0 and at_flip["status"] == "fail"
    assert data["reference"]["margins"]["128KiB"]["input_tokens"] == at_ref
    # Every point's stage.json names the simulator parameters it ran with.
    windows = sorted(
        json.loads(path.read_text(encoding="utf-8"))["provenance"]["simulator_parameters"]["model"][
            "context_window_tokens"
        ]
        for path in out.rglob("stage.json")
    )
    assert 64000 in windows and 400000 in windows, windows
    report = (out / "sensitivity.md").read_text(encoding="utf-8")
    assert "**Parameters that flip it:** `context_window_tokens`" in report
    assert "plots/tornado.png" in report
    assert "## Margins: how close each value is to flipping" in report
    assert f"input_tokens {at_ref['value']:.3g} < 1 ({at_ref['margin']:+.3g})" in report
    assert f"❌ input_tokens {at_flip['value']:.3g} < 1 ({at_flip['margin']:+.3g})" in report
    assert (out / "plots" / "tornado.png").read_bytes().startswith(b"\x89PNG")
    stages = sorted(p.name for p in (out / "points").iterdir())
    assert stages == [
        "context_window_tokens=400000",
        "context_window_tokens=64000",
        "lazy_reader_p=0",
        "lazy_reader_p=1",
        "reference",
    ]
    assert len(read_records(out / "points" / "reference" / "runs.jsonl")) == 4

    # Again with --resume: nothing runs again, the same answer; without it, refused.
    assert main([*argv, "--resume"]) == OK
    again = json.loads((out / "sensitivity.json").read_text(encoding="utf-8"))
    assert again["flipping"] == data["flipping"]
    assert main(argv) == BAD_INPUT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--parameters", "read_window"], "unknown simulator model parameter 'read_window'"),
        (["--values", "max_iterations=0"], "max_iterations: 0 out of range"),
        (
            ["--parameters", "max_iterations", "--values", "lazy_reader_p=0.5"],
            "lazy_reader_p is not among --parameters",
        ),
    ],
)
def test_sensitivity_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "sens"
    assert main(["sensitivity", *args, "--out", str(out)]) == BAD_INPUT
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--values", "max_iterations=10", "--values", "max_iterations=15,20"],
            "--values max_iterations=... is given 2 times; give each parameter's values in "
            "one option",
        ),
        (
            [
                "--parameters",
                "bytes_per_token,max_iterations",
                "--values",
                "bytes_per_token=2.5",
                "--values",
                "max_iterations=10",
                "--values",
                "bytes_per_token=3",
            ],
            "--values bytes_per_token=... is given 2 times",
        ),
        (["--parameters", ""], "no parameter named in ''"),
        (["--parameters", " , ,"], "leave --parameters out to study all"),
        (
            ["--parameters", "max_iterations,bytes_per_token,max_iterations"],
            "max_iterations named more than once",
        ),
    ],
)
def test_sensitivity_refuses_ambiguous_selections(
    tmp_path: Path, cli: Run, args: list[str], message: str
) -> None:
    """A repeated `--values` NAME (the later would replace the earlier) and an empty
    `--parameters` (it would start every parameter) are refused before anything runs."""
    out = tmp_path / "sens"
    code, stdout, stderr = cli(["sensitivity", *args, "--out", str(out)])
    assert code == BAD_INPUT
    assert message in stderr
    assert stdout == ""
    assert not out.exists()
