"""The suite does not depend on how it was launched: started with SIGINT ignored (a
background job), its Ctrl-C tests still see Ctrl-C (tests/conftest.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_sigint_raises_keyboard_interrupt_in_the_suite() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_tests_pass_in_a_suite_started_with_sigint_ignored() -> None:
    """One test that Ctrl-Cs this process and one that Ctrl-Cs a child, in a pytest
    started as a background job would be."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            str(TESTS / "harness/cli/test_harness_cli_messages.py"),
            "-k", "first_moments_prints_no_traceback and 0.05 or during_evaluate_prints_no_partial",
        ],
        capture_output=True, text=True, timeout=300, cwd=TESTS.parent,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout, proc.stdout
