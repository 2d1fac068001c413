"""A small JSONPath engine: where a profile points into a run's status or response.

`$`, `.name`, `['name']`, `[0]`, `[-1]`, `[*]`, `.*`, and the Kubernetes style
`{.status.phase}`; enough for the fields a platform reports, with no dependency.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from spillover_operator.domain.quoting import shorten

__all__ = ["JsonPath"]

_JP_TOKEN = re.compile(
    r"""
    \.(?P<name>[A-Za-z_][A-Za-z0-9_-]*)       # .name
  | \.(?P<dotstar>\*)                          # .*
  | \[\s*(?P<index>-?\d+)\s*\]                 # [0], [-1]
  | \[\s*(?P<star>\*)\s*\]                     # [*]
  | \[\s*'(?P<sq>[^']*)'\s*\]                  # ['name']
  | \[\s*"(?P<dq>[^"]*)"\s*\]                  # ["name"]
    """,
    re.VERBOSE,
)

_Step = tuple[Literal["key", "index", "all"], str | int | None]


@dataclass(frozen=True)
class JsonPath:
    """A small JSONPath subset, enough to point into a run's status or response.

    `$`, `.name`, `['name']`, `[0]`, `[-1]`, `[*]`, `.*`. Kubernetes style
    (`{.status.phase}`) and a leading `.` without `$` are accepted too.
    `find` returns every match; `first` the first one or None.
    """

    text: str
    steps: tuple[_Step, ...]

    @classmethod
    def parse(cls, text: str) -> JsonPath:
        src = text.strip()
        if src.startswith("{") and src.endswith("}"):
            src = src[1:-1].strip()
        if src.startswith("$"):
            src = src[1:]
        elif not src.startswith((".", "[")):
            raise ValueError(f"a JSONPath starts with '$' or '.': {shorten(text)}")
        steps: list[_Step] = []
        pos = 0
        while pos < len(src):
            m = _JP_TOKEN.match(src, pos)
            if m is None:
                raise ValueError(
                    f"unsupported JSONPath {shorten(text)} at {shorten(src[pos:])} "
                    "(supported: $, .name, ['name'], [0], [*], .*)"
                )
            if m.group("name") is not None:
                steps.append(("key", m.group("name")))
            elif m.group("sq") is not None:
                steps.append(("key", m.group("sq")))
            elif m.group("dq") is not None:
                steps.append(("key", m.group("dq")))
            elif m.group("index") is not None:
                steps.append(("index", int(m.group("index"))))
            else:
                steps.append(("all", None))
            pos = m.end()
        return cls(text=text, steps=tuple(steps))

    def find(self, document: object) -> list[object]:
        current: list[object] = [document]
        for kind, arg in self.steps:
            nxt: list[object] = []
            for node in current:
                if kind == "key":
                    if isinstance(node, Mapping) and arg in node:
                        nxt.append(node[arg])
                elif kind == "index":
                    assert isinstance(arg, int)
                    if isinstance(node, list) and -len(node) <= arg < len(node):
                        nxt.append(node[arg])
                elif isinstance(node, Mapping):
                    nxt.extend(node.values())
                elif isinstance(node, list):
                    nxt.extend(node)
            current = nxt
        return current

    def first(self, document: object) -> object | None:
        found = self.find(document)
        return found[0] if found else None
