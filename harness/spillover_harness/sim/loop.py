"""The agentic loop of one simulated step: call the "LLM", run its tool calls, repeat.

Every tool result goes through the step's spillover store; the loop keeps the
prompt, the simulated clock and the limits (docs/simulator.md §1.4).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spillover_harness.fixtures import Fixture
from spillover_harness.plan.memory_model import MemoryModel
from spillover_harness.plan.sim_model import SimModel
from spillover_harness.sim.agent import ToolCall, Turn, make_agent
from spillover_harness.sim.logs import SimClock, StepLog
from spillover_harness.sim.prompt import Prompt, dumps, tokens
from spillover_harness.sim.resultstore import ResultStore
from spillover_harness.sim.steprun import StepLimits, StepRun
from spillover_harness.sim.tools import RECIPE_TOOLS, SYSTEM_PROMPTS, TASKS, run_tool

__all__ = ["LoopControls", "StepLoop"]

# Simulated time (docs/simulator.md §1.4).
LLM_CALL_S = 0.8
LLM_INPUT_TOKENS_PER_S = 12_000
LLM_OUTPUT_TOKENS_PER_S = 90
TOOL_CALL_S = 0.05
TOOL_RESULT_BYTES_PER_S = 20e6
SPILLOVER_READ_S = 0.01


@dataclass(frozen=True)
class LoopControls:
    """How the caller steers a running step: its limits, cancellation, pace and hooks."""

    limits: StepLimits
    cancel: threading.Event | None
    on_iteration: Callable[[int], None] | None
    capture_prompts: bool
    pace: float
    model: SimModel = SimModel()  # noqa: RUF009 (frozen, immutable)
    memory: MemoryModel = MemoryModel()  # noqa: RUF009 (frozen, immutable)


@dataclass(frozen=True)
class _ToolResult:
    """What one tool call gave the model (the tool message's content) and its size."""

    content: str
    spilled: bool
    result_bytes: int


class StepLoop:
    """The agentic loop of one step execution and the state its iterations share.

    Each iteration calls the "LLM" (the scripted agent) with the prompt so far, then
    runs the tool calls it asked for through the spillover store; the loop ends when
    the agent answers without tools, a limit stops it, or the caller cancels it.
    """

    def __init__(
        self,
        fixture: Fixture,
        seed: str,
        run: StepRun,
        store: ResultStore,
        log: StepLog,
        clock: SimClock,
        controls: LoopControls,
    ) -> None:
        recipe = fixture.recipe
        self.fixture = fixture
        self.run = run
        self.store = store
        self.log = log
        self.clock = clock
        self.controls = controls
        base_tools = RECIPE_TOOLS[recipe]
        self.tools_plain = dumps(base_tools)
        self.tools_with_read = dumps([*base_tools, store.tool_definition()])
        self.prompt = Prompt(SYSTEM_PROMPTS[recipe])
        self.prompt.append({"role": "user", "content": TASKS[recipe]})
        self.agent = make_agent(recipe, seed, controls.model)
        self.call_log: list[dict[str, Any]] = []  # the status report's `toolCalls`
        self.spilled: list[str] = []  # the summaries the model got for stored results
        self.pending: list[str] | None = None  # the tool messages the agent has not seen yet
        run.memory_trace.append((0.0, self._held()))

    def run_to_end(self) -> None:
        """Iterate until the step is over; the store is dropped however it ends."""
        run, limits = self.run, self.controls.limits
        try:
            for iteration in range(1, limits.max_iterations + 1):
                if self._iteration(iteration):
                    break
            else:
                run.outcome = "failed"
                run.hit_iteration_limit = True
                run.error = f"reached the iteration limit ({limits.max_iterations})"
                self.log.warn(
                    "step", "Step reached max iterations", maxIterations=limits.max_iterations
                )
            if run.outcome == "succeeded" and self._out_of_time():
                run.output_text = None
                self._time_out(run.iterations)
        finally:
            self.agent.close()
            self.store.drop(run.outcome)
            memory = self.controls.memory
            run.store_peak_bytes = int(getattr(self.store, "peak_held_bytes", 0))
            run.store_peak_cost = memory.store_cost(run.store_peak_bytes)
            # freed with the execution, but for what a leaking store still holds
            run.leaked_bytes = memory.store_cost(int(getattr(self.store, "held_bytes", 0)))
            run.memory_trace.append((self.clock.elapsed, run.leaked_bytes))
            peak = memory.working_set(max(held for _, held in run.memory_trace))
            run.peak_bytes = min(peak, memory.limit_bytes)
            run.persisted = self.store.persisted
            run.reads = self.store.reads
            run.budget_fallbacks = self.store.budget_fallbacks
            run.cache_evictions = getattr(self.store, "evictions", None)
            run.cache_ref_misses = getattr(self.store, "ref_misses", None)

    # -- one iteration -------------------------------------------------------------

    def _iteration(self, iteration: int) -> bool:
        """One LLM call and the tool calls it asked for. True when the step is over."""
        if self._cancelled(iteration):
            return True
        in_tokens = tokens(self._send_prompt(iteration), self.controls.model.bytes_per_token)
        if self._over_context_window(iteration, in_tokens):
            return True
        turn, assistant = self._call_llm(iteration, in_tokens)
        if turn.final:
            self.run.output_text = turn.text
            self.run.outcome = "succeeded"
            return True
        self.prompt.append(assistant)
        self.pending = []
        for call in turn.calls:
            self.pending.append(self._tool_call(iteration, call))
            if self._out_of_memory(iteration):
                return True
        if self.controls.on_iteration is not None:
            self.controls.on_iteration(iteration)
        if self._out_of_time():
            self._time_out(iteration)
            return True
        return False

    def _send_prompt(self, iteration: int) -> int:
        """Record the prompt of this call (its size; the body with capture_prompts)."""
        run, capture = self.run, self.controls.capture_prompts
        offered = self.tools_with_read if self.store.read_tool_offered else self.tools_plain
        size = self.prompt.size(offered)
        run.iterations = iteration
        run.prompt_sizes.append(size)
        run.offered_tools.append([t["name"] for t in json.loads(offered)] if capture else [])
        if capture:
            body = self.prompt.render(offered)
            run.prompts.append(body)
            run.prompt_digests.append(hashlib.sha256(body).hexdigest())
        self.log.info("step", "LLM call started", iteration=iteration, promptBytes=size)
        return size

    def _call_llm(self, iteration: int, in_tokens: int) -> tuple[Turn, dict[str, Any]]:
        """The agent's answer to the tool messages it has not seen yet, and its cost."""
        turn: Turn = next(self.agent) if self.pending is None else self.agent.send(self.pending)
        assistant: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if turn.calls:
            assistant["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": dumps(c.arguments)} for c in turn.calls
            ]
        out_tokens = tokens(
            len(dumps(assistant).encode("utf-8")), self.controls.model.bytes_per_token
        )
        self.run.input_tokens += in_tokens
        self.run.output_tokens += out_tokens
        self._wait(
            LLM_CALL_S + in_tokens / LLM_INPUT_TOKENS_PER_S + out_tokens / LLM_OUTPUT_TOKENS_PER_S
        )
        self.log.info(
            "step",
            "LLM response received",
            iteration=iteration,
            inputTokens=in_tokens,
            outputTokens=out_tokens,
            toolCalls=len(turn.calls),
        )
        return turn, assistant

    # -- tool calls ------------------------------------------------------------------

    def _tool_call(self, iteration: int, call: ToolCall) -> str:
        """Run one tool call; its tool message goes into the prompt. Returns its content."""
        self.run.tools_called += 1
        read = call.name == self.store.read_tool
        result = self._read_spilled(call) if read else self._run_tool(call)
        self.log.info(
            "step",
            "tool call finished",
            iteration=iteration,
            tool=call.name,
            callId=call.id,
            resultBytes=result.result_bytes,
            spilled=result.spilled,
        )
        self.call_log.append(
            {
                "id": call.id,
                "tool": call.name,
                "resultBytes": result.result_bytes,
                "spilled": result.spilled,
            }
        )
        if result.spilled:
            self.spilled.append(result.content)
        self.prompt.append(
            {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.content}
        )
        return result.content

    def _run_tool(self, call: ToolCall) -> _ToolResult:
        """A recipe tool: its result goes through the spillover store."""
        handled = self.store.handle_result(
            call.name, call.id, run_tool(self.fixture, call.name, call.arguments)
        )
        self._wait(TOOL_CALL_S + handled.size / TOOL_RESULT_BYTES_PER_S)
        return _ToolResult(handled.content, handled.spilled, handled.size)

    def _read_spilled(self, call: ToolCall) -> _ToolResult:
        """The read tool: served by the store once offered, an unknown tool before that."""
        if not self.store.read_tool_offered:
            return _ToolResult(dumps({"error": f"unknown tool: {call.name}"}), False, 0)
        read = self.store.read(call.arguments)
        self._wait(SPILLOVER_READ_S)
        return _ToolResult(read.content, False, read.returned_bytes)

    # -- memory ----------------------------------------------------------------------

    def _held(self) -> int:
        """What this execution holds now beyond the mcp-host's baseline (plan/memory_model.py)."""
        offered = self.tools_with_read if self.store.read_tool_offered else self.tools_plain
        stored = int(getattr(self.store, "held_bytes", 0))
        return self.controls.memory.held(self.prompt.size(offered), stored)

    def _out_of_memory(self, iteration: int) -> bool:
        """Note what the execution holds now; past the limit the mcp-host is OOM-killed."""
        held = self._held()
        self.run.memory_trace.append((self.clock.elapsed, held))
        memory = self.controls.memory
        if not memory.over_limit(held):
            return False
        self.run.outcome = "failed"
        self.run.oom_killed = True
        self.run.error = (
            f"the mcp-host was OOM-killed at iteration {iteration}: its working set would "
            f"reach {memory.working_set(held)} bytes, above its limit of {memory.limit_bytes}"
        )
        self.log.error(
            "mcp-host",
            "mcp-host OOM-killed",
            iteration=iteration,
            workingSetBytes=memory.working_set(held),
            limitBytes=memory.limit_bytes,
        )
        return True

    # -- limits and time -----------------------------------------------------------

    def _wait(self, seconds: float) -> None:
        """Advance the simulated clock; with `pace`, also really wait (cancellable)."""
        self.clock.advance(seconds)
        pace, cancel = self.controls.pace, self.controls.cancel
        if pace > 0 and cancel is not None:
            cancel.wait(seconds * pace)
        elif pace > 0:
            time.sleep(seconds * pace)

    def _cancelled(self, iteration: int) -> bool:
        cancel = self.controls.cancel
        if cancel is None or not cancel.is_set():
            return False
        self.run.outcome, self.run.error = "aborted", "the step was cancelled"
        self.log.warn("step", "Step aborted", iteration=iteration)
        return True

    def _over_context_window(self, iteration: int, in_tokens: int) -> bool:
        window = self.controls.limits.context_window_tokens
        if in_tokens <= window:
            return False
        self.run.outcome = "failed"
        self.run.error = (
            f"context window exceeded at iteration {iteration}: {in_tokens} tokens > {window}"
        )
        self.log.error(
            "step",
            "LLM call failed",
            iteration=iteration,
            error="context_length_exceeded",
            promptTokens=in_tokens,
            contextWindow=window,
        )
        return True

    def _out_of_time(self) -> bool:
        timeout_s = self.controls.limits.timeout_s
        return timeout_s is not None and self.clock.elapsed > timeout_s

    def _time_out(self, iteration: int) -> None:
        self.run.outcome = "timed_out"
        self.run.error = f"the step ran past its timeout of {self.controls.limits.timeout_s} s"
        self.log.error("step", "Step timed out", iteration=iteration)
