"""A simulated step execution end to end: prompts, tokens, limits, logs, outputs."""

from __future__ import annotations

import json
import math
import statistics
import threading
from functools import cache
from pathlib import Path

import pytest
from spillover_harness.checks import find_spill_entries, judge_output, scan_logs_for_canaries
from spillover_harness.fixtures import Fixture, FixtureSet, build_fixtures
from spillover_harness.sim.metrics import PERSISTED_METRIC, SpilloverMetrics
from spillover_harness.sim.step import run_step
from spillover_harness.sim.steprun import StepLimits, StepRun
from spillover_harness.sim.store import READ_TOOL
from spillover_operator.domain.model import ENABLED_VAR, THRESHOLD_VAR

OFF = {ENABLED_VAR: "false"}
DEFAULT: dict[str, str] = {}
KIB32 = {THRESHOLD_VAR: "32768"}
SEED = 20261130


@cache
def fixtures() -> FixtureSet:
    return build_fixtures(SEED)


def fx(recipe: str, name: str) -> Fixture:
    return fixtures().get(recipe, name)


def step(
    tmp: Path,
    fixture: Fixture,
    env: dict[str, str],
    rep: int = 1,
    **kwargs: object,
) -> StepRun:
    out = tmp / f"{fixture.input_name}-{'-'.join(f'{k}={v}' for k, v in env.items())}-{rep}"
    return run_step(
        fixture=fixture,
        env=env,
        seed=SEED,
        repetition=rep,
        run_id=f"run-{rep}",
        output_dir=out,
        **kwargs,  # type: ignore[arg-type]
    )


def messages(run: StepRun) -> list[dict[str, object]]:
    return [json.loads(x) for x in run.log_lines()]


@pytest.mark.parametrize(
    ("recipe", "name", "env"),
    [
        ("code-review", "small", DEFAULT),
        ("code-review", "medium", DEFAULT),
        ("summarize", "document", DEFAULT),
        ("code-review", "small", KIB32),
    ],
)
def test_prompts_are_byte_for_byte_unchanged_when_nothing_spills(
    tmp_path: Path, recipe: str, name: str, env: dict[str, str]
) -> None:
    off = step(tmp_path, fx(recipe, name), OFF, capture_prompts=True)
    on = step(tmp_path, fx(recipe, name), env, capture_prompts=True)
    assert on.persisted == 0
    assert on.prompts == off.prompts
    assert on.offered_tools == off.offered_tools
    assert all(READ_TOOL not in tools for tools in on.offered_tools)
    assert (on.input_tokens, on.output_tokens) == (off.input_tokens, off.output_tokens)
    assert on.output_text == off.output_text


def test_large_files_spill_and_the_read_tool_is_offered_only_after_the_first_spill(
    tmp_path: Path,
) -> None:
    run = step(tmp_path, fx("code-review", "large"), DEFAULT, capture_prompts=True)
    assert run.outcome == "succeeded"
    assert run.persisted == 3 and run.reads > 0
    events = messages(run)
    first_spill_iteration = min(
        int(str(e["iteration"]))
        for e in events
        if e["msg"] == "tool call finished" and e["spilled"]
    )
    for i, tools in enumerate(run.offered_tools, start=1):
        assert (READ_TOOL in tools) == (i > first_spill_iteration), i
    off = step(tmp_path, fx("code-review", "large"), OFF, capture_prompts=True)
    assert run.prompts[:first_spill_iteration] == off.prompts[:first_spill_iteration]


def test_prompt_is_the_compact_json_request_and_tokens_follow_the_formula(tmp_path: Path) -> None:
    run = step(tmp_path, fx("code-review", "medium"), KIB32, capture_prompts=True)
    for body in run.prompts:
        decoded = json.loads(body)
        assert set(decoded) == {"model", "system", "tools", "messages"}
        again = json.dumps(decoded, ensure_ascii=False, separators=(",", ":")).encode()
        assert again == body
    assert run.prompt_sizes == [len(b) for b in run.prompts]
    assert run.input_tokens == sum(math.ceil(len(b) / 4) for b in run.prompts)
    events = messages(run)
    started = [e for e in events if e["msg"] == "LLM call started"]
    received = [e for e in events if e["msg"] == "LLM response received"]
    assert [e["iteration"] for e in started] == list(range(1, run.iterations + 1))
    assert sum(int(str(e["inputTokens"])) for e in received) == run.input_tokens
    assert sum(int(str(e["outputTokens"])) for e in received) == run.output_tokens
    assert run.output_tokens > 0


def test_a_run_is_deterministic_and_repetitions_vary(tmp_path: Path) -> None:
    a = step(tmp_path / "a", fx("code-review", "large"), DEFAULT, rep=2, capture_prompts=True)
    b = step(tmp_path / "b", fx("code-review", "large"), DEFAULT, rep=2, capture_prompts=True)
    assert a.prompt_digests == b.prompt_digests
    assert (a.input_tokens, a.output_tokens, a.iterations, a.reads) == (
        b.input_tokens,
        b.output_tokens,
        b.iterations,
        b.reads,
    )
    assert a.status_report == b.status_report
    tokens = {
        step(tmp_path, fx("code-review", "large"), DEFAULT, rep=r).input_tokens for r in range(1, 6)
    }
    assert len(tokens) > 1


def test_context_window_limit_fails_the_step(tmp_path: Path) -> None:
    run = step(
        tmp_path,
        fx("code-review", "large"),
        OFF,
        limits=StepLimits(context_window_tokens=60_000),
    )
    assert run.outcome == "failed" and not run.hit_iteration_limit
    assert run.output_text is None
    assert run.error is not None and "context window" in run.error
    failed = [e for e in messages(run) if e["msg"] == "LLM call failed"]
    assert failed and failed[0]["error"] == "context_length_exceeded"
    assert failed[0]["iteration"] == run.iterations


def test_iteration_limit_fails_the_step_with_the_platform_log_line(tmp_path: Path) -> None:
    run = step(tmp_path, fx("code-review", "medium"), DEFAULT, limits=StepLimits(max_iterations=3))
    assert run.outcome == "failed" and run.hit_iteration_limit
    assert run.iterations == 3
    assert [e["msg"] for e in messages(run)].count("Step reached max iterations") == 1
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["result.json"]


def test_cancel_aborts_and_timeout_times_out(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    aborted = step(tmp_path, fx("summarize", "document"), DEFAULT, cancel=cancel)
    assert aborted.outcome == "aborted" and aborted.input_tokens == 0
    timed = step(tmp_path, fx("code-review", "large"), DEFAULT, limits=StepLimits(timeout_s=5.0))
    assert timed.outcome == "timed_out" and timed.output_text is None


@pytest.mark.parametrize(
    ("limits", "outcome"),
    [
        (StepLimits(), "succeeded"),
        (StepLimits(max_iterations=4), "failed"),
        (StepLimits(context_window_tokens=20_000), "failed"),
        (StepLimits(timeout_s=3.0), "timed_out"),
    ],
)
def test_the_store_is_dropped_at_every_end(
    tmp_path: Path, limits: StepLimits, outcome: str
) -> None:
    run = step(tmp_path, fx("code-review", "large"), DEFAULT, limits=limits)
    assert run.outcome == outcome
    dropped = [e for e in messages(run) if e["msg"] == "spillover store dropped"]
    assert len(dropped) == 1 and dropped[0]["reason"] == outcome


def test_observables_logs_status_report_outputs(tmp_path: Path) -> None:
    fixture = fx("code-review", "large")
    metrics = SpilloverMetrics()
    out = tmp_path / "out"
    run = run_step(
        fixture=fixture,
        env=DEFAULT,
        seed=SEED,
        repetition=1,
        run_id="obs",
        output_dir=out,
        metrics=metrics,
    )
    events = messages(run)
    for e in events:
        assert {"ts", "level", "component", "msg", "runId", "stepId", "executionId"} <= set(e)
    report = [e for e in events if e["msg"] == "status report received"]
    assert report[0]["bodyBytes"] == len(run.status_report)
    assert json.loads(run.status_report)["tokensUsed"] == {
        "input": run.input_tokens,
        "output": run.output_tokens,
    }
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "review.md"]
    assert metrics.value(PERSISTED_METRIC, tool="read_file") == run.persisted == 3
    assert scan_logs_for_canaries(run.log_lines(), fixture.canaries) == []
    assert judge_output(run.output_text, fixture)


@pytest.mark.parametrize("env", [OFF, DEFAULT, KIB32])
@pytest.mark.parametrize(
    ("recipe", "name"),
    [
        ("code-review", "small"),
        ("code-review", "medium"),
        ("code-review", "large"),
        ("summarize", "document"),
    ],
)
def test_no_log_line_holds_content_in_any_cell(
    tmp_path: Path, recipe: str, name: str, env: dict[str, str]
) -> None:
    fixture = fx(recipe, name)
    run = step(tmp_path, fixture, env, rep=3)
    assert scan_logs_for_canaries(run.log_lines(), fixture.canaries) == []
    assert find_spill_entries(tmp_path) == []
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == sorted(
        ["result.json", "review.md" if recipe == "code-review" else "summary.md"]
    )


def test_the_model_shows_the_trade_off(tmp_path: Path) -> None:
    """The simulator's design goal: off resends large results; 128 KiB only spills the
    large files; 32 KiB spills medium ones too and pays extra reads for them."""

    def median(recipe: str, name: str, env: dict[str, str]) -> float:
        return statistics.median(
            step(tmp_path, fx(recipe, name), env, rep=r).input_tokens for r in range(1, 6)
        )

    assert median("code-review", "large", DEFAULT) < 0.7 * median("code-review", "large", OFF)
    assert median("code-review", "medium", DEFAULT) == median("code-review", "medium", OFF)
    assert median("code-review", "medium", KIB32) > 1.1 * median("code-review", "medium", OFF)
    assert median("summarize", "document", DEFAULT) == median("summarize", "document", OFF)


def test_a_summary_reads_back_the_end_of_a_spilled_document(tmp_path: Path) -> None:
    fixture = fx("summarize", "document")
    results = [step(tmp_path, fixture, KIB32, rep=r) for r in range(1, 11)]
    complete = [r for r in results if r.reads * 32768 >= fixture.total_bytes()]
    assert complete, "some repetitions read the whole document back"
    assert all(judge_output(r.output_text, fixture) for r in complete)
    assert all(r.persisted == 1 for r in results)
