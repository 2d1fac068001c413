"""Fixtures: deterministic, sized as the SPEC needs, with planted defects, facts, canaries."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
from spillover_harness.fixtures import (
    CANARY_PREFIX,
    CHANGE_DIFF,
    MANIFEST,
    REPO_PREFIX,
    FixtureSet,
    build_fixtures,
    export_fixtures,
)
from spillover_harness.sim.store import serialize_result

SEED = 20261130
KIB128, KIB32 = 131_072, 32_768


@cache
def fixtures(seed: int = SEED) -> FixtureSet:
    return build_fixtures(seed)


def read_file_size(path: str, text: str) -> int:
    return len(serialize_result({"path": path, "content": text}).encode("utf-8"))


def test_the_four_inputs_with_their_size_classes() -> None:
    got = {(f.recipe, f.input_name): f.size_class for f in fixtures()}
    assert got == {
        ("code-review", "small"): "small",
        ("code-review", "medium"): "medium",
        ("code-review", "large"): "large",
        ("summarize", "document"): "medium",
    }


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    again = build_fixtures(SEED)
    assert again.fixtures == fixtures().fixtures
    other = build_fixtures(SEED + 1)
    for f in fixtures():
        assert other.get(f.recipe, f.input_name).files != f.files


@pytest.mark.parametrize("seed", [SEED, 1, 2])
def test_sizes(seed: int) -> None:
    fs = fixtures(seed)
    large = fs.get("code-review", "large")
    big = [
        c.path for c in large.changed if read_file_size(c.path, large.source(c.path) or "") > KIB128
    ]
    assert len(big) >= 3
    for name in ("small", "medium"):
        f = fs.get("code-review", name)
        assert all(read_file_size(p, f.source(p) or "") < KIB128 for p in f.repo_paths())
    medium = fs.get("code-review", "medium")
    assert (
        sum(read_file_size(c.path, medium.source(c.path) or "") >= KIB32 for c in medium.changed)
        >= 2
    )
    small = fs.get("code-review", "small")
    assert all(read_file_size(p, small.source(p) or "") < KIB32 for p in small.repo_paths())
    doc = fs.get("summarize", "document")
    assert 90 * 1024 <= len(doc.document.encode()) <= 110 * 1024
    assert KIB32 < len(serialize_result({"title": doc.title, "content": doc.document})) < KIB128


@pytest.mark.parametrize("seed", [SEED, 3])
def test_a_defect_near_the_end_of_each_large_file_outside_the_diff(seed: int) -> None:
    large = fixtures(seed).get("code-review", "large")
    big = {
        c.path for c in large.changed if read_file_size(c.path, large.source(c.path) or "") > KIB128
    }
    late = [d for d in large.expected.defects if d.in_large_file]
    assert {d.path for d in late} == big
    for d in late:
        text = large.source(d.path) or ""
        lines = text.splitlines()
        assert lines[d.line - 1].strip() == d.snippet
        assert d.line / len(lines) >= 0.85
        offset = len("\n".join(lines[: d.line - 1]))
        assert len(text) - offset > 2048  # not in the tail a spillover summary shows
        assert d.snippet not in large.diffs[d.path]


def test_small_and_medium_plant_a_defect_in_the_diff() -> None:
    for name in ("small", "medium"):
        f = fixtures().get("code-review", name)
        assert f.expected.defects
        for d in f.expected.defects:
            assert (
                d.in_diff
                and "+" + (f.source(d.path) or "").splitlines()[d.line - 1] in f.diffs[d.path]
            )


def test_facts_in_the_last_tenth_of_the_document() -> None:
    doc = fixtures().get("summarize", "document")
    assert len(doc.expected.facts) == 3 and doc.expected.min_facts == 2
    for fact in doc.expected.facts:
        assert fact.fraction >= 0.9
        assert doc.document[fact.offset : fact.offset + len(fact.sentence)] == fact.sentence
        assert fact.key in fact.sentence
        assert doc.document.count(fact.key) == 1


def test_canaries_are_unique_and_embedded() -> None:
    every = fixtures().all_canaries()
    assert len(every) == len(set(every))
    for f in fixtures():
        assert f.canaries
        content = "".join(f.files.values())
        for c in f.canaries:
            assert re.fullmatch(re.escape(CANARY_PREFIX) + "[0-9a-f]{20}", c)
            assert c in content
        for c in fixtures().all_canaries():
            if c not in f.canaries:
                assert c not in content


def test_every_changed_file_and_only_those_have_a_diff() -> None:
    for name in ("small", "medium", "large"):
        f = fixtures().get("code-review", name)
        assert set(f.diffs) == {c.path for c in f.changed}
        assert f.files[CHANGE_DIFF] == "".join(f.diffs[p] for p in sorted(f.diffs))
        for c in f.changed:
            added = sum(
                1
                for ln in f.diffs[c.path].splitlines()
                if ln.startswith("+") and not ln.startswith("+++")
            )
            assert added == c.additions


def test_export_writes_files_and_a_manifest(tmp_path: Path) -> None:
    written = export_fixtures(fixtures(), tmp_path)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["seed"] == SEED
    assert tmp_path / MANIFEST in written
    assert len(manifest["fixtures"]) == 4
    for entry in manifest["fixtures"]:
        f = fixtures().get(entry["recipe"], entry["input"])
        assert entry["canaries"] == f.canaries
        assert len(entry["expected"]["defects"]) == len(f.expected.defects)
        for item in entry["files"]:
            data = (tmp_path / entry["dir"] / item["path"]).read_bytes()
            assert len(data) == item["bytes"]
            assert hashlib.sha256(data).hexdigest() == item["sha256"]
    assert len(written) == sum(len(f.files) for f in fixtures()) + 1


def test_exported_change_applies_to_the_repository(tmp_path: Path) -> None:
    export_fixtures(fixtures(), tmp_path)
    for name in ("small", "medium", "large"):
        root = tmp_path / "code-review" / name
        repo = root / REPO_PREFIX.rstrip("/")
        # The repo holds the new revision: the change applies in reverse (giving the base).
        subprocess.run(
            ["git", "apply", "--check", "-R", str(root / CHANGE_DIFF)],
            cwd=repo,
            check=True,
            capture_output=True,
        )
