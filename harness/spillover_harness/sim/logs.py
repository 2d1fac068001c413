"""Structured logs of a simulated step: one JSON object per line (JSON Lines).

Every line has `ts` (RFC 3339, simulated clock), `level`, `component`
(`step`, `mcp-host` or `coordinator`), `msg`, `runId`, `stepId`, `executionId`,
then the fields of the event. Field values are counts, names, paths, refs and
sizes: never tool-result content (unless the `log_tool_results` fault is on).
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from typing import IO, Any


class SimClock:
    """Simulated time: starts at a wall-clock instant, advances only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.start = start or datetime.now().astimezone()
        self.elapsed = 0.0

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed)

    def ts(self) -> str:
        return self.now().isoformat(timespec="milliseconds")


class StepLog:
    """Collects the log lines of one step execution; thread-safe to read while written."""

    def __init__(
        self, clock: SimClock, context: dict[str, str], stream: IO[str] | None = None
    ) -> None:
        self.clock = clock
        self.context = dict(context)
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._stream = stream

    def emit(self, level: str, component: str, msg: str, **fields: Any) -> None:
        record: dict[str, Any] = {
            "ts": self.clock.ts(),
            "level": level,
            "component": component,
            "msg": msg,
            **self.context,
            **fields,
        }
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._lines.append(line)
            if self._stream is not None:
                self._stream.write(line + "\n")
                self._stream.flush()

    def info(self, component: str, msg: str, **fields: Any) -> None:
        self.emit("info", component, msg, **fields)

    def warn(self, component: str, msg: str, **fields: Any) -> None:
        self.emit("warn", component, msg, **fields)

    def error(self, component: str, msg: str, **fields: Any) -> None:
        self.emit("error", component, msg, **fields)

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)
