"""Checks shared by the simulator and cluster mode: leaks (criterion 5) and quality."""

from __future__ import annotations

from spillover_harness.checks.leaks import (
    SPILL_NAME,
    find_spill_entries,
    is_spill_entry,
    scan_logs_for_canaries,
)
from spillover_harness.checks.quality import judge_code_review, judge_output, judge_summary

__all__ = [
    "SPILL_NAME",
    "find_spill_entries",
    "is_spill_entry",
    "judge_code_review",
    "judge_output",
    "judge_summary",
    "scan_logs_for_canaries",
]
