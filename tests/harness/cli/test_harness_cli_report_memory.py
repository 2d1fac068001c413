"""`spillover-harness report` and memory (issue 27): verdict.json carries each
configuration's memory against the baseline, the headroom from the lane and the leak;
a memory-lane.json with a key twice is refused and a broken one is named in the
report, never silently dropped (the memory section and the verdict say what is wrong).

Hand-made records (a cluster stage's, with block figures) and lane files, through the
CLI as a user runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness_cli import Run
from record_builders import make_record
from spillover_harness.results.records import McpHostMemory

MIB = 1024 * 1024
LIMIT = 2048 * MIB


def good(_config: str) -> dict[str, Any]:
    return {"input_tokens": 1000}


def _records(tmp_path: Path, filled: int | None = 1) -> Path:
    """off's and 128KiB's runs of the lane's cell; `filled`: 128KiB's `budget_inline`
    there (1: its budget filled, the worst cell a headroom is computed at)."""

    def memory(
        peak: int, block: int, start: int, end: int, source: str | None = None
    ) -> McpHostMemory:
        return McpHostMemory(
            peak_source=source,
            peak_bytes=peak * MIB,
            limit_bytes=LIMIT,
            restarts=0,
            oom_kills=0,
            block=block,
            start_bytes=start * MIB,
            end_bytes=end * MIB,
        )

    records = [
        make_record(good, "off", "code-review", "large", stage="minikube", repetition=1,
                    mcp_host_memory=memory(400, 1, 160, 161)),
        make_record(good, "off", "code-review", "large", stage="minikube", repetition=2,
                    outcome="failed", mcp_host_memory=memory(400, 1, 160, 161)),
        make_record(good, "128KiB", "code-review", "large", stage="minikube", repetition=1,
                    mcp_host_memory=memory(428, 2, 161, 173), budget_inline=filled),
    ]  # fmt: skip
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records), encoding="utf-8")
    return path


POINT = '{{"config": "128KiB", "executions": {n}, "peak_bytes": {peak}, "limit_bytes": {limit}}}'


def _lane(points: list[str]) -> str:
    return '{"recipe": "code-review", "input": "large", "points": [' + ", ".join(points) + "]}"


def _report(cli: Run, records: Path) -> tuple[int, str, str, str, dict[str, Any]]:
    code, out, err = cli(["report", "--records", str(records), "--out", str(records.parent)])
    report = (records.parent / "report.md").read_text(encoding="utf-8")
    verdict = json.loads((records.parent / "verdict.json").read_text(encoding="utf-8"))
    return code, out, err, report, verdict


def test_verdict_carries_memory_against_off_headroom_and_leak(cli: Run, tmp_path: Path) -> None:
    records = _records(tmp_path)
    peaks = {1: 600, 2: 800, 4: 1200}  # 400 MiB + 200 MiB x N: (2048 - 400) / 200 = 8.24
    lane = _lane([POINT.format(n=n, peak=p * MIB, limit=LIMIT) for n, p in peaks.items()])
    (tmp_path / "memory-lane.json").write_text(lane, encoding="utf-8")
    _, out, _, report, verdict = _report(cli, records)
    memory = verdict["memory"]
    assert memory["source"] == "measured" and memory["baseline"] == "off"
    spill = memory["configs"]["128KiB"]
    assert spill["peak_bytes"] == 428 * MIB and spill["limit_bytes"] == LIMIT
    assert spill["ratio_to_baseline"] == 1.07  # 428 / 400, the completed off run only
    assert spill["headroom_executions"] == 8 and spill["per_execution_bytes"] == 200 * MIB
    assert spill["leak_bytes"] == 12 * MIB and memory["configs"]["off"]["leak_bytes"] == MIB
    assert memory["configs"]["off"]["runs_left_out"] == 1
    assert "1 run(s) of off ended early" in memory["comparison"]
    assert memory["claim_ratio"] == 1.07 and memory["leak_tolerance_bytes"] == 4 * MIB
    assert (
        spill["claim"] == "not measured" and "no figure of the store" in spill["reasons"]["claim"]
    )
    assert spill["leak"] == "leak" and memory["configs"]["off"]["leak"] == "none"
    assert (
        "| 128KiB | 428.0 MiB | x1.070 | not measured | 8 (extrapolated past the N = 4 measured) "
        "| leak (+12.0 MiB) | 1 / 0 |"
    ) in report
    assert "A peak read from Prometheus is a lower bound" in report
    assert "  128KiB: peak 428.0 MiB (x1.070 off), limit 2,048.0 MiB, headroom 8" in out


@pytest.mark.parametrize(
    ("filled", "said"), [(0, "never filled the budget"), (None, "was not measured")]
)
def test_no_headroom_from_a_lane_cell_that_did_not_fill_the_budget(
    cli: Run, tmp_path: Path, filled: int | None, said: str
) -> None:
    """A step holds the most with a full store: a line through a cell that never filled
    it (or where that was not measured) would promise room a full budget does not leave."""
    records = _records(tmp_path, filled)
    lane = _lane(
        [POINT.format(n=n, peak=p * MIB, limit=LIMIT) for n, p in {1: 600, 2: 800}.items()]
    )
    (tmp_path / "memory-lane.json").write_text(lane, encoding="utf-8")
    _, out, _, _, verdict = _report(cli, records)
    spill = verdict["memory"]["configs"]["128KiB"]
    assert spill["headroom_executions"] is None and spill["per_execution_bytes"] is None
    assert said in spill["reasons"]["headroom_executions"]
    assert "memory.lane" in spill["reasons"]["headroom_executions"] or filled is None
    assert "128KiB: peak 428.0 MiB (x1.070 off), limit 2,048.0 MiB, headroom not measured" in out


def test_lane_points_with_executions_that_ended_early_feed_no_headroom(
    cli: Run, tmp_path: Path
) -> None:
    """`make memory` once printed "off: headroom 6013" from lane runs that died of a
    context overflow at iteration 3: such points are left out of the line."""
    records = _records(tmp_path)
    early = '{{"config": "128KiB", "executions": {n}, "peak_bytes": {p}, "limit_bytes": {l}, '
    early += '"ended_early": {n}}}'
    points = [early.format(n=n, p=(200 + n) * MIB, l=LIMIT) for n in (1, 2, 4)]
    (tmp_path / "memory-lane.json").write_text(_lane(points), encoding="utf-8")
    _, _, _, _, verdict = _report(cli, records)
    spill = verdict["memory"]["configs"]["128KiB"]
    assert spill["headroom_executions"] is None
    assert "ended early (N = 1: 1, N = 2: 2, N = 4: 4)" in spill["reasons"]["headroom_executions"]
    assert verdict["memory"]["lane_problem"] is None


def test_a_lane_file_with_a_key_twice_is_refused_and_said(cli: Run, tmp_path: Path) -> None:
    records = _records(tmp_path)
    # the second peak_bytes would silently replace the first, and its OOM warning with it
    twice = '{"config": "128KiB", "executions": 4, "peak_bytes": 9999999999, ' + (
        f'"peak_bytes": {MIB}, "limit_bytes": {LIMIT}}}'
    )
    (tmp_path / "memory-lane.json").write_text(_lane([twice]), encoding="utf-8")
    _, out, _, report, verdict = _report(cli, records)
    assert verdict["memory"]["lane_problem"] == "the key 'peak_bytes' appears twice in one object"
    assert "`memory-lane.json` cannot be read: the key 'peak_bytes' appears twice" in report
    assert "memory-lane.json cannot be read: the key 'peak_bytes' appears twice" in out
    assert "**Concurrency lane**" not in report


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not JSON: Expecting property name enclosed in double quotes at line 1"),
        ('{"recipe": "code-review"}', "not a memory lane: expected recipe, input and points"),
        (_lane([POINT.format(n=2, peak=1, limit=2)] * 2), "the point 128KiB x2 is listed twice"),
        (_lane([POINT.format(n=2, peak=-1, limit=2)]), "must be non-negative integers"),
        (
            _lane(
                [
                    '{"config": "x", "executions": 1, "peak_bytes": 1, "limit_bytes": 2, '
                    '"ended_early": 2}'
                ]
            ),
            "more executions ended early (2) than it ran",
        ),
    ],
)
def test_a_broken_lane_file_is_named_in_the_memory_section(
    cli: Run, tmp_path: Path, text: str, said: str
) -> None:
    records = _records(tmp_path)
    (tmp_path / "memory-lane.json").write_text(text, encoding="utf-8")
    _, _, _, report, verdict = _report(cli, records)
    assert said in verdict["memory"]["lane_problem"]
    warning = [line for line in report.splitlines() if "`memory-lane.json` cannot be read" in line]
    assert len(warning) == 1 and said in warning[0]
    assert verdict["memory"]["configs"]["128KiB"]["headroom_executions"] is None


def test_a_broken_lane_file_shows_even_without_memory_records(cli: Run, tmp_path: Path) -> None:
    records = tmp_path / "runs.jsonl"
    plain = make_record(good, "off", "code-review", "large", stage="minikube", repetition=1)
    records.write_text(json.dumps(plain.to_json()) + "\n", encoding="utf-8")
    (tmp_path / "memory-lane.json").write_text("[]", encoding="utf-8")
    _, _, _, report, _ = _report(cli, records)
    assert "## mcp-host memory" in report
    assert "`memory-lane.json` cannot be read: not a memory lane" in report


def test_the_lower_bound_names_the_step_each_peak_was_sampled_at(cli: Run, tmp_path: Path) -> None:
    """The blocks' peaks come from Prometheus at its scrape interval, the lane's from the
    kubelet Summary every second where it was readable: the sentence says which."""
    records = _records(tmp_path)
    lines = records.read_text(encoding="utf-8").splitlines()
    sourced = []
    for line in lines:
        data = json.loads(line)
        data["mcp_host_memory"]["peak_source"] = "prometheus@30s"
        sourced.append(json.dumps(data))
    records.write_text("\n".join(sourced) + "\n", encoding="utf-8")
    kubelet = POINT.format(n=1, peak=600 * MIB, limit=LIMIT)[:-1] + ', "peak_source": '
    points = [
        kubelet + '"kubelet-summary@1s"}',
        POINT.format(n=2, peak=800 * MIB, limit=LIMIT)[:-1] + ', "peak_source": "prometheus@30s"}',
    ]
    (tmp_path / "memory-lane.json").write_text(_lane(points), encoding="utf-8")
    _, _, _, report, _ = _report(cli, records)
    assert (
        "- A measured peak is a lower bound: the highest sample taken, Prometheus' scrapes "
        "every 30 s (`prometheus@30s`) for the configuration blocks and the concurrency "
        "lane; the kubelet Summary API read every 1 s (`kubelet-summary@1s`) for the "
        "concurrency lane. A spike between two samples is not seen."
    ) in report
    assert "A peak read from Prometheus" not in report
    assert "| 128KiB | 1 | 600.0 MiB | 2,048.0 MiB | 29% | `kubelet-summary@1s` |" in report
    assert "| 128KiB | 2 | 800.0 MiB | 2,048.0 MiB | 39% | `prometheus@30s` |" in report


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"peak_bytes": 5 * LIMIT}, "above its limit of 2147483648 with no OOM kill"),
        ({"limit_bytes": 0}, "a memory limit of 0"),
        ({"start_bytes": 10 * 1024 * MIB}, "at the start (10737418240 bytes) more than twice"),
    ],
)
def test_impossible_memory_figures_are_flagged_not_reported(
    cli: Run, tmp_path: Path, edit: dict[str, int], said: str
) -> None:
    """A succeeded run at 5x its limit with no OOM kill, a limit of 0, a start above the
    peak: no figure is built on them (no headroom warning, no -10 GB leak); the memory
    section says which run contradicts itself."""
    records = _records(tmp_path)
    lines = records.read_text(encoding="utf-8").splitlines()
    spill = json.loads(lines[2])
    spill["mcp_host_memory"].update(edit)
    lines[2] = json.dumps(spill)
    records.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, _, _, report, verdict = _report(cli, records)
    figures = verdict["memory"]["configs"]["128KiB"]
    assert figures["peak_bytes"] is None and figures["leak_bytes"] is None
    assert figures["ratio_to_baseline"] is None
    assert said in figures["reasons"]["peak_bytes"]
    assert "contradiction: " in figures["reasons"]["leak_bytes"]
    assert said in report and "-10" not in report


def test_a_baseline_peak_of_0_is_a_contradiction_not_unmeasured(cli: Run, tmp_path: Path) -> None:
    records = _records(tmp_path)
    lines = records.read_text(encoding="utf-8").splitlines()
    off = json.loads(lines[0])
    off["mcp_host_memory"]["peak_bytes"] = 0
    off["mcp_host_memory"]["start_bytes"] = 0
    lines[0] = json.dumps(off)
    records.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, _, _, _, verdict = _report(cli, records)
    reason = verdict["memory"]["configs"]["128KiB"]["reasons"]["ratio_to_baseline"]
    assert reason == "contradiction: off's peak was measured as 0 bytes"
