"""report.md, verdict.json and the PNG plots: content, first line, token limits, modes."""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from record_builders import (
    CELLS,
    CONFIGS,
    MATRIX,
    CellKey,
    Spec,
    make_dataset,
    make_record,
    next_id,
)
from spillover_harness.evaluate import evaluate
from spillover_harness.report.plots import build_figures, token_marks, write_plots
from spillover_harness.report.report import SIM_DISCLAIMER, render_markdown, write_report
from spillover_harness.results.records import RecordLog, RunRecord
from spillover_harness.results.verdict import Verdict

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _good_run(config: str) -> Spec:
    """Slightly varied values, so the plots and per-cell medians have something to show."""
    return {
        "hit_iteration_limit": False,
        "iterations": 5 + next_id() % 3,
        "input_tokens": (1000 if config == "off" else 900) + next_id() % 50,
        "output_tokens": 100,
        "duration_s": 10.0 + next_id() % 7,
        "spillover_persisted": 1,
        "spillover_reads": 2,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
    }


def rec(config: str, recipe: str, inp: str, *, stage: str = "sim", **fields: Any) -> RunRecord:
    return make_record(_good_run, config, recipe, inp, stage=stage, **fields)


def dataset(
    cells: dict[CellKey, list[Spec]] | None = None, *, n: int = 2, stage: str = "sim"
) -> list[RunRecord]:
    return make_dataset(rec, cells, n=n, stage=stage)


def verdict(records: list[RunRecord]) -> Verdict:
    """Judged whatever is missing (most datasets here hold 2 of the 5 planned runs)."""
    return evaluate(records, MATRIX, allow_incomplete=True, resamples=100)


# -- report.md --------------------------------------------------------------------------


def test_sim_report_says_plainly_that_figures_come_from_the_simulator() -> None:
    records = dataset(stage="sim")
    text = render_markdown(verdict(records), records, MATRIX)
    assert SIM_DISCLAIMER in text
    assert "embedded simulator" in SIM_DISCLAIMER
    assert "[the sensitivity study](../sensitivity/sensitivity.md)" in text
    assert "they do not show that the platform passed" in SIM_DISCLAIMER
    # near the top: before the first table
    assert text.index(SIM_DISCLAIMER) < text.index("## Configurations")
    assert "**Stage:** `sim`" in text


def test_the_report_shows_what_each_configuration_sets() -> None:
    """A name is not evidence: `off` is shown with the variables it really sets."""
    records = dataset(stage="sim")
    misnamed = MATRIX.model_copy(
        update={
            "configurations": [
                c.model_copy(update={"env": {"CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "131072"}})
                if c.name == "off"
                else c
                for c in MATRIX.configurations
            ]
        }
    )
    v = evaluate(records, misnamed, allow_incomplete=True, resamples=10)
    assert v.to_json()["config_env"]["off"] == {
        "CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "131072"
    }
    text = render_markdown(v, records, misnamed)
    assert "### What each configuration sets" in text
    assert (
        "| off | baseline | `CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD=131072` | "
        "spillover on, threshold 131072, budget 16777216 |"
    ) in text
    assert "| 128KiB | — | none (every variable unset) | spillover on, threshold 131072" in text
    assert "| 32KiB | — | `CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD=32768` | " in text


def test_a_faulted_stage_says_so_first_and_names_no_way_to_apply_it() -> None:
    records = dataset(n=5, stage="sim")
    v = evaluate(records, MATRIX, resamples=10)
    assert v.decided
    text = render_markdown(
        v, records, MATRIX, apply_hint="spillover-harness apply-decision", faults=["ignore-env"]
    )
    assert "**Faults injected into the simulator: `ignore-env`.**" in text
    assert text.index("Faults injected") < text.index("**Decision:")
    assert "apply-decision`" in text and "refuses it" in text
    assert "To apply it" not in text and "--allow-simulated" not in text


@pytest.mark.parametrize("stage", ["minikube", "dev"])
def test_cluster_stage_reports_have_no_simulator_disclaimer(stage: str) -> None:
    records = dataset(stage=stage)
    text = render_markdown(verdict(records), records, MATRIX)
    assert SIM_DISCLAIMER not in text
    assert "simulator" not in text
    assert f"**Stage:** `{stage}`" in text


def test_decision_comes_first_then_criteria_then_cells_then_advisory() -> None:
    records = dataset({("128KiB", "code-review", "large"): [{"input_tokens": 5000}] * 5}, n=5)
    v = evaluate(records, MATRIX, resamples=100)  # the whole sim plan: complete
    assert v.incomplete is None
    assert v.decision == "32768"
    text = render_markdown(v, records, MATRIX)
    assert text.splitlines()[0] == "# Spillover validation: decision `32768`"
    assert text.index(v.decision_reason) < text.index("## Criteria")
    order = [
        "**Decision: `32768`.**",
        "## Configurations",
        "## Criteria",
        "### 1. Success rate (`success_rate`)",
        "### 2. Iteration limit (`iteration_limit`)",
        "### 3. Median input tokens (`input_tokens`)",
        "### 4. Summary quality (`summary_quality`)",
        "### 5. Nothing on disk, nothing in the logs (`no_leak`)",
        "## Per-cell results",
        "## Advisory statistics",
    ]
    positions = [text.index(s) for s in order]
    assert positions == sorted(positions)
    assert "Tolerance: 10% above off's median" in text
    # the failing cell shows its values, the baseline, the limit and the status
    failing = next(
        line
        for line in text.splitlines()
        if line.startswith("| 128KiB | code-review/large | large | 5,000 |")
    )
    assert "< " in failing and "❌ fail" in failing
    assert "never change a status or the decision" in text


def test_the_first_screen_holds_the_decision_its_stability_and_the_cells_deciding_it() -> None:
    """Issue 26: the decision, its stability, the cells that decide it and the simulator
    caveat first; the criterion tables after, folded in <details>."""
    one_failed = [{}] * 4 + [{"outcome": "failed"}]
    records = dataset(
        {
            ("128KiB", "code-review", "large"): [{"input_tokens": 5000}] * 5,
            ("32KiB", "summarize", "document"): one_failed,
        },
        n=5,
    )
    v = evaluate(records, MATRIX, resamples=100)
    assert v.decision == "false"
    text = render_markdown(v, records, MATRIX)
    first = text[: text.index("## Configurations")]
    assert "These figures come from the embedded simulator" in first
    assert (
        "**Reproducibility:** false; a fresh sim stage of this design would decide the same"
        in first
    )
    assert "**Stability:** false in " in first
    assert "**What decides it:**" in first
    assert "- `128KiB` fails: input_tokens code-review/large" in first
    # 4/5 against 5/5 on the simulator: the runs pair seed for seed, so the loss is the
    # configuration's own effect under the model, never called noise
    assert (
        "- `32KiB` fails: success_rate summarize/document (simulated: the configuration's own "
        "effect on the same seeds, not noise)" in first
    )
    # on a cluster stage the same figures are a literal fail a configuration as good as off
    # shows half the time
    on_dev = [r.model_copy(update={"stage": "dev"}) for r in records]
    dev = evaluate(on_dev, MATRIX, stage="dev", resamples=100)
    dev_first = render_markdown(dev, on_dev, MATRIX)
    assert "- `32KiB` fails: success_rate summarize/document (within noise: p=0.50)" in dev_first
    assert (
        "- a fresh stage's runs most often move the decision through: 32KiB success_rate "
        "summarize/document" in first
    )
    assert text.index("<details>") < text.index("## Criteria") < text.index("</details>")


def test_per_cell_table_has_a_row_per_configuration_and_cell() -> None:
    records = dataset({("32KiB", "summarize", "document"): [{}, {"outcome": "harness_error"}]})
    text = render_markdown(verdict(records), records, MATRIX)
    section = text[text.index("## Per-cell results") : text.index("## Advisory statistics")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "/" in line]
    data_rows = [r for r in rows if not r.startswith("| recipe / input")]
    assert len(data_rows) == len(CONFIGS) * len(CELLS)
    row = next(r for r in data_rows if "| 32KiB |" in r and "summarize/document" in r)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "2"  # runs
    assert cells[4] == "1/1"  # succeeded / valid
    assert cells[5] == "1"  # harness_error


def test_inconclusive_report_lists_the_runs_needed() -> None:
    records = dataset({("128KiB", "code-review", "medium"): [{"logs_clean": None}, {}]})
    v = verdict(records)
    assert v.decision == "inconclusive"
    text = render_markdown(v, records, MATRIX)
    assert "## Runs needed" in text
    assert text.index("## Runs needed") < text.index("## Criteria")
    assert v.runs_needed[0].rerun_ids[0] in text


def test_notes_are_printed_as_given() -> None:
    note = "driver said: a | b ``` c\nsecond line"
    records = dataset({("128KiB", "code-review", "small"): [{"notes": [note]}, {}]})
    text = render_markdown(verdict(records), records, MATRIX)
    assert note in text
    assert "````text\n" + note + "\n````" in text


def test_ignored_records_and_warnings_are_reported() -> None:
    records = [*dataset(), rec("64KiB", "code-review", "small")]
    text = render_markdown(verdict(records), records, MATRIX)
    assert "## Ignored records" in text
    assert "configuration '64KiB' not in the matrix" in text


# -- write_report -----------------------------------------------------------------------


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_write_report_writes_markdown_json_and_valid_pngs(tmp_path: Path) -> None:
    records = dataset({("128KiB", "code-review", "small"): [{}, {"outcome": "harness_error"}]})
    v = verdict(records)
    out = tmp_path / "results" / "sim"
    paths = write_report(v, records, MATRIX, out, stage=None, records_dir=out)
    assert paths.report_md == out / "report.md"
    assert paths.verdict_json == out / "verdict.json"
    assert json.loads(paths.verdict_json.read_text(encoding="utf-8")) == json.loads(
        json.dumps(v.to_json())
    )
    text = paths.report_md.read_text(encoding="utf-8")
    assert text == render_markdown(
        v, records, MATRIX, plot_links=[p.relative_to(out).as_posix() for p in paths.plots]
    )
    assert {p.name for p in paths.plots} == {"input_tokens.png", "iterations.png", "durations.png"}
    for plot in paths.plots:
        width, height = _png_size(plot)
        assert width > 100 and height > 100
        image = matplotlib.image.imread(plot)
        assert image.shape[0] == height and image.shape[1] == width
        assert f"]({plot.relative_to(out).as_posix()})" in text
    leftovers = [p for p in out.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]
    assert leftovers == []


def test_write_report_without_records_still_writes_everything(tmp_path: Path) -> None:
    v = verdict([])
    paths = write_report(v, [], MATRIX, tmp_path, stage=None, records_dir=tmp_path)
    assert "decision `inconclusive`" in paths.report_md.read_text(encoding="utf-8")
    for plot in paths.plots:
        _png_size(plot)


def test_write_report_replaces_an_earlier_report(tmp_path: Path) -> None:
    first = dataset()
    write_report(verdict(first), first, MATRIX, tmp_path, stage=None, records_dir=tmp_path)
    second = dataset({("128KiB", "code-review", "small"): [{"disk_clean": False}, {}]})
    paths = write_report(
        verdict(second), second, MATRIX, tmp_path, stage=None, records_dir=tmp_path
    )
    assert json.loads(paths.verdict_json.read_text(encoding="utf-8"))["decision"] == "32768"


# -- the first line of an incomplete stage ----------------------------------------------


def test_an_incomplete_stage_says_so_in_the_first_line_and_lists_what_is_missing() -> None:
    records = dataset(n=5)[:13]
    v = evaluate(records, MATRIX, resamples=20)
    text = render_markdown(v, records, MATRIX)
    first = text.splitlines()[0]
    assert first == (
        "# Spillover validation: decision `inconclusive` (incomplete: 47 of 60 runs missing)"
    )
    assert "## Missing runs" in text and "## Criteria" not in text
    missing = text[text.index("## Missing runs") : text.index("## Configurations")]
    assert "| 128KiB | code-review/small | 0 / 5 | 1, 2, 3, 4, 5 |" in missing


def test_judged_on_incomplete_data_says_so_in_the_first_line() -> None:
    records = dataset(n=5)[:13]
    v = evaluate(records, MATRIX, allow_incomplete=True, resamples=20)
    text = render_markdown(v, records, MATRIX)
    assert text.splitlines()[0] == (
        f"# Spillover validation: decision `{v.decision}`, judged on incomplete data "
        "(47 of 60 runs missing)"
    )
    assert "**Judged on incomplete data:**" in text and "## Criteria" in text


def test_a_complete_stage_has_a_plain_first_line() -> None:
    records = dataset(n=5)
    v = evaluate(records, MATRIX, resamples=20)
    assert render_markdown(v, records, MATRIX).splitlines()[0] == (
        "# Spillover validation: decision `131072`"
    )


# -- the token plot shows the rule ------------------------------------------------------


def _token_axes(fig: Figure, recipe: str, inp: str) -> Axes:
    return next(ax for ax in fig.axes if ax.get_gid() == f"cell:{recipe}/{inp}")


def _marks(ax: Axes) -> dict[str, str]:
    return {
        str(t.get_gid()).removeprefix("status:"): t.get_text()
        for t in ax.texts
        if str(t.get_gid()).startswith("status:")
    }


def test_token_plot_draws_each_cells_limit_and_marks_pass_and_fail(tmp_path: Path) -> None:
    records = dataset(
        {
            ("off", "code-review", "small"): [{"input_tokens": t} for t in (90, 100, 130)],
            ("128KiB", "code-review", "small"): [{"input_tokens": 110}] * 3,  # == limit: pass
            ("32KiB", "code-review", "small"): [{"input_tokens": 111}] * 3,  # above: fail
            ("off", "code-review", "large"): [{"input_tokens": t} for t in (900, 1000, 1300)],
            ("128KiB", "code-review", "large"): [{"input_tokens": 999}] * 3,  # below: pass
            ("32KiB", "code-review", "large"): [{"input_tokens": 1000}] * 3,  # not below: fail
        },
        n=3,
    )
    v = verdict(records)
    marks = token_marks(v)
    assert marks[("code-review", "small")].limit == 110.0  # 1.10 x off's median 100
    assert not marks[("code-review", "small")].strict
    assert marks[("code-review", "large")].limit == 1000.0  # off's median, strictly below
    assert marks[("code-review", "large")].strict
    assert dict(marks[("code-review", "small")].statuses) == {"128KiB": "pass", "32KiB": "fail"}

    fig = build_figures(records, MATRIX, "sim", v)["input_tokens.png"]
    for inp, limit in (("small", 110.0), ("large", 1000.0)):
        ax = _token_axes(fig, "code-review", inp)
        (line,) = [ln for ln in ax.get_lines() if ln.get_gid() == "limit"]
        assert list(line.get_ydata()) == [limit, limit]
        low, high = ax.get_ylim()
        assert low <= limit <= high
        assert _marks(ax) == {"off": "baseline", "128KiB": "pass", "32KiB": "FAIL"}
    # the other metrics have no limit: criterion 3 is about input tokens only
    other = build_figures(records, MATRIX, "sim", v)["iterations.png"]
    assert not [ln for ax in other.axes for ln in ax.get_lines() if ln.get_gid() == "limit"]

    paths = write_plots(records, MATRIX, "sim", tmp_path, verdict=v)
    token_png = next(p for p in paths if p.name == "input_tokens.png")
    width, height = _png_size(token_png)
    assert matplotlib.image.imread(token_png).shape[:2] == (height, width)


def test_token_plot_of_an_unjudged_stage_has_no_limit() -> None:
    records = dataset(n=5)[:13]
    v = evaluate(records, MATRIX, resamples=20)
    assert token_marks(v) == {}
    fig = build_figures(records, MATRIX, "sim", v)["input_tokens.png"]
    assert not [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == "limit"]


def test_token_plot_shows_every_run_and_marks_the_ones_that_failed(tmp_path: Path) -> None:
    """Issue 26: 32KiB's two failing summarize runs sat under the limit's legend box. Every
    run is inside the axes, nothing is drawn over the data, failed runs are an x."""
    failed = [{"input_tokens": 19017, "outcome": "failed"}] * 2
    records = dataset(
        {
            ("off", "summarize", "document"): [{"input_tokens": 26297}] * 5,
            ("32KiB", "summarize", "document"): failed + [{"input_tokens": 28800}] * 3,
        },
        n=5,
    )
    fig = build_figures(records, MATRIX, "sim", verdict(records))["input_tokens.png"]
    ax = _token_axes(fig, "summarize", "document")
    low, high = ax.get_ylim()
    assert low < 19017 < 28800 < high
    assert ax.get_legend() is None  # the limit is named in the title instead
    assert "limit: median ≤ 28,927" in ax.get_title()
    (marked,) = [c for c in ax.collections if c.get_gid() == "failed:32KiB"]
    assert [tuple(xy)[1] for xy in marked.get_offsets()] == [19017.0, 19017.0]
    assert "x: a run that did not succeed" in fig.get_suptitle()


# -- file modes -------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_report_files_get_the_umasks_mode_like_runs_jsonl(tmp_path: Path, umask: int) -> None:
    records = dataset()
    previous = os.umask(umask)
    try:
        log = RecordLog(tmp_path / "runs.jsonl")
        log.open()
        log.append(records[0])
        paths = write_report(
            verdict(records), records, MATRIX, tmp_path, stage=None, records_dir=tmp_path
        )
    finally:
        os.umask(previous)
    expected = 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "runs.jsonl").stat().st_mode) == expected
    for path in (paths.report_md, paths.verdict_json, *paths.plots):
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


def test_code_review_quality_below_off_is_warned_though_not_a_criterion() -> None:
    """Only summarize quality is a criterion (acceptance.quality_recipes); 32KiB missing
    defects in 3 of its 6 code reviews does not change the decision, but the report
    says so next to the advisory figures, with how sure it is."""
    assert MATRIX.acceptance.quality_recipes == ["summarize"]
    reviews = [c for c in CELLS if c[0] == "code-review"]
    missed = {("32KiB", recipe, inp): [{"quality_ok": False}, {}] for recipe, inp, _ in reviews}
    records = dataset(missed)
    judged = verdict(records)
    text = render_markdown(judged, records, MATRIX)
    n = 2 * len(reviews)
    warning = (
        f"⚠ `code-review` output quality of `32KiB` is {n // 2}/{n} (50%), below `off`'s "
        f"{n}/{n} (100%), modelled by the simulator; one-sided Fisher p = "
    )
    assert warning in text
    assert "`code-review` quality is not an acceptance criterion" in text
    assert text.index(warning) > text.index("## Advisory statistics")
    assert "output quality of `128KiB`" not in text  # as good as off: no warning
    assert judged.configs["32KiB"].criteria["summary_quality"].status == "pass"


def test_no_quality_warning_when_every_configuration_is_as_good_as_off() -> None:
    records = dataset()
    assert "output quality of" not in render_markdown(verdict(records), records, MATRIX)


# -- provenance and measured / modelled labels -------------------------------------------


def test_a_cluster_report_labels_nothing_modelled_and_names_its_profile() -> None:
    from spillover_harness.results.results_dir import StageProvenance

    records = dataset(stage="minikube")
    provenance = StageProvenance(
        harness_version="0.1.0", harness_commit=None, profile="profiles/minikube.yaml"
    )
    text = render_markdown(verdict(records), records, MATRIX, provenance=provenance)
    assert "modelled" not in text
    assert "| median duration (s) |" in text
    assert "| median status report (bytes) |" in text
    line = next(x for x in text.splitlines() if x.startswith("**Provenance:**"))
    assert "commit unknown (the harness ran from no git checkout)" in line
    assert "cluster profile `profiles/minikube.yaml`" in line
    assert "parameter values" not in text  # no simulator on a cluster stage


@pytest.mark.parametrize(
    ("gate", "shown"),
    [
        (
            {"status": "overridden", "flag": "--override-stage1-false", "stage1_decision": "false"},
            "**Stage 1 gate overridden with `--override-stage1-false`** (Stage 1 decided `false`)",
        ),
        (
            {"status": "overridden", "flag": "--override-stage1", "reason": "hotfix 4711"},
            "**Stage 1 gate overridden with `--override-stage1`**: hotfix 4711",
        ),
        (
            {"status": "accepted", "stage1_decision": "131072"},
            "Stage 1 gate passed (Stage 1 decided `131072`)",
        ),
    ],
)
def test_a_dev_report_shows_how_the_stage1_gate_let_it_start(
    gate: dict[str, str], shown: str
) -> None:
    from spillover_harness.results.results_dir import StageProvenance

    records = dataset(stage="dev")
    provenance = StageProvenance.model_validate(
        {"harness_version": "0.1.0", "profile": "dev", "stage1_gate": gate}
    )
    text = render_markdown(verdict(records), records, MATRIX, provenance=provenance)
    line = next(x for x in text.splitlines() if x.startswith("**Provenance:**"))
    assert shown in line


def test_without_provenance_the_report_says_it_was_not_recorded() -> None:
    records = dataset(stage="sim")
    text = render_markdown(verdict(records), records, MATRIX)
    assert "**Provenance:** not recorded" in text


def test_sim_plots_say_their_figures_are_modelled() -> None:
    records = dataset(stage="sim")
    figures = build_figures(records, MATRIX, "sim")
    for figure in figures.values():
        assert "(simulator, modelled)" in figure.get_suptitle()
    cluster = build_figures(dataset(stage="minikube"), MATRIX, "minikube")
    assert all("modelled" not in f.get_suptitle() for f in cluster.values())


def test_a_simulated_platform_labels_its_durations_modelled() -> None:
    """Profile `local`: the simulator runs the steps (durations and status report sizes
    modelled), while the memory is its pods' containers' (measured)."""
    from spillover_harness.results.records import McpHostMemory

    memory = McpHostMemory(peak_bytes=300 << 20, limit_bytes=2 << 30, restarts=0, oom_kills=0)
    records = [r.model_copy(update={"mcp_host_memory": memory}) for r in dataset(stage="minikube")]
    text = render_markdown(verdict(records), records, MATRIX, simulated_platform=True)
    assert "| median duration (s, modelled) |" in text
    assert "| median status report (bytes, modelled) |" in text
    assert "## mcp-host memory\n" in text and "300.0 MiB" in text
    sim = [r.model_copy(update={"mcp_host_memory": memory}) for r in dataset(stage="sim")]
    assert "## mcp-host memory (modelled)\n" in render_markdown(verdict(sim), sim, MATRIX)
