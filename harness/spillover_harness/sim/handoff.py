"""The handoff cache: the sibling design to spillover, modelled behind the same store
interface (`sim/resultstore.py`), docs/simulator.md §8.

- A tool result of at least `threshold_tokens` tokens (ceil(serialized bytes / 4),
  the simulator's token rule) is stashed in a bounded, first-in-first-out, in-memory
  cache of the step execution and replaced by a placeholder:
  `{"handoff": {"resultId", "tool", "sizeBytes", "tokens", "structure", "preview",
  "queryWith", "howToQuery"}}` where `preview` is the first `preview_chars`
  characters of the serialized result.
- An error result (an object with an `error` key) passes inline however large.
- The cache holds at most `max_entries` results; stashing one more evicts the
  oldest (`evictions`). Querying an evicted result is a ref miss (`ref_misses`):
  an error result; the agent has to call the tool again.
- The agent asks for an extraction with `clerum__handoff_query(resultId, field?,
  lines?, section?, outline?)`: the whole result (no field), one top-level field,
  1-based inclusive `lines: [first, last]` of a text field, the Markdown `section`
  with a given heading, or the `outline` (the headings with their line numbers).
  An extraction's answer is returned inline, however large: it is never stashed
  again.
- One cache per step execution, dropped when it ends; nothing on disk, no content
  in log lines (ids, sizes and counts only).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spillover_harness.sim.config import SpilloverConfig
from spillover_harness.sim.logs import StepLog
from spillover_harness.sim.metrics import SpilloverMetrics
from spillover_harness.sim.prompt import tokens
from spillover_harness.sim.store import Handled, ReadOutcome, serialize_result, structure_hint

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_PREVIEW_CHARS",
    "QUERY_TOOL",
    "HandoffSettings",
    "HandoffStore",
    "query_tool_definition",
]

QUERY_TOOL = "clerum__handoff_query"
DEFAULT_MAX_ENTRIES = 8
DEFAULT_PREVIEW_CHARS = 2000
_HEADING = re.compile(r"^(#{1,6}) +(.*\S)\s*$")


@dataclass(frozen=True)
class HandoffSettings:
    """A handoff configuration: the threshold in tokens, the cache size, the preview."""

    threshold_tokens: int
    max_entries: int = DEFAULT_MAX_ENTRIES
    preview_chars: int = DEFAULT_PREVIEW_CHARS


def query_tool_definition() -> dict[str, Any]:
    return {
        "name": QUERY_TOOL,
        "description": (
            "Extract part of a tool result the handoff cache kept out of the prompt: the "
            "whole result, one field, lines of a text field, a Markdown section, or the "
            "outline of a text field. The answer is returned inline."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "resultId": {"type": "string"},
                "field": {"type": "string", "description": "a top-level key of the result"},
                "lines": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1},
                    "description": "[first, last], 1-based, inclusive, of the text field",
                },
                "section": {"type": "string", "description": "a Markdown heading's text"},
                "outline": {"type": "boolean", "description": "the headings and their lines"},
            },
            "required": ["resultId"],
        },
    }


class HandoffStore:
    """One step execution's handoff cache (the `ResultStore` interface of the loop)."""

    read_tool = QUERY_TOOL

    def __init__(
        self,
        settings: HandoffSettings,
        config: SpilloverConfig,
        step_id: str,
        execution_id: str,
        *,
        metrics: SpilloverMetrics | None = None,
        log: StepLog | None = None,
    ) -> None:
        self.settings = settings
        self.config = config  # what the mcp-host read from its env (logged, not used)
        self.step_id = step_id
        self.execution_id = execution_id
        self.metrics = metrics
        self.log = log
        self._cache: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._evicted: set[str] = set()
        self.persisted = 0
        self.reads = 0
        self.budget_fallbacks = 0  # the cache has no byte budget; kept for the interface
        self.evictions = 0
        self.ref_misses = 0
        self.closed = False

    @property
    def read_tool_offered(self) -> bool:
        return self.persisted > 0

    @property
    def entries(self) -> int:
        return len(self._cache)

    def tool_definition(self) -> dict[str, Any]:
        return query_tool_definition()

    def result_id(self, call_id: str) -> str:
        return f"handoff:{self.step_id}/{call_id}"

    # -- results -------------------------------------------------------------------

    def handle_result(self, tool: str, call_id: str, result: object) -> Handled:
        serialized = serialize_result(result)
        size = len(serialized.encode("utf-8"))
        if self.closed:
            raise RuntimeError("the handoff cache of this step execution was dropped")
        if isinstance(result, dict) and "error" in result:
            return Handled(serialized, size, spilled=False)  # errors pass inline
        n_tokens = tokens(size)
        if n_tokens < self.settings.threshold_tokens:
            return Handled(serialized, size, spilled=False)
        rid = self.result_id(call_id)
        self._cache[rid] = (tool, result)
        self.persisted += 1
        if self.metrics is not None:
            self.metrics.persisted(tool)
        while len(self._cache) > self.settings.max_entries:
            old, _ = self._cache.popitem(last=False)
            self._evicted.add(old)
            self.evictions += 1
            if self.log is not None:
                self.log.info("mcp-host", "handoff cache eviction", resultId=old)
        if self.log is not None:
            self.log.info(
                "mcp-host",
                "handoff result stashed",
                tool=tool,
                resultId=rid,
                sizeBytes=size,
                tokens=n_tokens,
                entries=len(self._cache),
            )
        placeholder = {
            "handoff": {
                "resultId": rid,
                "tool": tool,
                "sizeBytes": size,
                "tokens": n_tokens,
                "structure": structure_hint(result),
                "preview": serialized[: self.settings.preview_chars],
                "queryWith": QUERY_TOOL,
                "howToQuery": (
                    f"The result is kept out of the prompt. Ask {QUERY_TOOL} for what you "
                    "need: the whole result, a field, lines [first, last] of a text field, "
                    "a Markdown section by its heading, or the outline."
                ),
            }
        }
        return Handled(serialize_result(placeholder), size, spilled=True, ref=rid)

    # -- extractions ---------------------------------------------------------------

    def _error(self, message: str) -> ReadOutcome:
        return ReadOutcome(serialize_result({"error": message}), False, 0, True)

    def read(self, arguments: Mapping[str, Any]) -> ReadOutcome:
        """An extraction from a stashed result; its answer is inline, never stashed."""
        if self.closed:
            return self._error("the handoff cache of this step execution was dropped")
        rid = arguments.get("resultId")
        if not isinstance(rid, str) or rid not in self._cache:
            if isinstance(rid, str) and rid in self._evicted:
                self.ref_misses += 1
                if self.log is not None:
                    self.log.warn("mcp-host", "handoff ref miss", resultId=rid)
                return self._error(
                    f"result {rid} was evicted from the handoff cache; call the tool again"
                )
            return self._error(f"unknown resultId: {rid!r}")
        _tool, value = self._cache[rid]
        answer = extract(value, arguments)
        if "error" in answer:
            return self._error(str(answer["error"]))
        content = serialize_result({"resultId": rid, **answer})
        self.reads += 1
        if self.metrics is not None:
            self.metrics.read(True)
        if self.log is not None:
            self.log.info(
                "mcp-host",
                "handoff query",
                resultId=rid,
                answerBytes=len(content.encode("utf-8")),
            )
        return ReadOutcome(content, True, len(content.encode("utf-8")), True)

    def drop(self, reason: str) -> None:
        if self.closed:
            return
        if self.log is not None:
            self.log.info(
                "mcp-host",
                "handoff cache dropped",
                reason=reason,
                entries=len(self._cache),
                evictions=self.evictions,
                refMisses=self.ref_misses,
            )
        self._cache.clear()
        self.closed = True


def outline(text: str) -> list[dict[str, Any]]:
    """The Markdown headings of `text` with their 1-based line numbers."""
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        match = _HEADING.match(line)
        if match:
            found.append({"line": number, "level": len(match.group(1)), "title": match.group(2)})
    return found


def _section(text: str, heading: str) -> tuple[int, int] | None:
    """1-based (first, last) lines of the section under `heading` (to the next heading of
    the same or a higher level)."""
    heads = outline(text)
    for i, h in enumerate(heads):
        if h["title"] == heading:
            end = next(
                (n["line"] - 1 for n in heads[i + 1 :] if n["level"] <= h["level"]),
                text.count("\n") + 1,
            )
            return h["line"], end
    return None


def extract(value: object, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The extraction `arguments` ask for, or {"error": ...}."""
    field = arguments.get("field")
    if field is None:
        if any(k in arguments for k in ("lines", "section", "outline")):
            return {"error": "lines, section and outline need a text field"}
        return {"value": value}
    if not isinstance(value, dict) or field not in value:
        keys = ", ".join(value) if isinstance(value, dict) else "none"
        return {"error": f"no field {field!r} (fields: {keys})"}
    part = value[field]
    if not any(k in arguments for k in ("lines", "section", "outline")):
        return {"field": field, "value": part}
    if not isinstance(part, str):
        return {"error": f"field {field!r} is not text"}
    if arguments.get("outline"):
        return {"field": field, "lines": part.count("\n") + 1, "outline": outline(part)}
    lines = part.split("\n")
    if "section" in arguments:
        span = _section(part, str(arguments["section"]))
        if span is None:
            return {"error": f"no section {arguments['section']!r} in {field!r}"}
        first, last = span
    else:
        wanted = arguments.get("lines")
        if (
            not isinstance(wanted, list)
            or len(wanted) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in wanted)
            or not 1 <= wanted[0] <= wanted[1]
        ):
            return {"error": "lines must be [first, last] with 1 <= first <= last"}
        first, last = wanted[0], min(wanted[1], len(lines))
    return {
        "field": field,
        "first": first,
        "last": last,
        "totalLines": len(lines),
        "text": "\n".join(lines[first - 1 : last]),
    }


def parse_placeholder(value: Mapping[str, Any]) -> dict[str, Any] | None:
    """The handoff placeholder inside a parsed tool message, if it is one."""
    info = value.get("handoff")
    return info if isinstance(info, dict) and isinstance(info.get("resultId"), str) else None
