"""The request body a simulated step sends to the "LLM", and what it costs in tokens.

The body is `{"model":...,"system":...,"tools":[...],"messages":[...]}` as compact
JSON (separators (",", ":"), ensure_ascii=False), UTF-8 encoded; a token is
`bytes_per_token` bytes, 4 by default (the model's `bytes_per_token`, docs/simulator.md
§1.4, §1.5). Each message is serialized once, when it is appended, so a
step of many iterations does not re-serialize its whole history to learn its size.
"""

from __future__ import annotations

import json
import math
from typing import Any

MODEL = "sim-model-1"
BYTES_PER_TOKEN = 4


def dumps(value: Any) -> str:
    """Compact JSON, as the platform serializes its request bodies."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tokens(n_bytes: int, bytes_per_token: float = BYTES_PER_TOKEN) -> int:
    """Tokens of `n_bytes` bytes at `bytes_per_token` bytes a token (rounded up)."""
    return math.ceil(n_bytes / bytes_per_token)


class Prompt:
    """The request body, built incrementally (each message serialized once)."""

    def __init__(self, system: str) -> None:
        self._head = f'{{"model":{dumps(MODEL)},"system":{dumps(system)},"tools":'
        self._head_bytes = len(self._head.encode("utf-8"))
        self.messages: list[str] = []
        self._messages_bytes = 0

    def append(self, message: dict[str, Any]) -> int:
        text = dumps(message)
        n = len(text.encode("utf-8"))
        self.messages.append(text)
        self._messages_bytes += n
        return n

    def size(self, tools_json: str) -> int:
        """Bytes of the body with these tools, without rendering it."""
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
