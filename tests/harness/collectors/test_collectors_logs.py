"""A shared pod log cut by run id: ours, unattributed, other runs' (excluded)."""

from __future__ import annotations

from spillover_harness.collectors.logs import attribute, budget_reached, count_matching
from spillover_harness.profile import LogPatterns

PATTERN = LogPatterns().run_id


def test_lines_are_split_by_the_run_id_they_carry() -> None:
    lines = [
        '{"msg":"LLM call started","runId":"ours-1a2b3c","iteration":1}',
        '{"msg":"LLM call started","runId":"theirs-9","iteration":1}',
        "level=info msg=ready run_id=theirs-10",
        "plain line without an id",
        "bodyBytes=120 for platform-77",
    ]
    split = attribute(lines, ["ours-1a2b3c", "platform-77"], PATTERN)
    assert split.mine == [lines[0], lines[4]]
    assert split.unattributed == [lines[3]]
    assert split.foreign_ids == {"theirs-9", "theirs-10"}
    assert split.foreign_lines == 2


def test_counting_lines() -> None:
    lines = ['{"msg":"spillover result persisted"}', '{"msg":"spillover read"}', "x"]
    assert count_matching(lines, r"spillover result persisted") == 1
    assert count_matching(lines, r"spillover read\b") == 1


WARNING = LogPatterns().budget_inline
REACHED = '{"level":"warn","msg":"spillover budget reached; result kept inline","runId":"r1"}'
REWORDED = '{"level":"warn","msg":"spill cap hit, inlining","runId":"r1"}'


def test_budget_reached_is_1_when_the_warning_is_seen_and_0_only_when_it_could_not_be() -> None:
    assert budget_reached([REACHED], WARNING, may_fill=True) == (1, None)
    assert budget_reached(["x"], WARNING, may_fill=False) == (0, None)


def test_a_warning_worded_otherwise_reads_not_measured_never_0() -> None:
    """The seed's risk: a real mcp-host that words its warning differently looked like
    "budget never reached"."""
    value, why = budget_reached([REWORDED], WARNING, may_fill=True)
    assert value is None and why is not None and "may word it otherwise" in why


def test_budget_not_read_without_lines_or_pattern() -> None:
    assert budget_reached(None, WARNING, may_fill=False)[0] is None
    value, why = budget_reached([REACHED], None, may_fill=True)
    assert value is None and why is not None and "logs.budget_inline null" in why
