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
- input tokens of a call = ceil(prompt bytes / 4); output tokens of a call =
  ceil(bytes of the serialized assistant message / 4). A step's tokens are the
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
import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from spillover_harness.fixtures import CODE_REVIEW, Fixture
from spillover_harness.sim.agent import Turn, make_agent
from spillover_harness.sim.config import SpilloverConfig, parse_spillover_env
from spillover_harness.sim.logs import SimClock, StepLog
from spillover_harness.sim.metrics import SpilloverMetrics
from spillover_harness.sim.store import READ_TOOL, SpilloverStore
from spillover_harness.sim.tools import (
    RECIPE_TOOLS,
    SYSTEM_PROMPTS,
    TASKS,
    read_tool_definition,
    run_tool,
)

MODEL = "sim-model-1"
BYTES_PER_TOKEN = 4
DEFAULT_MAX_ITERATIONS = 25
DEFAULT_CONTEXT_WINDOW = 200_000
STEP_IDS = {CODE_REVIEW: "review", "summarize": "summarize"}
OUTPUT_FILES = {CODE_REVIEW: "review.md", "summarize": "summary.md"}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tokens(n_bytes: int) -> int:
    return math.ceil(n_bytes / BYTES_PER_TOKEN)


@dataclass(frozen=True)
class StepLimits:
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    context_window_tokens: int = DEFAULT_CONTEXT_WINDOW
    timeout_s: float | None = None


@dataclass(frozen=True)
class SimFaults:
    """Switches that make the simulated mcp-host misbehave like a broken one.

    Criterion 5 must catch both: `write_spill_to_disk` writes every spilled result
    under `<output dir>/.spill/`; `log_tool_results` logs the content of every
    tool result the spillover interceptor sees (when spillover is enabled).
    """

    write_spill_to_disk: bool = False
    log_tool_results: bool = False


@dataclass
class StepRun:
    """Everything a simulated step execution produced and the harness can observe."""

    run_id: str
    step_id: str
    execution_id: str
    config: SpilloverConfig
    outcome: str = "failed"  # succeeded | failed | aborted | timed_out
    error: str | None = None
    hit_iteration_limit: bool = False
    iterations: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    tools_called: int = 0
    persisted: int = 0
    reads: int = 0
    budget_fallbacks: int = 0
    output_text: str | None = None
    status_report: bytes = b""
    prompt_sizes: list[int] = field(default_factory=list)
    prompt_digests: list[str] = field(default_factory=list)
    prompts: list[bytes] = field(default_factory=list)  # only with capture_prompts
    offered_tools: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log: StepLog | None = None

    def log_lines(self) -> list[str]:
        return self.log.lines() if self.log is not None else []


class _Prompt:
    """The request body, built incrementally (each message serialized once)."""

    def __init__(self, system: str) -> None:
        self._head = f'{{"model":{_dumps(MODEL)},"system":{_dumps(system)},"tools":'
        self._head_bytes = len(self._head.encode("utf-8"))
        self.messages: list[str] = []
        self._messages_bytes = 0

    def append(self, message: dict[str, Any]) -> int:
        text = _dumps(message)
        n = len(text.encode("utf-8"))
        self.messages.append(text)
        self._messages_bytes += n
        return n

    def size(self, tools_json: str) -> int:
        commas = max(0, len(self.messages) - 1)
        return (
            self._head_bytes
            + len(tools_json.encode("utf-8"))
            + len(',"messages":[')
            + self._messages_bytes
            + commas
            + len("]}")
        )

    def render(self, tools_json: str) -> bytes:
        return (self._head + tools_json + ',"messages":[' + ",".join(self.messages) + "]}").encode(
            "utf-8"
        )


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
    faults: SimFaults = SimFaults(),
    metrics: SpilloverMetrics | None = None,
    limits: StepLimits = StepLimits(),
    cancel: threading.Event | None = None,
    log_stream: IO[str] | None = None,
    on_iteration: Callable[[int], None] | None = None,
    capture_prompts: bool = False,
    pace: float = 0.0,
    clock: SimClock | None = None,
) -> StepRun:
    """Run one step execution of `fixture.recipe` on `fixture` with this mcp-host env.

    Writes the step's outputs under `output_dir` (the output file and
    `result.json`). `pace` > 0 makes the call really take `pace` x its simulated
    time (for the HTTP server, so that a run can be watched while it runs).
    """
    recipe = fixture.recipe
    step_id = STEP_IDS.get(recipe, recipe)
    execution_id = execution_id_for(run_id)
    clock = clock or SimClock()
    log = StepLog(
        clock, {"runId": run_id, "stepId": step_id, "executionId": execution_id}, log_stream
    )
    config, warnings = parse_spillover_env(env)
    run = StepRun(run_id, step_id, execution_id, config, log=log)
    output_dir.mkdir(parents=True, exist_ok=True)

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
        run.notes.append(w.message())
    log.info("step", "Step started", recipe=recipe, input=fixture.input_name)

    store = SpilloverStore(
        config,
        step_id,
        execution_id,
        metrics=metrics,
        log=log,
        fault_spill_dir=(output_dir / ".spill") if faults.write_spill_to_disk else None,
        fault_log_results=faults.log_tool_results,
    )
    base_tools = RECIPE_TOOLS[recipe]
    tools_plain = _dumps(base_tools)
    tools_with_read = _dumps([*base_tools, read_tool_definition(config.threshold)])
    prompt = _Prompt(SYSTEM_PROMPTS[recipe])
    prompt.append({"role": "user", "content": TASKS[recipe]})
    agent = make_agent(recipe, agent_seed(seed, recipe, fixture.input_name, repetition))
    call_log: list[dict[str, Any]] = []
    pending: list[str] | None = None

    def wait(seconds: float) -> None:
        clock.advance(seconds)
        if pace > 0 and cancel is not None:
            cancel.wait(seconds * pace)
        elif pace > 0:
            time.sleep(seconds * pace)

    def out_of_time() -> bool:
        return limits.timeout_s is not None and clock.elapsed > limits.timeout_s

    try:
        for iteration in range(1, limits.max_iterations + 1):
            if cancel is not None and cancel.is_set():
                run.outcome, run.error = "aborted", "the step was cancelled"
                log.warn("step", "Step aborted", iteration=iteration)
                break
            offered = tools_with_read if store.read_tool_offered else tools_plain
            size = prompt.size(offered)
            run.iterations = iteration
            run.prompt_sizes.append(size)
            run.offered_tools.append(
                [t["name"] for t in json.loads(offered)] if capture_prompts else []
            )
            if capture_prompts:
                body = prompt.render(offered)
                run.prompts.append(body)
                run.prompt_digests.append(hashlib.sha256(body).hexdigest())
            log.info("step", "LLM call started", iteration=iteration, promptBytes=size)
            in_tokens = tokens(size)
            if in_tokens > limits.context_window_tokens:
                run.outcome = "failed"
                run.error = (
                    f"context window exceeded at iteration {iteration}: "
                    f"{in_tokens} tokens > {limits.context_window_tokens}"
                )
                log.error(
                    "step",
                    "LLM call failed",
                    iteration=iteration,
                    error="context_length_exceeded",
                    promptTokens=in_tokens,
                    contextWindow=limits.context_window_tokens,
                )
                break
            turn: Turn = next(agent) if pending is None else agent.send(pending)
            assistant: dict[str, Any] = {"role": "assistant", "content": turn.text}
            if turn.calls:
                assistant["tool_calls"] = [
                    {"id": c.id, "name": c.name, "arguments": _dumps(c.arguments)}
                    for c in turn.calls
                ]
            out_tokens = tokens(len(_dumps(assistant).encode("utf-8")))
            run.input_tokens += in_tokens
            run.output_tokens += out_tokens
            wait(0.8 + in_tokens / 12_000 + out_tokens / 90)
            log.info(
                "step",
                "LLM response received",
                iteration=iteration,
                inputTokens=in_tokens,
                outputTokens=out_tokens,
                toolCalls=len(turn.calls),
            )
            if turn.final:
                run.output_text = turn.text
                run.outcome = "succeeded"
                break
            prompt.append(assistant)
            pending = []
            for call in turn.calls:
                run.tools_called += 1
                if call.name == READ_TOOL and store.read_tool_offered:
                    read = store.read(call.arguments)
                    content, spilled, result_bytes = read.content, False, read.returned_bytes
                    wait(0.01)
                elif call.name == READ_TOOL:
                    content = _dumps({"error": f"unknown tool: {READ_TOOL}"})
                    spilled, result_bytes = False, 0
                else:
                    handled = store.handle_result(
                        call.name, call.id, run_tool(fixture, call.name, call.arguments)
                    )
                    content, spilled, result_bytes = handled.content, handled.spilled, handled.size
                    wait(0.05 + handled.size / 20e6)
                log.info(
                    "step",
                    "tool call finished",
                    iteration=iteration,
                    tool=call.name,
                    callId=call.id,
                    resultBytes=result_bytes,
                    spilled=spilled,
                )
                call_log.append(
                    {
                        "id": call.id,
                        "tool": call.name,
                        "resultBytes": result_bytes,
                        "spilled": spilled,
                    }
                )
                prompt.append(
                    {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
                )
                pending.append(content)
            if on_iteration is not None:
                on_iteration(iteration)
            if out_of_time():
                run.outcome = "timed_out"
                run.error = f"the step ran past its timeout of {limits.timeout_s} s"
                log.error("step", "Step timed out", iteration=iteration)
                break
        else:
            run.outcome = "failed"
            run.hit_iteration_limit = True
            run.error = f"reached the iteration limit ({limits.max_iterations})"
            log.warn("step", "Step reached max iterations", maxIterations=limits.max_iterations)
        if run.outcome == "succeeded" and out_of_time():
            run.outcome = "timed_out"
            run.output_text = None
            run.error = f"the step ran past its timeout of {limits.timeout_s} s"
            log.error("step", "Step timed out", iteration=run.iterations)
    finally:
        agent.close()
        store.drop(run.outcome)
        run.persisted = store.persisted
        run.reads = store.reads
        run.budget_fallbacks = store.budget_fallbacks

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

    # The step's outputs (what the recipe writes to its output directory).
    if run.output_text is not None:
        (output_dir / OUTPUT_FILES.get(recipe, "output.md")).write_text(
            run.output_text, encoding="utf-8"
        )
    result = {
        "runId": run_id,
        "stepId": step_id,
        "outcome": run.outcome,
        "error": run.error,
        "iterations": run.iterations,
        "hitIterationLimit": run.hit_iteration_limit,
        "tokensUsed": {"input": run.input_tokens, "output": run.output_tokens},
        "toolsCalled": run.tools_called,
        "durationSeconds": run.duration_s,
    }
    (output_dir / "result.json").write_text(_dumps(result) + "\n", encoding="utf-8")

    # The status report the step sends to the coordinator (its size is `bodyBytes`).
    report = {
        **result,
        "executionId": execution_id,
        "recipe": recipe,
        "input": fixture.input_name,
        "toolCalls": call_log,
        "output": run.output_text,
    }
    run.status_report = _dumps(report).encode("utf-8")
    log.info(
        "coordinator",
        "status report received",
        bodyBytes=len(run.status_report),
        outcome=run.outcome,
    )
    return run
