"""Bad output paths (issue 12, item 4): exit BAD_INPUT with a message naming the path,
no traceback, nothing left behind.

The tests run as root, and root ignores file modes: a `chmod 0500` directory is
writable for root, so it would prove nothing. The unwritable places here fail for
root too: a path under a regular file (like `/etc/hostname/x`), a new directory
in /proc and an existing /proc directory (procfs creates no files for anyone),
and the empty string (argparse's Path('') would be the current directory).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from spillover_harness.cli import main
from spillover_operator.exit_codes import BAD_INPUT

SMALL = """\
name: paths
seed: 3
configurations:
  - name: "off"
    env: {CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}
  - name: 128KiB
recipes:
  - name: code-review
    inputs: [{name: small, size_class: small}]
repetitions: {sim: 1, minikube: 1, dev: 1}
run_timeout_s: 60
concurrency: 2
acceptance: {baseline: "off", token_tolerance: 0.1, quality_recipes: []}
decision:
  chain: [{config: 128KiB, default: "131072"}]
  fallback: "false"
"""

Where = Callable[[Path], str]

BAD_OUT: list[tuple[str, Where, str]] = [
    ("under-a-file", lambda tmp: str(tmp / "file" / "x"), "is a file, not a directory"),
    ("a-file", lambda tmp: str(tmp / "file"), "exists and is not a directory"),
    ("new-dir-in-proc", lambda tmp: "/proc/spillover-harness-x", "cannot create the directory"),
    ("existing-proc-dir", lambda tmp: "/proc/self", "cannot write in the directory"),
    ("empty", lambda tmp: "", "an empty path"),
    ("blank", lambda tmp: " ", "an empty path"),
]


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A work directory (also the current one) holding a regular file and a matrix."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "matrix.yaml").write_text(SMALL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("made")
    (base / "matrix.yaml").write_text(SMALL)
    out = base / "out"
    main(["run", "--stage", "sim", "--matrix", str(base / "matrix.yaml"), "--out", str(out),
          "--no-progress"])  # fmt: skip
    return out / "runs.jsonl"


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def expect_refused(
    argv: list[str], expected: str, place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = listing(place)
    try:
        code: object = main(argv)
    except SystemExit as exc:  # a usage error: argparse exits (with BAD_INPUT)
        code = exc.code
    err = capsys.readouterr().err
    assert code == BAD_INPUT, err
    assert expected in err and "Traceback" not in err, err
    assert listing(place) == before  # nothing left behind (the cwd included)


@pytest.mark.parametrize(("kind", "where", "expected"), BAD_OUT, ids=[b[0] for b in BAD_OUT])
@pytest.mark.parametrize("resume", [False, True], ids=["new", "resume"])
def test_run_into_a_bad_out(
    kind: str,
    where: Where,
    expected: str,
    resume: bool,
    place: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--stage", "sim", "--matrix", "matrix.yaml", "--out", where(place)]
    expect_refused([*argv, *(["--resume"] if resume else [])], expected, place, capsys)


@pytest.mark.parametrize(("kind", "where", "expected"), BAD_OUT, ids=[b[0] for b in BAD_OUT])
def test_report_into_a_bad_out(
    kind: str,
    where: Where,
    expected: str,
    records: Path,
    place: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["report", "--records", str(records), "--out", where(place)]
    expect_refused(argv, expected, place, capsys)


@pytest.mark.parametrize("where", ["", "/proc/spillover-harness-x"], ids=["empty", "proc"])
def test_fixtures_export_into_a_bad_dir(
    where: str, place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = "an empty path" if not where else "cannot write the fixtures"
    expect_refused(["fixtures", "export", where], expected, place, capsys)
