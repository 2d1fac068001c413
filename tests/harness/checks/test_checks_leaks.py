"""Leak checks: canaries in log lines, `.spill` entries on disk (criterion 5)."""

from __future__ import annotations

import os
from pathlib import Path

from spillover_harness.checks import find_spill_entries, scan_logs_for_canaries

CANARIES = ["spillcanary-aaaaaaaaaaaaaaaaaaaa", "spillcanary-bbbbbbbbbbbbbbbbbbbb"]


def test_lines_with_canaries_are_reported_by_number_without_content() -> None:
    lines = [
        '{"msg":"LLM call started","iteration":1}',
        f'{{"msg":"tool result","result":"# provenance: {CANARIES[1]}"}}',
        "plain text",
        f"{CANARIES[0]} and {CANARIES[1]} and {CANARIES[0]}",
    ]
    found = scan_logs_for_canaries(lines, CANARIES)
    assert len(found) == 2
    assert found[0].startswith("log line 2:") and "#1" in found[0]
    assert found[1].startswith("log line 4:") and "#0, #1" in found[1]
    for description in found:
        assert not any(c in description for c in CANARIES)
        assert "provenance" not in description


def test_clean_logs_and_no_canaries() -> None:
    assert scan_logs_for_canaries(["a", "b"], CANARIES) == []
    assert scan_logs_for_canaries([CANARIES[0]], []) == []
    assert scan_logs_for_canaries([], CANARIES) == []


def test_a_canary_is_found_inside_json_escaped_content() -> None:
    line = '{"result":"{\\"content\\":\\"x = 1\\\\n# provenance: ' + CANARIES[0] + '\\"}"}'
    assert scan_logs_for_canaries([line], CANARIES)


def test_spill_entries_at_any_depth(tmp_path: Path) -> None:
    assert find_spill_entries(tmp_path) == []
    (tmp_path / "output" / "a" / "b").mkdir(parents=True)
    (tmp_path / "output" / "review.md").write_text("ok")
    assert find_spill_entries(tmp_path) == []
    deep = tmp_path / "output" / "a" / "b" / ".spill"
    deep.mkdir()
    (deep / "call_1.json").write_text("{}")
    named = tmp_path / "output" / "result.spill"
    named.write_text("{}")
    assert find_spill_entries(tmp_path) == sorted([deep, named])


def test_spill_entry_symlink_and_root(tmp_path: Path) -> None:
    link = tmp_path / ".spill"
    os.symlink(tmp_path / "nowhere", link)
    assert find_spill_entries(tmp_path) == [link]
    assert find_spill_entries(link) == [link]
    assert find_spill_entries(tmp_path / "missing") == []
