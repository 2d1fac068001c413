"""The spillover store of one step execution: a model of the mcp-host's (docs/reference.md §1).

- A tool result is measured as the UTF-8 byte length of its JSON serialization,
  `serialize_result(result)` = `json.dumps(result, ensure_ascii=False,
  separators=(",", ":"))` (compact, no spaces, non-ASCII kept as UTF-8, key order
  as produced by the tool: what `JSON.stringify` gives).
- A result of at least `threshold` bytes is kept in memory and the model gets a
  summary (`{"spillover": {...}}`: ref, tool, size, structure hint, head, tail)
  instead, unless holding it would take the execution's total over `budget`:
  then it stays inline, and a later result that still fits is stored.
- `clerum__spillover_read` is offered once something was stored. It reads refs of
  this step and this execution only; one read returns at most `threshold` bytes
  of the serialized result (from `offset`, up to `length`). Read results are
  never spilled themselves (else a read could never return content).
- `drop()` ends the execution's store. Nothing is written to disk and no log line
  holds result content, except under the fault switches (a broken mcp-host).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spillover_harness.sim.config import SpilloverConfig
from spillover_harness.sim.logs import StepLog
from spillover_harness.sim.metrics import SpilloverMetrics

READ_TOOL = "clerum__spillover_read"
# The summary's defaults; the simulator's model sets them (`head_bytes`, `tail_bytes`,
# `structure_hint_depth`, docs/simulator.md §1.5).
HEAD_BYTES = 1024
TAIL_BYTES = 1024
HINT_DEPTH = 2
REF_SCHEME = "spillover://"
_REF = re.compile(r"spillover://([^/\s]+)/([^/\s]+)\.json")


def serialize_result(result: object) -> str:
    """The exact serialization a result is measured on (and sent inline as)."""
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def make_ref(step_id: str, call_id: str) -> str:
    return f"{REF_SCHEME}{step_id}/{call_id}.json"


def parse_ref(ref: str) -> tuple[str, str] | None:
    match = _REF.fullmatch(ref)
    return (match.group(1), match.group(2)) if match else None


def structure_hint(value: object, depth: int = 0, max_depth: int = HINT_DEPTH) -> str:
    """A short description of a result's shape, e.g.
    `object{path: string(24 B), content: string(153312 B, 3890 lines)}`. Objects and
    arrays are opened `max_depth` levels deep (0: only `object(2 keys)`); deeper ones
    are named by their size only."""
    if isinstance(value, dict):
        if depth >= max_depth:
            return f"object({len(value)} keys)"
        items = list(value.items())
        shown = ", ".join(f"{k}: {structure_hint(v, depth + 1, max_depth)}" for k, v in items[:12])
        more = f", ... {len(items) - 12} more" if len(items) > 12 else ""
        return f"object{{{shown}{more}}}"
    if isinstance(value, list):
        inner = (
            structure_hint(value[0], depth + 1, max_depth) if value and depth < max_depth else "..."
        )
        return f"array[{len(value)}] of {inner}"
    if isinstance(value, str):
        size = len(value.encode("utf-8"))
        if "\n" in value:
            return f"string({size} B, {value.count(chr(10)) + 1} lines)"
        return f"string({size} B)"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null"


def _char_boundary(data: bytes, index: int) -> int:
    """The largest index <= `index` that does not split a UTF-8 sequence."""
    while 0 < index < len(data) and (data[index] & 0xC0) == 0x80:
        index -= 1
    return index


@dataclass(frozen=True)
class Handled:
    """What the model gets for one tool result."""

    content: str  # the tool message's content: the serialized result or its summary
    size: int  # bytes of the serialized result
    spilled: bool
    ref: str | None = None
    budget_fallback: bool = False


@dataclass(frozen=True)
class ReadOutcome:
    content: str  # serialized read result (or error)
    ok: bool
    returned_bytes: int
    with_range: bool


@dataclass
class _Entry:
    tool: str
    data: bytes


class StoreClosedError(RuntimeError):
    pass


class SpilloverStore:
    """One step execution's store. Not shared: every execution builds its own."""

    read_tool = READ_TOOL

    def __init__(
        self,
        config: SpilloverConfig,
        step_id: str,
        execution_id: str,
        *,
        metrics: SpilloverMetrics | None = None,
        log: StepLog | None = None,
        fault_spill_dir: Path | None = None,
        fault_log_results: bool = False,
        fault_first_party: bool = False,
        fault_leak: bool = False,
        fault_budget_unreported: bool = False,
        fault_read_denied: bool = False,
        head_bytes: int = HEAD_BYTES,
        tail_bytes: int = TAIL_BYTES,
        hint_depth: int = HINT_DEPTH,
    ) -> None:
        self.config = config
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.hint_depth = hint_depth
        self.step_id = step_id
        self.execution_id = execution_id
        self.metrics = metrics
        self.log = log
        self.fault_spill_dir = fault_spill_dir
        self.fault_log_results = fault_log_results
        self.fault_first_party = fault_first_party
        self.fault_leak = fault_leak
        self.fault_budget_unreported = fault_budget_unreported
        self.fault_read_denied = fault_read_denied
        self._entries: dict[str, _Entry] = {}
        self.held_bytes = 0
        self.persisted = 0
        self.reads = 0
        self.budget_fallbacks = 0
        self.peak_held_bytes = 0  # the store at its fullest
        self.closed = False

    # -- results ---------------------------------------------------------------------

    @property
    def read_tool_offered(self) -> bool:
        """The read tool is offered from the first stored result on (the owners' exception
        to a recipe's `allowedTools.include`; the `fault_read_denied` mcp-host refuses it)."""
        return self.persisted > 0 and not self.fault_read_denied

    @property
    def entries(self) -> int:
        return len(self._entries)

    def tool_definition(self) -> dict[str, Any]:
        """The read tool as the request's `tools` offer it."""
        from spillover_harness.sim.tools import read_tool_definition

        return read_tool_definition(self.config.threshold)

    def handle_result(self, tool: str, call_id: str, result: object) -> Handled:
        serialized = serialize_result(result)
        data = serialized.encode("utf-8")
        size = len(data)
        if not self.config.enabled:
            return Handled(serialized, size, spilled=False)
        if self.closed:
            raise StoreClosedError("the store of this step execution was dropped")
        if self.fault_log_results and self.log is not None:
            # FAULT: a broken mcp-host that logs tool results.
            self.log.info("mcp-host", "tool result", tool=tool, callId=call_id, result=serialized)
        if self.fault_first_party and self.metrics is not None:
            # FAULT: the first-party path observes every tool output too
            self.metrics.first_party_output(tool, size)
        if size < self.config.threshold:
            return Handled(serialized, size, spilled=False)
        if self.held_bytes + size > self.config.budget:
            self.budget_fallbacks += 1
            # As the mcp-host does: the warning once per step execution, at the first
            # result kept inline (`budget_fallbacks` counts them all).
            if self.log is not None and self.budget_fallbacks == 1:
                self.log.warn(
                    "mcp-host",
                    # FAULT: a warning worded so that no documented pattern finds it
                    "spill cap hit, inlining"
                    if self.fault_budget_unreported
                    else "spillover budget reached; result kept inline",
                    tool=tool,
                    callId=call_id,
                    sizeBytes=size,
                    heldBytes=self.held_bytes,
                    budgetBytes=self.config.budget,
                )
            return Handled(serialized, size, spilled=False, budget_fallback=True)
        ref = make_ref(self.step_id, call_id)
        self._entries[call_id] = _Entry(tool, data)
        self.held_bytes += size
        self.peak_held_bytes = max(self.peak_held_bytes, self.held_bytes)
        self.persisted += 1
        if self.metrics is not None:
            self.metrics.persisted(tool)
            if self.fault_first_party:  # FAULT: the first-party counter fed too
                self.metrics.first_party(read=False)
        if self.log is not None:
            self.log.info(
                "mcp-host",
                "spillover result persisted",
                tool=tool,
                callId=call_id,
                ref=ref,
                sizeBytes=size,
                heldBytes=self.held_bytes,
            )
        if self.fault_spill_dir is not None:
            # FAULT: a broken mcp-host that writes spilled results to disk.
            self.fault_spill_dir.mkdir(parents=True, exist_ok=True)
            (self.fault_spill_dir / f"{call_id}.json").write_bytes(data)
        summary = {
            "spillover": {
                "ref": ref,
                "tool": tool,
                "sizeBytes": size,
                "structure": structure_hint(result, max_depth=self.hint_depth),
                "head": data[: _char_boundary(data, self.head_bytes)].decode("utf-8"),
                "tail": data[max(0, size - self.tail_bytes) :].decode("utf-8", errors="ignore"),
                "readWith": READ_TOOL,
                "maxReadBytes": self.config.threshold,
                "note": (
                    "The full result is kept out of the prompt. Read it with "
                    f"{READ_TOOL}(ref, offset, length); one read returns at most "
                    f"{self.config.threshold} bytes of the JSON text."
                ),
            }
        }
        return Handled(serialize_result(summary), size, spilled=True, ref=ref)

    # -- the read tool ---------------------------------------------------------------

    def _error(self, message: str, with_range: bool) -> ReadOutcome:
        return ReadOutcome(serialize_result({"error": message}), False, 0, with_range)

    def read(self, arguments: Mapping[str, Any]) -> ReadOutcome:
        offset = arguments.get("offset")
        length = arguments.get("length")
        with_range = offset is not None or length is not None
        if self.closed:
            return self._error("the spillover store of this step execution was dropped", with_range)
        ref = arguments.get("ref")
        parsed = parse_ref(ref) if isinstance(ref, str) else None
        if parsed is None:
            return self._error(f"not a spillover ref: {ref!r}", with_range)
        step_id, call_id = parsed
        if step_id != self.step_id:
            return self._error(
                f"ref belongs to step '{step_id}'; this step can only read its own results",
                with_range,
            )
        entry = self._entries.get(call_id)
        if entry is None:
            return self._error("unknown ref: not stored by this step execution", with_range)
        size = len(entry.data)
        start = 0 if offset is None else offset
        if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= size:
            return self._error(f"offset must be an integer in 0..{size}", with_range)
        want = self.config.threshold if length is None else length
        if not isinstance(want, int) or isinstance(want, bool) or want < 1:
            return self._error("length must be a positive integer", with_range)
        end = _char_boundary(entry.data, min(size, start + min(want, self.config.threshold)))
        start = _char_boundary(entry.data, start)
        chunk = entry.data[start:end]
        result: dict[str, Any] = {
            "ref": ref,
            "offset": start,
            "length": len(chunk),
            "totalBytes": size,
            "eof": end >= size,
            "data": chunk.decode("utf-8"),
        }
        if end < size:
            result["next"] = f"continue with offset={end}"
        self.reads += 1
        if self.metrics is not None:
            self.metrics.read(with_range)
            if self.fault_first_party:  # FAULT: the first-party counter fed too
                self.metrics.first_party(read=True)
        if self.log is not None:
            self.log.info(
                "mcp-host",
                "spillover read",
                ref=ref,
                offset=start,
                length=len(chunk),
                totalBytes=size,
                withRange=with_range,
            )
        return ReadOutcome(serialize_result(result), True, len(chunk), with_range)

    # -- end of the execution ----------------------------------------------------------

    def drop(self, reason: str) -> None:
        """End of the step execution (completed, failed, aborted, timed out)."""
        if self.closed:
            return
        if self.config.enabled and self.log is not None:
            self.log.info(
                "mcp-host",
                "spillover store dropped",
                reason=reason,
                entries=len(self._entries),
                heldBytes=self.held_bytes,
            )
        self.closed = True
        if self.fault_leak:  # FAULT: the results stay in memory after the execution
            return
        self._entries.clear()
        self.held_bytes = 0
