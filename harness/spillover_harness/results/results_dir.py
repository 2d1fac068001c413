"""The results directory of a stage: one writer at a time, what made its records, and
the one door to its files.

StageDir
    Every module that opens a stage directory goes through `StageDir(path)`: it names
    the files (stage.json, runs.jsonl, verdict.json, memory-lane.json, report.md) and
    writes and reads each through its model, the same code both ways: `StageFile`
    (stage.json), `results.verdict.Verdict` written and `VerdictHeader` read (a view
    derived from Verdict's fields by `written_view`, never a copy of them),
    `MemoryLane` (memory-lane.json). A file is read bounded and only when it is a
    regular file (a FIFO is refused, never waited on); one that is not what the
    harness writes (not JSON, a key twice, an unknown field, a wrong type) is a
    `ReadBackError` (a ResultsDirError: exit 2) naming the file and what is wrong.

One writer
    A process that writes a results directory holds an exclusive `flock` on
    `<out>/.spillover-harness.lock` for as long as it writes (the CLI: the whole
    command, from before the first check to the last byte of the report). A
    second process is refused at once, told the holder's PID, and touches
    nothing: two writers would interleave duplicate records and delete each
    other's run folders. The lock is the kernel's, so a holder that dies (even
    by SIGKILL) releases it; the file is removed by the holder on release.
    Holding is re-entrant within a process (the CLI holds it, `run_stage`
    inside it holds it again). A directory the holder created and left empty
    (the stage stopped before writing anything) is removed again: a refused
    command leaves nothing behind.

stage.json
    Names what made the records: the stage, the matrix (its name, content hash
    and the whole parsed matrix), where the matrix came from, the driver and its
    fault switches, and the command that continues the stage. `--resume`
    compares it with the run being started and, when they differ, says which
    fields of the matrix, which fault switches, or which stage or driver
    setting changed. `evaluate` and `report` read the stored matrix to know
    which runs to expect. Its `provenance` says what made the stage as it was
    started: the harness's version and commit (null when the harness source is no
    git checkout), the simulator's parameter values in effect (stage sim), the
    cluster profile as given (cluster stages) and, for stage dev, how the Stage 1
    gate let it start. A stage.json from before `provenance` has none; the report
    says so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import operator
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from spillover_operator.domain.strict_load import MAX_TEXT_CHARS, StrictLoadError, load_json
from spillover_operator.regular_file import TooLarge, open_regular, read_regular

from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.plan.matrix import Matrix, MatrixError, MemorySettings, parse_matrix
from spillover_harness.results.records import now_rfc3339
from spillover_harness.results.verdict import Verdict

RECORDS_FILE = "runs.jsonl"
STAGE_FILE = "stage.json"
VERDICT_FILE = "verdict.json"
REPORT_FILE = "report.md"
MAX_VERDICT_BYTES = 64 * 1024 * 1024  # a verdict.json is far smaller; refuse anything huge
LOCK_FILE = ".spillover-harness.lock"
STAGE_FILE_SCHEMA = 1
DEFAULT_MATRIX_SOURCE = "<default>"  # stage.json's `matrix_source` for the packaged matrix


class ResultsDirError(Exception):
    """The results directory cannot be used as asked; the message says why and the fix."""


class ResultsDirLocked(ResultsDirError):
    """Another process is writing the results directory (`pid` when it could be read)."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


# ---------------------------------------------------------------------------------------
# one writer


@dataclass
class _Held:
    fd: int
    count: int
    created: list[Path]  # directories this process created for it, deepest last


_HELD: dict[Path, _Held] = {}
_HELD_GUARD = threading.Lock()


def _create_dirs(out_dir: Path) -> list[Path]:
    """mkdir -p `out_dir`, returning the directories created (outermost first)."""
    missing: list[Path] = []
    probe = out_dir
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ResultsDirError(
            f"{out_dir}: {probe} is a file, not a directory; pick another --out"
            if probe != out_dir
            else f"{out_dir}: exists and is not a directory; pick another --out"
        )
    created: list[Path] = []
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to remove
        except OSError as exc:
            _remove_empty(created)
            raise ResultsDirError(
                f"{out_dir}: cannot create the directory: {exc.strerror or exc}; "
                f"pick a writable --out"
            ) from None
        created.append(directory)
    return created


def _remove_empty(created: Sequence[Path]) -> None:
    for directory in reversed(created):
        try:
            directory.rmdir()  # only when empty: never removes anything written
        except OSError:
            return


def _read_holder(path: Path) -> dict[str, Any]:
    """What the holder wrote into the lock file (it may not have written it yet)."""
    for _ in range(25):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            return {}
        if text.strip():
            try:
                data = json.loads(text)
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
        threading.Event().wait(0.02)
    return {}


def _refuse_locked(out_dir: Path, lock_path: Path) -> ResultsDirLocked:
    holder = _read_holder(lock_path)
    pid = holder.get("pid") if isinstance(holder.get("pid"), int) else None
    who = f"PID {pid}" if pid is not None else "a process whose PID could not be read"
    command = holder.get("command")
    since = holder.get("since")
    detail = "".join(
        [
            f", since {since}" if isinstance(since, str) else "",
            f": {command}" if isinstance(command, str) else "",
        ]
    )
    stop = f" (or stop it: kill {pid})" if pid is not None else ""
    return ResultsDirLocked(
        f"{out_dir} is being written by another spillover-harness process ({who}{detail}); "
        f"nothing was touched. Wait for it to finish{stop}, or pass another --out.",
        pid,
    )


def _acquire(out_dir: Path, lock_path: Path, command: str | None) -> int:
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ResultsDirError(
                f"{out_dir}: cannot write in the directory: {exc.strerror or exc}; "
                f"pick a writable --out"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _refuse_locked(out_dir, lock_path) from None
            raise ResultsDirError(f"{out_dir}: cannot lock {lock_path}: {exc}") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed that file as we opened it: again
    holder = {"pid": os.getpid(), "since": now_rfc3339(), "command": command}
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps(holder) + "\n").encode("utf-8"))
    return fd


@contextlib.contextmanager
def hold_results_dir(out_dir: Path, *, command: str | None = None) -> Iterator[Path]:
    """Create `out_dir` if needed and hold it for this process while the block runs.

    Raises ResultsDirLocked when another process holds it, ResultsDirError when
    the path cannot be a writable directory. `command` is shown to a refused
    second process. Re-entrant within a process.
    """
    key = out_dir.absolute()
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
    if held is None:
        created = _create_dirs(out_dir)
        lock_path = out_dir / LOCK_FILE
        try:
            fd = _acquire(out_dir, lock_path, command)
        except BaseException:
            _remove_empty(created)
            raise
        held = _Held(fd=fd, count=1, created=created)
        with _HELD_GUARD:
            _HELD[key] = held
    try:
        yield out_dir
    finally:
        with _HELD_GUARD:
            held.count -= 1
            last = held.count == 0
            if last:
                del _HELD[key]
        if last:
            with contextlib.suppress(FileNotFoundError):
                (out_dir / LOCK_FILE).unlink()  # while still locked: see _acquire
            os.close(held.fd)
            _remove_empty(held.created)


# ---------------------------------------------------------------------------------------
# provenance

_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_GIT_TIMEOUT_S = 5.0


def harness_version() -> str:
    """The installed spillover-ops version (`unknown` when it is not installed)."""
    try:
        return metadata.version("spillover-ops")
    except metadata.PackageNotFoundError:
        return "unknown"


def harness_commit(source: Path | None = None) -> str | None:
    """`git rev-parse HEAD` of the harness source tree (`source`: default this package's
    directory); None when it is not a git checkout or git cannot say. Never raises: a
    stage must not fail because git is missing or slow."""
    where = source if source is not None else Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    head = done.stdout.strip()[:100]
    return head if done.returncode == 0 and _COMMIT.fullmatch(head) else None


def _git(where: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, timeout=_GIT_TIMEOUT_S,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass(frozen=True)
class TreeState:
    """Whether the harness's source tree differs from its commit, and a hash of how."""

    dirty: bool | None  # None: not a git checkout, or git could not say
    diff_sha256: str | None = None


def harness_tree_state(source: Path | None = None) -> TreeState:
    """The harness package's uncommitted changes against HEAD (tracked files changed and
    files git does not ignore that it does not track). The hash covers the diff and each
    untracked file's name and content, so two modified checkouts that ran differently
    carry different provenance. Never raises."""
    where = source if source is not None else Path(__file__).resolve().parent.parent
    status = _git(where, "status", "--porcelain", "--untracked-files=all", "--", ".")
    if status is None:
        return TreeState(None)
    if not status.strip():
        return TreeState(False)
    digest = hashlib.sha256(_git(where, "diff", "HEAD", "--binary", "--", ".") or b"")
    untracked = _git(where, "ls-files", "--others", "--exclude-standard", "-z", "--", ".")
    for name in sorted((untracked or b"").split(b"\0")):
        if name:
            digest.update(b"\0" + name + b"\0")
            with contextlib.suppress(OSError):
                digest.update((where / os.fsdecode(name)).read_bytes())
    return TreeState(True, "sha256:" + digest.hexdigest())


def content_hash(data: Any) -> str:
    """sha256 of a JSON-able value, keys sorted (a profile as parsed, for provenance)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Provenance:
    """What made a stage, written into stage.json as `provenance` (see the module doc)."""

    simulator_parameters: Mapping[str, Any] | None = None  # stage sim: the values in effect
    profile: str | None = None  # cluster stages: `--profile` as given (name or path)
    profile_sha256: str | None = None  # cluster stages: the profile's content, as parsed
    stage1_gate: Mapping[str, Any] | None = None  # stage dev: how the gate let it start
    version: str = field(default_factory=harness_version)
    commit: str | None = field(default_factory=harness_commit)
    tree: TreeState = field(default_factory=harness_tree_state)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "harness_version": self.version,
            "harness_commit": self.commit,
            "harness_dirty": self.tree.dirty,
            "harness_diff_sha256": self.tree.diff_sha256,
            "simulator_parameters": (
                dict(self.simulator_parameters) if self.simulator_parameters is not None else None
            ),
            "profile": self.profile,
        }
        if self.profile_sha256 is not None:
            data["profile_sha256"] = self.profile_sha256
        if self.stage1_gate is not None:
            data["stage1_gate"] = dict(self.stage1_gate)
        return data


# ---------------------------------------------------------------------------------------
# stage.json


def matrix_hash(matrix: Matrix) -> str:
    """Content hash of a matrix, used to refuse resuming with another matrix.

    Taken over the parsed matrix (so comments and formatting do not count),
    without `concurrency`: how many runs go at once changes no record's meaning,
    and `--concurrency` can override it anyway.
    """
    blob = json.dumps(_comparable(matrix), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _comparable(matrix: Matrix) -> dict[str, Any]:
    data = matrix.model_dump(mode="json")
    data.pop("concurrency", None)
    data.pop("extension", None)  # repetitions a stage added: the same matrix
    # A matrix without the newer keys hashes as before they existed.
    if data.get("sim_model") is None:
        data.pop("sim_model", None)
    defaults = MemorySettings().model_dump(mode="json")
    memory = data.get("memory")
    if isinstance(memory, dict) and memory.get("lane_stages") == defaults["lane_stages"]:
        memory.pop("lane_stages", None)  # as the matrix hashed before the key existed
    defaults.pop("lane_stages")
    if memory == defaults:
        data.pop("memory", None)
    if not data.get("acceptance", {}).get("rules"):
        data.get("acceptance", {}).pop("rules", None)
    for config in data.get("configurations", []):
        if config.get("strategy") == "spillover" and config.get("handoff") is None:
            config.pop("strategy", None)
            config.pop("handoff", None)
    return data


def stage_identity(
    matrix: Matrix, stage: str, driver_identity: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What must be the same for records to belong to one stage."""
    return {
        "stage": stage,
        "matrix_name": matrix.name,
        "matrix_hash": matrix_hash(matrix),
        "driver": dict(driver_identity or {}),
    }


def stored_matrix(stage_file: StageFile, *, source: str) -> Matrix | None:
    """The matrix a stage.json holds (None for a stage.json written before it did)."""
    if stage_file.matrix is None:
        return None
    try:
        return parse_matrix(stage_file.matrix, source=f"{source} (the stored matrix)")
    except MatrixError as exc:
        raise ResultsDirError(str(exc)) from None


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _has_records(path: Path) -> bool:
    if not path.exists():
        return False
    if path.is_dir():
        raise ResultsDirError(
            f"{path}: is a directory, not the records file; move it aside (nothing was run)"
        )
    try:
        with open_regular(path) as handle:  # a FIFO is refused, never waited on
            return any(line.strip() for line in iter(lambda: handle.readline(1 << 20), b""))
    except OSError as exc:
        raise ResultsDirError(
            f"{path}: cannot read the records file: {exc.strerror or exc}; fix its "
            "permissions or pass another --out"
        ) from None


@dataclass(frozen=True)
class StageSetup:
    """What a stage about to run would write into stage.json."""

    matrix: Matrix
    stage: str
    driver: Mapping[str, Any]
    matrix_source: str
    resume_command: str | None  # None: rebuilt from the rest (stage, matrix source, faults)
    provenance: Provenance | None = None  # None: the harness's version and commit only

    def identity(self) -> dict[str, Any]:
        return stage_identity(self.matrix, self.stage, self.driver)

    def continue_command(self, out_dir: Path) -> str:
        """The command that continues this stage in `out_dir`."""
        return self.resume_command or _continue_command(
            out_dir,
            StageFile.model_validate(
                {"stage": self.stage, "matrix_source": self.matrix_source, "driver": self.driver}
            ),
        )


def prepare_results_dir(out_dir: Path, setup: StageSetup, *, resume: bool) -> None:
    """Check that the stage may write into `out_dir`, and write `stage.json` if new.

    The caller holds the directory (`hold_results_dir`). Raises ResultsDirError
    with the reason and the fix.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise ResultsDirError(f"{out_dir}: exists and is not a directory; pick another --out")
    records_path = out_dir / RECORDS_FILE
    stage_path = out_dir / STAGE_FILE
    has_records = _has_records(records_path)
    if has_records and not resume:
        raise ResultsDirError(
            f"{records_path} already holds run records, and records are never overwritten.\n"
            f"  To continue that stage:   {setup.continue_command(out_dir)}\n"
            f"  To start a new one:       pass another --out directory, or move {out_dir} aside"
        )
    try:
        previous = StageDir(out_dir).read_stage()
    except ResultsDirError as exc:
        raise ResultsDirError(
            f"{exc}; cannot tell which matrix made {records_path}. Pass another --out directory."
        ) from None
    if has_records:
        if previous is None:
            raise ResultsDirError(
                f"{records_path} holds records but {stage_path} is missing, so the harness "
                f"cannot tell which matrix and stage made them. Pass another --out directory."
            )
        changes = describe_changes(previous, setup, source=str(stage_path))
        if changes:
            raise ResultsDirError(_refusal(out_dir, previous, changes))
        return
    StageDir(out_dir).write_stage(
        StageFile.model_validate(
            {
                "schema": STAGE_FILE_SCHEMA,
                **setup.identity(),
                "matrix": setup.matrix.model_dump(mode="json"),
                "matrix_source": setup.matrix_source,
                "resume_command": setup.continue_command(out_dir),
                "created_at": now_rfc3339(),
                # the random seed: every run's seed derives from it (run.runner.seed_for)
                "provenance": {
                    **(setup.provenance or Provenance()).to_json(),
                    "seed": setup.matrix.seed,
                },
            }
        )
    )


def with_stage_extension(matrix: Matrix, out_dir: Path) -> Matrix:
    """`matrix` with the repetitions its stage in `out_dir` added (`run --until-stable`,
    kept in the matrix stored in stage.json): the same stage, planned as it now is. The
    matrix as given when there is no such stage, or it ran another matrix."""
    stage_file = StageDir(out_dir).read_stage() if out_dir.is_dir() else None
    if stage_file is None or stage_file.matrix_hash != matrix_hash(matrix):
        return matrix
    stored = stored_matrix(stage_file, source=str(out_dir / STAGE_FILE))
    if stored is None or not stored.extension:
        return matrix
    return matrix.model_copy(update={"extension": dict(stored.extension)})


def extend_stage(out_dir: Path, matrix: Matrix, round_record: Mapping[str, Any]) -> None:
    """Record in stage.json that the stage now runs `matrix.extension` (before any of
    those runs starts, so that the records checks accept them and refuse any beyond),
    and append `round_record` (why and what) to its `adaptive.rounds`. The caller
    holds the directory."""
    directory = StageDir(out_dir)
    stage_file = directory.read_stage()
    if stage_file is None:
        raise ResultsDirError(f"{directory.stage_file}: missing; cannot extend the stage")
    if stage_file.matrix is None:
        raise ResultsDirError(f"{directory.stage_file}: holds no matrix; cannot extend it")
    stored = {**stage_file.matrix, "extension": dict(matrix.extension)}
    rounds = [*stage_file.rounds, AdaptiveRound.model_validate(dict(round_record))]
    directory.write_stage(
        stage_file.model_copy(
            update={"matrix": stored, "adaptive": StageAdaptive(rounds=tuple(rounds))}
        )
    )


# ---------------------------------------------------------------------------------------
# the files of a stage directory, as models (one door: StageDir)


class ReadBackError(ResultsDirError):
    """A file of a results directory that cannot be used. `path` is the file, `cause` a
    short name of what went wrong (`FileNotFoundError`, `JSONDecodeError`, `invalid`),
    `detail` the rest for people."""

    def __init__(self, path: Path, cause: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.cause = cause
        self.detail = detail


class ResultFileMissing(ReadBackError):
    """The file does not exist (the stage did not run, or another directory)."""


class ResultFileUnreadable(ReadBackError):
    """The file exists but cannot be read (a FIFO, too large, not UTF-8) or is not JSON."""


class ResultFileInvalid(ReadBackError):
    """The file is JSON but not what the stage writes there."""


class _FileModel(BaseModel):
    # What the harness writes, and nothing else: an unknown key is an edited file.
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class StageDriver(_FileModel):
    """`stage.json`'s `driver`: where the stage ran. Each driver says what identifies it
    (`StageOptions.driver_identity`), so keys beyond these are kept and compared on
    `--resume`, never refused."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: StrictStr | None = None
    profile: StrictStr | None = None
    mcp_host_version: StrictStr | None = None
    simulated_platform: StrictBool = False
    # The simulator's fault switches the stage ran with (`run --stage sim --fault`).
    faults: tuple[StrictStr, ...] = ()
    study: StrictStr | None = None  # sweep | sensitivity: the study that ran the stage

    @field_validator("faults", mode="before")
    @classmethod
    def _null_is_none(cls, value: Any) -> Any:
        return () if value is None else value

    def identity(self) -> dict[str, Any]:
        """The keys as stored (what `--resume` compares)."""
        return self.model_dump(mode="json", exclude_unset=True)


class AdaptiveRound(_FileModel):
    """One round `run --until-stable` added (`extend_stage`)."""

    stability: float | None = None  # a round recorded before the reproduction probability
    reproducibility: float | None = None
    decision: StrictStr | None = None
    cells: dict[StrictStr, int] = {}
    why: StrictStr = ""
    until_stable: float | None = None
    cap: int | None = None


class StageAdaptive(_FileModel):
    """`stage.json`'s `adaptive`: the rounds `run --until-stable` added, in order."""

    rounds: tuple[AdaptiveRound, ...] = ()


class Stage1Gate(_FileModel):
    """`provenance.stage1_gate` of a dev stage: how the Stage 1 gate let it start."""

    status: StrictStr  # "accepted" | "overridden"
    flag: StrictStr | None = None  # the flag that overrode it
    reason: StrictStr | None = None  # --override-stage1's REASON
    stage1_results: StrictStr | None = None
    stage1_decision: StrictStr | None = None


class StageProvenance(_FileModel):
    """`stage.json`'s `provenance` (`Provenance.to_json`): what made the stage."""

    harness_version: StrictStr | None = None
    harness_commit: StrictStr | None = None
    # True: the harness ran from a checkout with uncommitted changes (its diff's hash
    # beside it); None: not known (no git checkout), or a stage.json from before
    harness_dirty: StrictBool | None = None
    harness_diff_sha256: StrictStr | None = None
    seed: int | None = None  # the matrix seed every run's seed derives from
    profile_sha256: StrictStr | None = None  # cluster stages: the profile's content
    # stage sim: {"model": {...}, "memory": {...}}, the simulator's values in effect
    simulator_parameters: dict[StrictStr, dict[StrictStr, int | float | bool | str]] | None = None
    profile: StrictStr | None = None  # cluster stages: --profile as given
    stage1_gate: Stage1Gate | None = None


class StageFile(_FileModel):
    """`stage.json`, written by `prepare_results_dir` and `extend_stage` and read by
    everything else (see the module doc). Every field has a default: a stage.json of an
    earlier version lacks the newer ones. `matrix` is kept as stored (`stored_matrix`
    parses it)."""

    schema_version: int | None = Field(default=None, alias="schema")
    stage: StrictStr | None = None
    matrix_name: StrictStr | None = None
    matrix_hash: StrictStr | None = None
    driver: StageDriver = StageDriver()
    matrix: dict[StrictStr, Any] | None = None
    matrix_source: StrictStr | None = None
    resume_command: StrictStr | None = None
    created_at: StrictStr | None = None
    # None: a stage.json written before provenance was recorded
    provenance: StageProvenance | None = None
    adaptive: StageAdaptive | None = None

    @field_validator("driver", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @model_validator(mode="after")
    def _extension_is_its_rounds(self) -> StageFile:
        """The stored matrix's `extension` is what the rounds recorded, cell by cell (the
        last round's repetitions of each): an extension edited above them would make the
        report count runs no round planned as missing, a round edited would print cells
        that never ran."""
        extension = (self.matrix or {}).get("extension") or {}
        if not isinstance(extension, dict):
            raise ValueError("matrix.extension: not a mapping of recipe/input to repetitions")
        last: dict[str, int] = {}
        for n, r in enumerate(self.rounds, start=1):
            for cell, reps in r.cells.items():
                if cell in last and reps <= last[cell]:
                    raise ValueError(
                        f"adaptive.rounds[{n}] gives {cell} {reps} repetitions, not more than "
                        f"an earlier round's {last[cell]}"
                    )
                if r.cap is not None and reps > r.cap:
                    raise ValueError(
                        f"adaptive.rounds[{n}] gives {cell} {reps} repetitions, above its cap "
                        f"{r.cap}"
                    )
                last[cell] = reps
        if extension != last:
            raise ValueError(
                f"matrix.extension is not what adaptive.rounds recorded: {dict(extension)} "
                f"against {last or 'no round'}"
            )
        return self

    @property
    def rounds(self) -> tuple[AdaptiveRound, ...]:
        """The rounds `run --until-stable` added, in order (empty: none)."""
        return self.adaptive.rounds if self.adaptive is not None else ()

    @property
    def simulated_platform(self) -> bool:
        """A cluster stage on a simulated platform (a profile with `simulated_platform:
        true`, e.g. `local`: real pods, the simulator as mcp-host): its verdict is the
        simulator's, like stage sim's."""
        return self.driver.simulated_platform

    def to_json(self) -> dict[str, Any]:
        """The object as stage.json holds it: the keys it was made or read with."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# verdict.json: written from `results.verdict.Verdict`; read back as a view of it.

_HEADER_FIELDS = (
    "decision",
    "decided",
    "decision_reason",
    "decision_values",
    "incomplete",
    "stage",
    "matrix_name",
    "baseline",
    "config_env",
    "stability",
    "reproducibility",
    "configs",
    "cells",
    "memory",
)


def _written_names(model: type[BaseModel]) -> set[str]:
    return {
        info.serialization_alias or name
        for name, info in model.model_fields.items()
        if not info.exclude
    }


def _view_type(annotation: Any, views: dict[type[BaseModel], type[BaseModel]]) -> Any:
    """`annotation` with every schema model replaced by its written view, every exact
    number (a `Fraction`, written as an int or a float) by a JSON number, and each
    scalar strict: `"true"` or 1 for a boolean is not what the evaluator writes."""
    if annotation is Fraction:
        return Annotated[int, Strict()] | Annotated[float, Strict()]
    if annotation in (bool, str, int, float):
        return Annotated[annotation, Strict()]
    origin = get_origin(annotation)
    if origin is Annotated:
        return _view_type(get_args(annotation)[0], views)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return written_view(annotation, views=views)
    if origin is None:
        return annotation
    args = tuple(_view_type(a, views) for a in get_args(annotation))
    if origin in (Union, UnionType):
        return functools.reduce(operator.or_, args)
    if origin is Literal:
        return annotation
    return origin[args]


def written_view(
    model: type[BaseModel],
    *,
    only: Sequence[str] | None = None,
    required: Sequence[str] = (),
    views: dict[type[BaseModel], type[BaseModel]] | None = None,
) -> type[BaseModel]:
    """A read model of what `model.to_json()` writes, derived from `model`'s fields (never
    a copy of them): the fields it writes (`exclude=True` ones are not in the file),
    under the names it writes them as, schema models nested in it viewed the same way.
    Every field but `required` ones may be absent or null (a file of an earlier version
    lacks the newer ones); `only` keeps those fields (the rest of the file is skipped),
    and a key `model` never writes is refused."""
    views = {} if views is None else views
    if only is None and model in views:
        return views[model]
    written = _written_names(model)
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.exclude or (only is not None and name not in only):
            continue
        annotation = _view_type(info.annotation, views)
        alias = info.serialization_alias or name
        if name in required:
            fields[name] = (annotation, Field(validation_alias=alias))
        elif info.is_required():
            fields[name] = (annotation | None, Field(default=None, validation_alias=alias))
        else:
            default = info.get_default(call_default_factory=True)
            fields[name] = (annotation, Field(default=default, validation_alias=alias))

    def _refuse_unknown(cls: type[BaseModel], value: Any) -> Any:
        if isinstance(value, Mapping):
            unknown = sorted(str(k) for k in value if k not in written)
            if unknown:
                raise ValueError(
                    f"{', '.join(unknown)}: not a field of {model.__name__} (the harness "
                    "never writes it)"
                )
        return value

    validators: dict[str, Any] = {
        "_refuse_unknown": model_validator(mode="before")(_refuse_unknown)
    }
    view: type[BaseModel] = create_model(
        f"{model.__name__}View" if only is None else f"{model.__name__}Header",
        __config__=ConfigDict(frozen=True, extra="ignore"),
        __doc__=f"What `{model.__name__}.to_json()` writes, read back (`written_view`).",
        __validators__=validators,
        **fields,
    )
    if only is None:
        views[model] = view
    return view


# The header of verdict.json: what listings, `report --compare`, `apply-decision` and
# the Stage 1 gate read. A view of `Verdict` (its fields, its types): only `decision`
# is required, so a verdict.json of an earlier version still reads.
VerdictHeader: Any = written_view(Verdict, only=_HEADER_FIELDS, required=("decision",))


_NON_NEGATIVE = ("peak_bytes", "limit_bytes", "ratio_to_baseline", "headroom_executions",
                 "per_execution_bytes", "lane_max_executions")  # fmt: skip


def _negative_memory(memory: Any) -> str | None:
    """The first memory figure of a verdict that cannot be below 0, as its field path."""
    for name, config in (memory.configs if memory is not None else {}).items():
        for field_name in _NON_NEGATIVE:
            value = getattr(config, field_name, None)
            if value is not None and value < 0:
                return f"memory.configs.{name}.{field_name} = {value}"
    return None


def _problems(exc: ValidationError) -> str:
    """The validation errors as one line: `decision: Input should be a valid string`."""
    parts = []
    for error in exc.errors()[:8]:
        where = ".".join(str(p) for p in error["loc"])
        if not where and error["type"] == "value_error":  # a check across fields: it names them
            parts.append(error["msg"].removeprefix("Value error, "))
            continue
        parts.append(f"{where or '(the file)'}: {error['msg']}")
    more = len(exc.errors()) - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class StageDir:
    """A stage's results directory (`--out`): the one door to the files in it. Each
    file is written and read here, through its model: stage.json (`StageFile`),
    verdict.json (`Verdict` written, `VerdictHeader` read), memory-lane.json
    (`MemoryLane`). A file that cannot be used is a ReadBackError naming it and what
    is wrong (a FIFO, too large, not JSON, a key twice, an unknown field, a wrong
    type): never a KeyError or a wrong type passed on."""

    path: Path

    @property
    def stage_file(self) -> Path:
        return self.path / STAGE_FILE

    @property
    def records_file(self) -> Path:
        return self.path / RECORDS_FILE

    @property
    def verdict_file(self) -> Path:
        return self.path / VERDICT_FILE

    @property
    def lane_file(self) -> Path:
        return self.path / LANE_FILE

    @property
    def report_file(self) -> Path:
        return self.path / REPORT_FILE

    def _read_object(self, path: Path, limit: int) -> dict[str, Any]:
        try:
            # duplicate keys, NaN/Infinity, huge integers and deep nesting refused
            data = load_json(read_regular(path, limit).decode("utf-8"), str(path))
        except FileNotFoundError:
            raise ResultFileMissing(path, "FileNotFoundError", "no such file") from None
        except StrictLoadError as exc:
            detail = str(exc).removeprefix(f"{path}: ")
            raise ResultFileUnreadable(path, "JSONDecodeError", detail) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ResultFileUnreadable(path, type(exc).__name__, str(exc)) from None
        if not isinstance(data, dict):
            raise ResultFileInvalid(path, "invalid", f"a JSON {type(data).__name__}, not an object")
        return data

    # stage.json

    def read_stage(self) -> StageFile | None:
        """The stage.json, None when there is none; ResultFileUnreadable or
        ResultFileInvalid (both ResultsDirError) when it cannot be used."""
        path = self.stage_file
        if not path.exists() and not path.is_symlink():
            return None
        try:
            data = self._read_object(path, MAX_TEXT_CHARS)
        except ResultFileMissing:
            return None
        except ReadBackError as exc:
            raise type(exc)(
                path,
                exc.cause,
                f"{exc.detail}; stage.json is written by `spillover-harness run`: restore "
                "it, or run the stage into a new --out",
            ) from None
        try:
            return StageFile.model_validate(data)
        except ValidationError as exc:
            raise ResultFileInvalid(
                path,
                "invalid",
                f"not a stage.json as the harness writes it ({_problems(exc)}); restore "
                "it, or run the stage into a new --out",
            ) from None

    def write_stage(self, stage: StageFile) -> None:
        """Write stage.json atomically (the caller holds the directory)."""
        _write_json_atomic(self.stage_file, stage.to_json())

    # verdict.json

    def write_verdict(self, verdict: Verdict) -> Path:
        """Write verdict.json (`Verdict.to_json()`) atomically."""
        text = json.dumps(verdict.to_json(), indent=2, ensure_ascii=False) + "\n"
        atomic_write_bytes(self.verdict_file, text.encode("utf-8"))
        return self.verdict_file

    def read_verdict_header(self) -> Any:
        """verdict.json's header (`VerdictHeader`); ResultFileMissing, ResultFileUnreadable
        or ResultFileInvalid (`detail`: `no \\`decision\\`` when it has none)."""
        path = self.verdict_file
        data = self._read_object(path, MAX_VERDICT_BYTES)
        try:
            header = VerdictHeader.model_validate(data)
        except ValidationError as exc:
            bad_decision = any(
                e["loc"] == ("decision",) and e["type"] == "missing" for e in exc.errors()
            )
            detail = "no `decision`" if bad_decision else _problems(exc)
            raise ResultFileInvalid(path, "invalid", detail) from None
        negative = _negative_memory(header.memory)
        if negative:
            raise ResultFileInvalid(path, "invalid", f"{negative}: a memory figure below 0")
        return header

    # memory-lane.json

    def write_lane(self, lane: MemoryLane) -> Path:
        text = json.dumps(lane.to_json(), indent=2) + "\n"
        atomic_write_bytes(self.lane_file, text.encode("utf-8"))
        return self.lane_file

    def read_lane(self) -> MemoryLane | None:
        """The lane written next to the records; None when there is none. Raises
        LaneFileError naming what is wrong with a file that is there but is not a lane
        (not a regular file, too large, not JSON, a key twice, not the form
        `write_lane` writes): the report shows it in place of the lane."""
        path = self.lane_file
        if not path.exists():
            return None
        try:
            text = read_regular(path, LANE_MAX_BYTES).decode("utf-8")
        except TooLarge:
            raise LaneFileError(f"more than a lane's {LANE_MAX_BYTES:,} bytes") from None
        except OSError as exc:
            raise LaneFileError(f"cannot be read: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise LaneFileError("not UTF-8 text") from None
        try:
            data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
        except LaneFileError:
            raise
        except json.JSONDecodeError as exc:
            raise LaneFileError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
        except (ValueError, RecursionError):
            raise LaneFileError("not JSON (a number or nesting it cannot hold)") from None
        try:
            return MemoryLane.from_json(data)
        except ValueError as exc:
            raise LaneFileError(str(exc)) from None


# ---------------------------------------------------------------------------------------
# memory-lane.json

LANE_FILE = "memory-lane.json"
LANE_MAX_BYTES = 1_000_000
UNLIMITED = 1 << 62
_POINT_KEYS = {"config", "executions", "peak_bytes", "limit_bytes"}
_OPTIONAL = ("peak_source", "ended_early")  # written only when set


class LaneFileError(ValueError):
    """memory-lane.json exists but cannot be read as a lane: the message says what is
    wrong with it, for the report (which shows it instead of the lane)."""


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys: a second `points` (or a point's second
    # `peak_bytes`) would silently replace the first, and an OOM warning with it.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise LaneFileError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


@dataclass(frozen=True)
class LanePoint:
    """One configuration with `executions` at once: the working set's peak (what it
    would reach; past `limit_bytes` the mcp-host is OOM-killed). `peak_source`, on a
    cluster stage: where the measured peak came from, at what step
    (`kubelet-summary@1s`, `prometheus@30s`); None on the simulator (modelled)."""

    config: str
    executions: int
    peak_bytes: int
    limit_bytes: int
    peak_source: str | None = None
    # how many of the N executions ended early (failed, aborted, timed out): such a
    # point never feeds a headroom, since a run cut short holds less than one that ends
    ended_early: int = 0

    @property
    def oom(self) -> bool:
        return self.peak_bytes > self.limit_bytes


@dataclass(frozen=True)
class MemoryLane:
    recipe: str
    input: str
    points: tuple[LanePoint, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "input": self.input,
            "points": [
                {k: v for k, v in asdict(p).items() if k not in _OPTIONAL or v} for p in self.points
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> MemoryLane:
        """Raises ValueError for anything but what `to_json` writes."""
        if not isinstance(data, dict) or set(data) != {"recipe", "input", "points"}:
            raise ValueError("not a memory lane: expected recipe, input and points")
        if not isinstance(data["points"], list):
            raise ValueError("a lane's points must be a list")
        points: list[LanePoint] = []
        for p in data["points"]:
            if not isinstance(p, dict) or set(p) - set(_OPTIONAL) != _POINT_KEYS:
                raise ValueError(
                    "a lane point needs config, executions, peak_bytes, limit_bytes "
                    "(and may have peak_source and ended_early)"
                )
            numbers = [p["executions"], p["peak_bytes"], p["limit_bytes"]]
            numbers.append(p.get("ended_early", 0))
            if not isinstance(p["config"], str) or not all(
                type(n) is int and 0 <= n <= UNLIMITED for n in numbers
            ):
                raise ValueError("a lane point's figures must be non-negative integers")
            source = p.get("peak_source")
            if source is not None and not (isinstance(source, str) and 0 < len(source) <= 64):
                raise ValueError("a lane point's peak_source must be a short string or null")
            point = LanePoint(
                p["config"],
                p["executions"],
                p["peak_bytes"],
                p["limit_bytes"],
                source,
                p.get("ended_early", 0),
            )
            if point.ended_early > point.executions:
                raise ValueError(
                    f"the point {point.config} x{point.executions} has more executions "
                    f"ended early ({point.ended_early}) than it ran"
                )
            if any((q.config, q.executions) == (point.config, point.executions) for q in points):
                raise ValueError(f"the point {point.config} x{point.executions} is listed twice")
            points.append(point)
        if not isinstance(data["recipe"], str) or not isinstance(data["input"], str):
            raise ValueError("a lane's recipe and input must be strings")
        return cls(data["recipe"], data["input"], tuple(points))


# ---------------------------------------------------------------------------------------
# what changed


@dataclass(frozen=True)
class Change:
    kind: str  # "stage" | "faults" | "driver" | "matrix"
    text: str


_DRIVER_LABELS = {
    "kind": "driver",
    "profile": "cluster profile",
    "mcp_host_version": "mcp-host version",
}


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if value else "none"
    return json.dumps(value) if not isinstance(value, str) else repr(value)


def _named(items: list[Any]) -> dict[str, Any] | None:
    """A list of mappings with unique `name`s, keyed by name (compared by name)."""
    names = [i.get("name") if isinstance(i, dict) else None for i in items]
    if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
        return {str(n): i for n, i in zip(names, items, strict=True)}
    return None


def _diff(path: str, old: Any, new: Any, out: list[str]) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(f"{sub}: removed (was {_show(old[key])})")
            elif key not in old:
                out.append(f"{sub}: added ({_show(new[key])})")
            else:
                _diff(sub, old[key], new[key], out)
        return
    if isinstance(old, list) and isinstance(new, list):
        old_named, new_named = _named(old), _named(new)
        if old_named is not None and new_named is not None:
            for name in [*old_named, *(n for n in new_named if n not in old_named)]:
                sub = f"{path}[{name}]"
                if name not in new_named:
                    out.append(f"{sub}: removed")
                elif name not in old_named:
                    out.append(f"{sub}: added")
                else:
                    _diff(sub, old_named[name], new_named[name], out)
            if [n for n in old_named if n in new_named] != [n for n in new_named if n in old_named]:
                out.append(f"{path}: reordered")
            return
        if len(old) == len(new):
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                _diff(f"{path}.{i}", a, b, out)
            return
    out.append(f"{path}: {_show(old)} -> {_show(new)}")


def describe_changes(previous: StageFile, setup: StageSetup, *, source: str) -> list[Change]:
    """What differs between the stage that made a directory and the one starting now."""
    mine = setup.identity()
    changes: list[Change] = []
    if previous.stage != mine["stage"]:
        changes.append(Change("stage", f"stage: {previous.stage} -> {mine['stage']}"))
    old_driver = previous.driver.identity()
    new_driver: dict[str, Any] = mine["driver"]
    for key in [*old_driver, *(k for k in new_driver if k not in old_driver)]:
        a, b = old_driver.get(key), new_driver.get(key)
        if a == b:
            continue
        if key == "faults":
            changes.append(
                Change("faults", f"fault switches: {_show(a or [])} -> {_show(b or [])}")
            )
        else:
            label = _DRIVER_LABELS.get(key, f"driver {key}")
            changes.append(Change("driver", f"{label}: {_show(a)} -> {_show(b)}"))
    if previous.matrix_hash != mine["matrix_hash"]:
        old_matrix = stored_matrix(previous, source=source)
        lines: list[str] = []
        if old_matrix is not None:
            _diff("", _comparable(old_matrix), _comparable(setup.matrix), lines)
        if lines:
            changes.extend(Change("matrix", f"matrix {line}") for line in lines)
        else:
            changes.append(
                Change(
                    "matrix",
                    f"matrix: '{previous.matrix_name}' "
                    f"({str(previous.matrix_hash)[:19]}…) -> '{mine['matrix_name']}' "
                    f"({mine['matrix_hash'][:19]}…) (this stage.json does not hold the matrix, "
                    f"so the changed fields cannot be listed)",
                )
            )
    return changes


_WHY = {
    "stage": "records of different stages",
    "faults": "runs of a simulator with different injected faults",
    "driver": "runs made on a different platform or mcp-host",
    "matrix": "runs of different matrices",
}


_WHAT = {
    "stage": "another stage",
    "faults": "other fault switches",
    "driver": "another driver",
    "matrix": "another matrix",
}


def _refusal(out_dir: Path, previous: StageFile, changes: Sequence[Change]) -> str:
    kinds = list(dict.fromkeys(c.kind for c in changes))
    what = " and ".join(_WHAT[k] for k in kinds)
    lines = [
        f"refusing to resume into {out_dir}: its records were made with {what} "
        f"(as recorded -> as asked now):"
    ]
    shown = changes[:12]
    lines.extend(f"  - {c.text}" for c in shown)
    if len(changes) > len(shown):
        lines.append(f"  - ... and {len(changes) - len(shown)} more")
    lines.append(f"Mixing them would judge {' and '.join(_WHY[k] for k in kinds)} together.")
    lines.append(f"  To continue that stage as it was made: {_continue_command(out_dir, previous)}")
    lines.append("  To start a new one:                    pass another --out directory")
    return "\n".join(lines)


def _continue_command(out_dir: Path, previous: StageFile) -> str:
    if previous.resume_command:
        return previous.resume_command
    # A stage.json of an earlier version: rebuild what it allows (never a literal
    # `--matrix <default>`: the packaged matrix needs no --matrix).
    argv = ["spillover-harness", "run", "--stage", str(previous.stage)]
    source = previous.matrix_source
    if source and source != DEFAULT_MATRIX_SOURCE:
        argv += ["--matrix", source]
    for fault in previous.driver.faults:
        argv += ["--fault", fault]
    argv += ["--out", str(out_dir), "--resume"]
    return shlex.join(argv)
