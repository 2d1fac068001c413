"""A pass on a cell where the configuration stored nothing says only that nothing changed:
the verdict marks each criterion cell `exercised`, the decision's next line and the
report's first screen name such passes, and `plan` warns before a cluster is spent when
an input cannot reach a configuration's threshold. An input that does (the 140 KiB
document) exercises the 128 KiB default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from harness_cli import Run
from spillover_operator import exit_codes

DEFAULT = Path(__file__).resolve().parents[3] / "harness/spillover_harness/plan/matrices"
UNEXERCISED_128 = ("code-review/small", "code-review/medium", "summarize/document")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The shipped simulator's stage, as `make demo` runs it, and what it printed."""
    import contextlib
    import io

    from spillover_harness.cli import main

    out = tmp_path_factory.mktemp("demo") / "sim"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", "--stage", "sim", "--out", str(out), "--no-progress"]) == 0
    return out, printed.getvalue()


def test_the_verdict_marks_the_cells_a_configuration_never_spilled_on(
    shipped: tuple[Path, str],
) -> None:
    out, printed = shipped
    verdict = json.loads((out / "verdict.json").read_text())
    cells = verdict["configs"]["128KiB"]["criteria"]["success_rate"]["cells"]
    exercised = {f"{c['recipe']}/{c['input']}": c["exercised"] for c in cells}
    assert exercised == {**dict.fromkeys(UNEXERCISED_128, False), "code-review/large": True}
    lines = printed.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith("decision: 131072"))
    assert lines[at + 1] == (
        "not exercised: 128KiB stored no result on code-review/small, code-review/medium, "
        "summarize/document: its passes there say only that nothing changed (the inputs "
        "never reached its threshold)"
    )
    report = (out / "report.md").read_text()
    first = report[: report.index("## Configurations")]
    assert "**not exercised:** 128KiB stored no result on code-review/small" in first


def test_plan_warns_before_a_cluster_is_spent(cli: Run, tmp_path: Path) -> None:
    code, _, stderr = cli(["plan", "--stage", "dev"])
    assert code == exit_codes.OK, stderr
    warning = next(line for line in stderr.splitlines() if line.startswith("warning: 128KiB"))
    assert all(cell in warning for cell in UNEXERCISED_128)
    assert "code-review/large" not in warning
    assert any(line.startswith("warning: 32KiB") and "code-review/small" in line
               for line in stderr.splitlines())  # fmt: skip


def test_an_input_that_reaches_the_threshold_exercises_the_default(
    cli: Run, tmp_path: Path
) -> None:
    """What docs/harness.md tells the owners to do: a copy of the matrix with the 140 KiB
    document added. plan no longer names it, and on it 128KiB stores results."""
    data = yaml.safe_load((DEFAULT / "spillover-default.yaml").read_text())
    data["name"] = "spillover-140k"
    data["recipes"][1]["inputs"].append({"name": "document-140k", "size_class": "medium"})
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data))
    code, _, stderr = cli(["plan", "--stage", "dev", "--matrix", str(matrix)])
    assert code == exit_codes.OK, stderr
    assert "document-140k" not in stderr
    out = tmp_path / "sim"
    code, _, stderr = cli(["run", "--stage", "sim", "--matrix", str(matrix), "--out", str(out),
                           "--no-progress"])  # fmt: skip
    assert code in (exit_codes.OK, exit_codes.INCONCLUSIVE), stderr
    verdict = json.loads((out / "verdict.json").read_text())
    cells = verdict["configs"]["128KiB"]["criteria"]["success_rate"]["cells"]
    assert next(c for c in cells if c["input"] == "document-140k")["exercised"] is True
