"""Leak checks (criterion 5): `.spill` entries on disk and tool-result content in logs.

The findings name where a leak is (a log line number, a path) and never repeat
the leaked content, so they are safe to print, record and put in a report.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

SPILL_NAME = ".spill"


def scan_logs_for_canaries(lines: Iterable[str], canaries: Sequence[str]) -> list[str]:
    """One description per log line holding a fixture canary: its 1-based line number
    and which canaries (by index in `canaries`), never the line's content."""
    wanted = [c for c in dict.fromkeys(canaries) if c]
    if not wanted:
        return []
    index = {c: i for i, c in enumerate(canaries) if c}
    pattern = re.compile("|".join(re.escape(c) for c in sorted(wanted, key=len, reverse=True)))
    found: list[str] = []
    for number, line in enumerate(lines, start=1):
        hits = sorted({index[m.group(0)] for m in pattern.finditer(line)})
        if hits:
            which = ", ".join(f"#{i}" for i in hits)
            noun = "canary" if len(hits) == 1 else "canaries"
            found.append(f"log line {number}: holds fixture {noun} {which} (tool-result content)")
    return found


def is_spill_entry(name: str) -> bool:
    return name == SPILL_NAME or name.endswith(SPILL_NAME)


def find_spill_entries(root: Path) -> list[Path]:
    """Every entry (file, directory or link) named `.spill` (or `*.spill`) under `root`,
    at any depth, `root` itself included. A missing root has none."""
    root = Path(root)
    found: list[Path] = []
    if is_spill_entry(root.name) and (root.exists() or root.is_symlink()):
        found.append(root)
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            if is_spill_entry(name):
                found.append(Path(dirpath) / name)
    return sorted(found)
