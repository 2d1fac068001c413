"""The platform's T2 lane: commands run in order in the platform's checkout, the
exact head recorded, the first failure stops it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from spillover_harness.cluster.platform_lane import LaneFailed, run_lane
from spillover_harness.cluster.version import digest_of
from spillover_harness.profile import Stage1Lane, VersionSource


def checkout(tmp: Path) -> tuple[Path, str]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    (tmp / "Makefile").write_text("x\n")
    git("add", "Makefile")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "init")
    return tmp, git("rev-parse", "HEAD")


def lane(workdir: Path, *codes: int) -> Stage1Lane:
    return Stage1Lane.model_validate(
        {
            "workdir": str(workdir),
            "commands": [
                {"name": f"step{i}", "argv": [sys.executable, "-c", f"raise SystemExit({c})"]}
                for i, c in enumerate(codes)
            ],
        }
    )


def test_a_passing_lane_records_its_verdict_and_exact_head(tmp_path: Path) -> None:
    workdir, head = checkout(tmp_path)
    said: list[str] = []
    result = run_lane(lane(workdir, 0, 0), said.append)
    assert result.verdict == "passed" and result.head == head
    assert result.identity()["head"] == head and len(result.identity()["commands"]) == 2
    assert said[-1].startswith(f"platform T2 lane passed at head `{head}`")


def test_the_first_failure_stops_the_lane(tmp_path: Path) -> None:
    workdir, head = checkout(tmp_path)
    with pytest.raises(LaneFailed) as err:
        run_lane(lane(workdir, 3, 0), lambda _line: None)
    text = str(err.value)
    assert "lane failed" in text and "FAILED (exit 3)" in text and head in text
    assert text.count("`" + sys.executable) == 1  # the second command never ran


def test_version_sources() -> None:
    assert digest_of("docker-pullable://reg.example/mcp-host@sha256:abc") == "sha256:abc"
    assert digest_of("sha256:abc") == "sha256:abc"
    with pytest.raises(ValueError, match="needs `key`"):
        VersionSource.model_validate({"kind": "pod_annotation"})
    with pytest.raises(ValueError, match="needs `url`"):
        VersionSource.model_validate({"kind": "endpoint"})
