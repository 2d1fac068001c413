"""A shared pod log cut by run id: ours, unattributed, other runs' (excluded)."""

from __future__ import annotations

from spillover_harness.collectors.logs import attribute, count_matching
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
