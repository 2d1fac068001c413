"""One simulated step execution: the platform's agentic loop with the mcp-host's spillover.

Loop (like the platform's workflow step): render the prompt, call the "LLM" (the
scripted agent), run the tool calls it asked for through the mcp-host (the
spillover store intercepts every result), append the tool messages, repeat.

Prompt and tokens (see docs/simulator.md):
- The prompt sent at iteration i is the compact JSON request body
  `{"model":...,"system":...,"tools":[...],"messages":[...]}` (json.dumps with
  separators (",", ":"), ensure_ascii=False), UTF-8 encoded. `messages` holds the
  task, then for every earlier iteration the assistant message (text + tool calls)
  and one tool message per call whose `content` is what the mcp-host returned
  (the serialized result, its spillover summary, or a read result).
- input tokens of a call = ceil(prompt bytes / bytes_per_token); output tokens of a
  call = ceil(bytes of the serialized assistant message / bytes_per_token), 4 bytes a
  token by default (`model.bytes_per_token`). A step's tokens are the
  sums over the calls that got a response.
- The context window is 200,000 tokens: a prompt above it fails the call and the
  step (outcome `failed`). After `max_iterations` calls that all asked for tools the
  step stops with `Step reached max iterations` (outcome `failed`).
- Simulated time: an LLM call takes 0.8 s + input tokens / 12,000 + output tokens /
  90 s; a tool call 0.05 s + result bytes / 20 MB/s; a spillover read 0.01 s. With a
  timeout, a step whose simulated time passes it ends `timed_out`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from spillover_harness.fixtures import CODE_REVIEW, Fixture
from spillover_harness.plan.memory_model import MemoryModel
from spillover_harness.plan.sim_model import SimModel
from spillover_harness.sim.config import ConfigWarning, SpilloverConfig, parse_spillover_env
from spillover_harness.sim.handoff import HandoffSettings, HandoffStore
from spillover_harness.sim.logs import SimClock, StepLog
from spillover_harness.sim.loop import LoopControls, StepLoop
from spillover_harness.sim.metrics import SpilloverMetrics
from spillover_harness.sim.prompt import dumps
from spillover_harness.sim.resultstore import ResultStore
from spillover_harness.sim.steprun import (
    SimFaults,
    StepLimits,
    StepRun,
)
from spillover_harness.sim.store import SpilloverStore

__all__ = [
    "OUTPUT_FILES",
    "STEP_IDS",
    "agent_seed",
    "execution_id_for",
    "run_step",
]

STEP_IDS = {CODE_REVIEW: "review", "summarize": "summarize"}
OUTPUT_FILES = {CODE_REVIEW: "review.md", "summarize": "summary.md"}


def agent_seed(seed: int, recipe: str, input_name: str, repetition: int) -> str:
    return f"{seed}/{recipe}/{input_name}/{repetition}"


def execution_id_for(run_id: str) -> str:
    return "exec-" + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:12]


def run_step(
    *,
    fixture: Fixture,
    env: Mapping[str, str],
    seed: int,
    repetition: int,
    run_id: str,
    output_dir: Path,
    faults: SimFaults = SimFaults(),  # noqa: B008 (frozen, immutable)
    metrics: SpilloverMetrics | None = None,
    limits: StepLimits = StepLimits(),  # noqa: B008 (frozen, immutable)
    cancel: threading.Event | None = None,
    log_stream: IO[str] | None = None,
    on_iteration: Callable[[int], None] | None = None,
    capture_prompts: bool = False,
    pace: float = 0.0,
    clock: SimClock | None = None,
    model: SimModel = SimModel(),  # noqa: B008 (frozen, immutable)
    handoff: HandoffSettings | None = None,
    memory: MemoryModel = MemoryModel(),  # noqa: B008 (frozen, immutable)
) -> StepRun:
    """Run one step execution of `fixture.recipe` on `fixture` with this mcp-host env.

    Writes the step's outputs under `output_dir` (the output file and
    `result.json`). `model` is how the agent reads (docs/simulator.md §1.5); its
    iteration cap and context window are the caller's to put into `limits`
    (`StepLimits.from_model`). With `handoff`, tool results go through the handoff
    cache (docs/simulator.md §8) instead of the spillover store. `memory` is the
    mcp-host's memory model (plan/memory_model.py): past its limit the run is OOM-killed.
    `pace` > 0 makes the call really take `pace` x its simulated time (for the HTTP
    server, so that a run can be watched while it runs).
    """
    if faults.store_overhead is not None:  # FAULT: the store costs more per byte
        memory = replace(memory, store_overhead=faults.store_overhead)
    step_id = STEP_IDS.get(fixture.recipe, fixture.recipe)
    execution_id = execution_id_for(run_id)
    clock = clock or SimClock()
    log = StepLog(
        clock, {"runId": run_id, "stepId": step_id, "executionId": execution_id}, log_stream
    )
    config, warnings = parse_spillover_env(
        {} if faults.ignore_env else env, default_threshold=faults.default_threshold
    )
    run = StepRun(run_id, step_id, execution_id, config, log=log)
    output_dir.mkdir(parents=True, exist_ok=True)
    _log_configuration(log, config, warnings, run.notes)
    log.info("step", "Step started", recipe=fixture.recipe, input=fixture.input_name)

    store: ResultStore
    if handoff is not None:
        log.info(
            "mcp-host",
            "handoff cache configuration",
            thresholdTokens=handoff.threshold_tokens,
            maxEntries=handoff.max_entries,
            previewChars=handoff.preview_chars,
        )
        store = HandoffStore(handoff, config, step_id, execution_id, metrics=metrics, log=log)
    else:
        store = SpilloverStore(
            config,
            step_id,
            execution_id,
            metrics=metrics,
            log=log,
            fault_spill_dir=(output_dir / ".spill") if faults.write_spill_to_disk else None,
            fault_log_results=faults.log_tool_results,
            fault_first_party=faults.feed_first_party,
            fault_leak=faults.store_leak,
            fault_budget_unreported=faults.budget_unreported,
            fault_read_denied=faults.read_tool_denied,
            head_bytes=model.head_bytes,
            tail_bytes=model.tail_bytes,
            hint_depth=model.structure_hint_depth,
        )
    loop = StepLoop(
        fixture,
        agent_seed(seed, fixture.recipe, fixture.input_name, repetition),
        run,
        store,
        log,
        clock,
        LoopControls(limits, cancel, on_iteration, capture_prompts, pace, model, memory),
    )
    loop.run_to_end()
    _finish(run, log, clock)
    spilled = loop.spilled if faults.status_report_grows else None
    _write_outputs(run, fixture, output_dir, loop.call_log, log, spilled)
    return run


def _log_configuration(
    log: StepLog, config: SpilloverConfig, warnings: list[ConfigWarning], notes: list[str]
) -> None:
    """What the mcp-host logs at start: its configuration and each invalid variable."""
    log.info(
        "mcp-host",
        "spillover configuration",
        enabled=config.enabled,
        thresholdBytes=config.threshold,
        budgetBytes=config.budget,
    )
    for w in warnings:
        log.warn(
            "mcp-host",
            "invalid spillover configuration; using the default",
            variable=w.variable,
            value=w.value,
            default=w.default,
            reason=w.reason,
        )
        notes.append(w.message())


def _finish(run: StepRun, log: StepLog, clock: SimClock) -> None:
    """The step's duration and closing log line; its error becomes a note."""
    run.duration_s = round(clock.elapsed, 3)
    if run.error:
        run.notes.append(run.error)
    log.info(
        "step",
        "Step finished",
        outcome=run.outcome,
        iterations=run.iterations,
        inputTokens=run.input_tokens,
        outputTokens=run.output_tokens,
        durationSeconds=run.duration_s,
    )


def _write_outputs(
    run: StepRun,
    fixture: Fixture,
    output_dir: Path,
    call_log: list[dict[str, Any]],
    log: StepLog,
    spilled: list[str] | None = None,
) -> None:
    """What the recipe writes to its output directory, and the status report it sends
    to the coordinator (its size is the record's `status_report_bytes`). `spilled`: the
    summaries of the stored results, copied into the report by a faulty mcp-host only
    (`status_report_grows`: the report then grows with every spill)."""
    if run.output_text is not None:
        (output_dir / OUTPUT_FILES.get(fixture.recipe, "output.md")).write_text(
            run.output_text, encoding="utf-8"
        )
    result = {
        "runId": run.run_id,
        "stepId": run.step_id,
        "outcome": run.outcome,
        "error": run.error,
        "iterations": run.iterations,
        "hitIterationLimit": run.hit_iteration_limit,
        "tokensUsed": {"input": run.input_tokens, "output": run.output_tokens},
        "toolsCalled": run.tools_called,
        "durationSeconds": run.duration_s,
    }
    (output_dir / "result.json").write_text(dumps(result) + "\n", encoding="utf-8")
    report: dict[str, Any] = {
        **result,
        "executionId": run.execution_id,
        "recipe": fixture.recipe,
        "input": fixture.input_name,
        "toolCalls": call_log,
        "output": run.output_text,
    }
    if spilled:  # FAULT: the report carries every stored result's summary
        report["spillover"] = spilled
    run.status_report = dumps(report).encode("utf-8")
    log.info(
        "coordinator",
        "status report received",
        bodyBytes=len(run.status_report),
        outcome=run.outcome,
    )
