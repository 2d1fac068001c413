"""The handoff cache (sim/handoff.py): the token threshold, FIFO eviction and ref
misses, error passthrough, extractions (never stashed again), and one matrix that
compares off, spillover and handoff on the simulator end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matrix_builders import small_matrix
from spillover_harness.cli import main
from spillover_harness.plan.matrix import MatrixError, load_matrix
from spillover_harness.results.records import read_records
from spillover_harness.results.results_dir import matrix_hash
from spillover_harness.sim.config import SpilloverConfig
from spillover_harness.sim.handoff import QUERY_TOOL, HandoffSettings, HandoffStore, extract
from spillover_harness.sim.prompt import tokens
from spillover_harness.sim.store import serialize_result
from spillover_operator.exit_codes import BAD_INPUT, OK


def store(threshold_tokens: int = 100, max_entries: int = 2, preview: int = 50) -> HandoffStore:
    return HandoffStore(
        HandoffSettings(threshold_tokens, max_entries, preview), SpilloverConfig(), "review", "e1"
    )


def result_of_tokens(n: int) -> dict[str, str]:
    """A result whose serialization is exactly n tokens (4 n bytes)."""
    overhead = len(serialize_result({"content": ""}))
    return {"content": "x" * (4 * n - overhead)}


def test_token_threshold_at_and_below() -> None:
    s = store(threshold_tokens=100)
    below, at = result_of_tokens(99), result_of_tokens(100)
    assert tokens(len(serialize_result(below))) == 99
    kept = s.handle_result("read_file", "c1", below)
    assert not kept.spilled and kept.content == serialize_result(below)
    stashed = s.handle_result("read_file", "c2", at)
    assert stashed.spilled and s.persisted == 1 and s.read_tool_offered
    placeholder = json.loads(stashed.content)["handoff"]
    assert placeholder["resultId"] == "handoff:review/c2"
    assert placeholder["tokens"] == 100 and placeholder["sizeBytes"] == 400
    assert placeholder["preview"] == serialize_result(at)[:50]  # characters, not bytes
    assert placeholder["queryWith"] == QUERY_TOOL


def test_preview_is_taken_by_characters() -> None:
    s = store(threshold_tokens=10, preview=5)
    handled = s.handle_result("read_document", "c1", {"content": "é" * 200})
    assert json.loads(handled.content)["handoff"]["preview"] == '{"con'
    handled = s.handle_result("read_document", "c2", ["ééééééé" * 30])
    assert json.loads(handled.content)["handoff"]["preview"] == '["ééé'  # 5 characters, 8 bytes


def test_error_results_pass_inline_however_large() -> None:
    s = store(threshold_tokens=10)
    error = {"error": "no such file: " + "y" * 10_000}
    handled = s.handle_result("read_file", "c1", error)
    assert not handled.spilled and handled.content == serialize_result(error)
    assert s.persisted == 0 and not s.read_tool_offered


def test_fifo_eviction_and_ref_misses() -> None:
    s = store(threshold_tokens=10, max_entries=2)
    big = result_of_tokens(20)
    for call in ("c1", "c2", "c3"):
        s.handle_result("read_file", call, big)
    assert (s.persisted, s.entries, s.evictions) == (3, 2, 1)
    miss = s.read({"resultId": "handoff:review/c1"})  # the oldest went first
    assert not miss.ok and "evicted" in json.loads(miss.content)["error"]
    assert s.ref_misses == 1
    assert s.read({"resultId": "handoff:review/c2"}).ok  # the two newest are there
    assert s.read({"resultId": "handoff:review/c3"}).ok
    unknown = s.read({"resultId": "handoff:review/never"})
    assert not unknown.ok and s.ref_misses == 1  # never stored: an error, not a miss
    s.handle_result("read_file", "c4", big)
    assert s.evictions == 2 and not s.read({"resultId": "handoff:review/c2"}).ok
    assert s.ref_misses == 2


def test_extraction_answers_are_inline_and_never_stashed_again() -> None:
    s = store(threshold_tokens=10, max_entries=4)
    text = "\n".join(f"line {i}" for i in range(1, 2001))
    s.handle_result("read_file", "c1", {"path": "a.py", "content": text})
    whole = s.read({"resultId": "handoff:review/c1", "field": "content"})
    assert whole.ok and json.loads(whole.content)["value"] == text
    assert tokens(len(whole.content)) > 10  # far over the threshold, still inline
    assert (s.persisted, s.entries) == (1, 1)
    lines = json.loads(
        s.read({"resultId": "handoff:review/c1", "field": "content", "lines": [10, 12]}).content
    )
    assert lines["text"] == "line 10\nline 11\nline 12" and lines["totalLines"] == 2000
    assert s.reads == 2 and s.persisted == 1


def test_extraction_modes() -> None:
    doc = {"title": "T", "content": "# T\n\nintro\n\n## A\n\na1\n\n## B\n\nb1\nb2\n"}
    assert extract(doc, {})["value"] == doc
    assert extract(doc, {"field": "title"}) == {"field": "title", "value": "T"}
    outline = extract(doc, {"field": "content", "outline": True})["outline"]
    assert [(h["line"], h["title"]) for h in outline] == [(1, "T"), (5, "A"), (9, "B")]
    assert extract(doc, {"field": "content", "section": "A"})["text"] == "## A\n\na1\n"
    assert "error" in extract(doc, {"field": "nope"})
    assert "error" in extract(doc, {"field": "content", "lines": [3, 2]})
    assert "error" in extract(doc, {"field": "content", "section": "Z"})


def test_dropped_cache_answers_nothing() -> None:
    s = store(threshold_tokens=10)
    s.handle_result("read_file", "c1", result_of_tokens(20))
    s.drop("succeeded")
    assert not s.read({"resultId": "handoff:review/c1"}).ok and s.entries == 0


# -- the matrix axis ------------------------------------------------------------------

MATRIX = small_matrix(
    "strategies",
    input_name="medium",
    extra_configurations="""\
  - name: handoff-32k
    strategy: handoff
    handoff: {threshold_tokens: 32768}
  - name: handoff-tiny
    strategy: handoff
    handoff: {threshold_tokens: 256, max_entries: 1, preview_chars: 500}
""",
)


def test_one_matrix_compares_off_spillover_and_handoff(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", "--stage", "sim", "--matrix", str(path), "--out", str(out)]) == OK
    records = read_records(out / "runs.jsonl")
    by_config: dict[str, list[object]] = {}
    for r in records:
        by_config.setdefault(r.config, []).append(r)
    assert all(r.cache_evictions is None for r in records if r.config in ("off", "128KiB"))
    tiny = [r for r in records if r.config == "handoff-tiny"]
    # One entry, the diff and the file stashed in the same answer: the diff is evicted
    # before the reviewer asks for it, a ref miss, and it calls get_diff again.
    assert all(r.cache_evictions and r.cache_ref_misses for r in tiny)
    big = [r for r in records if r.config == "handoff-32k"]
    assert all(r.cache_evictions == 0 and r.cache_ref_misses == 0 for r in big)
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    assert set(verdict["configs"]) == {"128KiB", "handoff-32k", "handoff-tiny"}
    assert verdict["decision"] == "131072"  # handoff is compared, never decided
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Handoff cache" in report
    assert "| `handoff-tiny` | threshold 256 tokens, 1 entries, preview 500 chars |" in report


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        (("    handoff: {threshold_tokens: 32768}\n", ""), "strategy handoff needs its settings"),
        (
            ("  - name: 128KiB\n", "  - name: 128KiB\n    handoff: {threshold_tokens: 9}\n"),
            "handoff settings are for strategy: handoff",
        ),
        (
            (
                "strategy: handoff\n    handoff: {threshold_tokens: 32768}",
                "strategy: handoff\n    handoff: {threshold_tokens: 0}",
            ),
            "threshold_tokens",
        ),
        (
            (
                "strategy: handoff\n    handoff: {threshold_tokens: 32768}",
                "strategy: handoff\n    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD: '32768'}\n"
                "    handoff: {threshold_tokens: 32768}",
            ),
            "takes no spillover env",
        ),
        (("{config: 128KiB, default", "{config: handoff-32k, default"), "compared, not decided"),
        (("strategy: handoff", "strategy: cache"), "strategy"),
    ],
)
def test_matrix_validates_the_strategy(
    tmp_path: Path, replace: tuple[str, str], message: str
) -> None:
    text = MATRIX.replace(*replace, 1)
    assert text != MATRIX
    path = tmp_path / "matrix.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert message in str(info.value)


def test_a_matrix_without_handoff_hashes_as_before(tmp_path: Path) -> None:
    """Adding `strategy` (default spillover) changes no existing results directory."""
    m = load_matrix()
    data = m.model_dump(mode="json")
    assert all(c["strategy"] == "spillover" for c in data["configurations"])
    assert matrix_hash(m).startswith("sha256:")
    from spillover_harness.results.results_dir import _comparable  # the hashed form

    assert all("strategy" not in c for c in _comparable(m)["configurations"])


def test_cluster_stage_refuses_handoff_configurations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX, encoding="utf-8")
    code = main(
        [
            "run",
            "--stage",
            "minikube",
            "--profile",
            "minikube",
            "--matrix",
            str(path),
            "--out",
            str(tmp_path / "out"),
            "--concurrency",
            "1",
        ]
    )
    assert code == BAD_INPUT
    assert "handoff-32k, handoff-tiny use strategy: handoff" in capsys.readouterr().err


def test_the_shipped_comparison_matrix_loads() -> None:
    """`make compare` runs harness/matrices/strategies.yaml (a link to the packaged file)."""
    from repo_paths import REPO_ROOT

    m = load_matrix(REPO_ROOT / "harness" / "matrices" / "strategies.yaml")
    assert m.simulated_only == ["handoff-32k", "handoff-8k"]
    assert m.decision_values == ("131072", "32768", "false")
