"""Progress of a stage on stderr: a tqdm bar on a terminal, plain lines otherwise.

The bar shows done/total, the ETA and the cell that last started. When the
stream is not a terminal (CI, a pipe, a log file) or progress is turned off,
a plain line is printed every `every` finished runs (and for the last one),
so a log still shows the stage moving without carriage-return noise.

Only names, counts and outcomes are printed: never anything a run produced.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Any, TextIO

from tqdm import tqdm


def _fmt_s(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


class Progress:
    """Counts finished runs of one stage and shows them.

    `total` is the whole plan, `initial` the runs already recorded (a resumed
    stage starts its bar there, and its ETA uses only this session's pace).
    `quiet` shows neither bar nor plain lines (messages are still printed).
    """

    def __init__(
        self,
        *,
        total: int,
        initial: int,
        label: str,
        bar: bool,
        stream: TextIO | None = None,
        every: int | None = None,
        quiet: bool = False,
    ) -> None:
        self.total = total
        self.done = initial
        self._initial = initial
        self.quiet = quiet
        self.label = label
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.outcomes: Counter[str] = Counter()
        self._start = time.monotonic()
        remaining = max(0, total - initial)
        self.every = every if every is not None else max(1, min(25, remaining // 10 or 1))
        isatty = getattr(self.stream, "isatty", None)
        use_bar = bar and not quiet and callable(isatty) and bool(isatty())
        self._bar: Any = None  # a tqdm bar (untyped)
        if use_bar:
            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=label,
                unit="run",
                file=self.stream,
                leave=True,
                # follow the terminal's width; a terminal of unknown size (0 columns,
                # e.g. a pty nobody sized) would make tqdm draw nothing
                **(
                    {"dynamic_ncols": True}
                    if _columns(self.stream)
                    else {"ncols": 100, "nrows": 24}
                ),
            )

    @property
    def uses_bar(self) -> bool:
        return self._bar is not None

    def started(self, cell: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(cell, refresh=True)

    def finished(self, cell: str, outcome: str) -> None:
        self.done += 1
        self.outcomes[outcome] += 1
        if self._bar is not None:
            self._bar.update(1)
            return
        ran = self.done - self._initial
        if self.quiet:
            return
        if ran % self.every == 0 or self.done >= self.total:
            self._line(f"last: {cell} -> {outcome}")

    def message(self, text: str) -> None:
        """A line that must not be garbled by the bar."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _line(self, tail: str) -> None:
        elapsed = time.monotonic() - self._start
        ran = self.done - self._initial
        remaining = self.total - self.done
        eta = "?" if ran == 0 else _fmt_s(elapsed / ran * remaining)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        print(
            f"[{self.label}] {self.done}/{self.total} runs ({pct:.0f}%), "
            f"elapsed {_fmt_s(elapsed)}, eta {eta}; {tail}",
            file=self.stream,
            flush=True,
        )
