"""The one interface the step's loop uses for whatever intercepts tool results: the
spillover store (`sim/store.py`) or the handoff cache (`sim/handoff.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from spillover_harness.sim.config import SpilloverConfig
from spillover_harness.sim.store import Handled, ReadOutcome

__all__ = ["ResultStore"]


class ResultStore(Protocol):
    """Intercepts every tool result of one step execution and serves its own read tool."""

    config: SpilloverConfig
    read_tool: str  # the name of the tool that reads what the store kept out
    persisted: int
    reads: int
    budget_fallbacks: int

    @property
    def read_tool_offered(self) -> bool: ...

    def tool_definition(self) -> dict[str, Any]: ...

    def handle_result(self, tool: str, call_id: str, result: object) -> Handled: ...

    def read(self, arguments: Mapping[str, Any]) -> ReadOutcome: ...

    def drop(self, reason: str) -> None: ...
