"""The process facts the local cluster and the benchmarks read from /proc."""

from __future__ import annotations

import subprocess
import sys

from controlplane.processes import cpu_seconds

# Burns CPU until it has used `BURN` seconds of it by its own clock, says so, then
# waits (using none) until its stdin closes.
BURN = 0.3
CHILD = (
    "import sys, time\n"
    f"while time.process_time() < {BURN}: pass\n"
    "print('burnt', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_cpu_seconds_is_what_the_process_used_and_zero_once_it_is_gone() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        used = cpu_seconds(child.pid)
        # The kernel's count, in clock ticks, against the child's own: one tick apart
        # at most, plus the interpreter's start-up before its clock was read.
        assert BURN - 0.02 <= used <= BURN + 0.5, used
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert cpu_seconds(child.pid) == 0.0
