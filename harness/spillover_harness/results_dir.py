"""The results directory of a stage: one writer at a time, and what made its records.

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
import hashlib
import json
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from spillover_operator.domain.strict_load import MAX_TEXT_CHARS, StrictLoadError, load_json
from spillover_operator.regular_file import open_regular, read_regular

from spillover_harness.matrix import Matrix, MatrixError, MemorySettings, parse_matrix
from spillover_harness.records import now_rfc3339

RECORDS_FILE = "runs.jsonl"
STAGE_FILE = "stage.json"
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


@dataclass(frozen=True)
class Provenance:
    """What made a stage, written into stage.json as `provenance` (see the module doc)."""

    simulator_parameters: Mapping[str, Any] | None = None  # stage sim: the values in effect
    profile: str | None = None  # cluster stages: `--profile` as given (name or path)
    stage1_gate: Mapping[str, Any] | None = None  # stage dev: how the gate let it start
    version: str = field(default_factory=harness_version)
    commit: str | None = field(default_factory=harness_commit)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "harness_version": self.version,
            "harness_commit": self.commit,
            "simulator_parameters": (
                dict(self.simulator_parameters) if self.simulator_parameters is not None else None
            ),
            "profile": self.profile,
        }
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


def read_stage_file(out_dir: Path) -> dict[str, Any] | None:
    """The directory's stage.json, None when there is none; ResultsDirError when unreadable."""
    path = out_dir / STAGE_FILE
    if not path.exists():
        return None
    try:
        # duplicate keys, NaN/Infinity, huge integers and deep nesting refused
        data = load_json(read_regular(path, MAX_TEXT_CHARS).decode("utf-8"), str(path))
    except StrictLoadError as exc:
        raise ResultsDirError(
            f"{exc}; stage.json is written by `spillover-harness run`: restore it, or run the "
            "stage into a new --out"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ResultsDirError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsDirError(f"{path}: not a JSON object")
    return data


def simulated_platform(stage_file: Mapping[str, Any] | None) -> bool:
    """Whether a cluster stage ran on a simulated platform (a profile with
    `simulated_platform: true`, e.g. `local`: real pods, the simulator as mcp-host):
    its verdict is the simulator's, like stage sim's."""
    driver = (stage_file or {}).get("driver")
    return isinstance(driver, Mapping) and driver.get("simulated_platform") is True


def stored_matrix(stage_file: Mapping[str, Any], *, source: str) -> Matrix | None:
    """The matrix a stage.json holds (None for a stage.json written before it did)."""
    data = stage_file.get("matrix")
    if data is None:
        return None
    try:
        return parse_matrix(data, source=f"{source} (the stored matrix)")
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
            {"stage": self.stage, "matrix_source": self.matrix_source, "driver": self.driver},
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
        previous = read_stage_file(out_dir)
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
    _write_json_atomic(
        stage_path,
        {
            "schema": STAGE_FILE_SCHEMA,
            **setup.identity(),
            "matrix": setup.matrix.model_dump(mode="json"),
            "matrix_source": setup.matrix_source,
            "resume_command": setup.continue_command(out_dir),
            "created_at": now_rfc3339(),
            "provenance": (setup.provenance or Provenance()).to_json(),
        },
    )


def with_stage_extension(matrix: Matrix, out_dir: Path) -> Matrix:
    """`matrix` with the repetitions its stage in `out_dir` added (`run --until-stable`,
    kept in the matrix stored in stage.json): the same stage, planned as it now is. The
    matrix as given when there is no such stage, or it ran another matrix."""
    stage_file = read_stage_file(out_dir) if out_dir.is_dir() else None
    if stage_file is None or stage_file.get("matrix_hash") != matrix_hash(matrix):
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
    stage_file = read_stage_file(out_dir)
    if stage_file is None:
        raise ResultsDirError(f"{out_dir / STAGE_FILE}: missing; cannot extend the stage")
    stored = stage_file.get("matrix")
    if not isinstance(stored, dict):
        raise ResultsDirError(f"{out_dir / STAGE_FILE}: holds no matrix; cannot extend it")
    stored["extension"] = dict(matrix.extension)
    adaptive = stage_file.get("adaptive")
    if not isinstance(adaptive, dict):
        adaptive = {"rounds": []}
    rounds = adaptive.get("rounds")
    adaptive["rounds"] = [*(rounds if isinstance(rounds, list) else []), dict(round_record)]
    stage_file["adaptive"] = adaptive
    _write_json_atomic(out_dir / STAGE_FILE, stage_file)


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


def describe_changes(
    previous: Mapping[str, Any], setup: StageSetup, *, source: str
) -> list[Change]:
    """What differs between the stage that made a directory and the one starting now."""
    mine = setup.identity()
    changes: list[Change] = []
    if previous.get("stage") != mine["stage"]:
        changes.append(Change("stage", f"stage: {previous.get('stage')} -> {mine['stage']}"))
    stored_driver = previous.get("driver")
    old_driver: dict[str, Any] = stored_driver if isinstance(stored_driver, dict) else {}
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
    if previous.get("matrix_hash") != mine["matrix_hash"]:
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
                    f"matrix: '{previous.get('matrix_name')}' "
                    f"({str(previous.get('matrix_hash'))[:19]}…) -> '{mine['matrix_name']}' "
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


def _refusal(out_dir: Path, previous: Mapping[str, Any], changes: Sequence[Change]) -> str:
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


def _continue_command(out_dir: Path, previous: Mapping[str, Any]) -> str:
    stored = previous.get("resume_command")
    if isinstance(stored, str) and stored:
        return stored
    # A stage.json of an earlier version: rebuild what it allows (never a literal
    # `--matrix <default>`: the packaged matrix needs no --matrix).
    argv = ["spillover-harness", "run", "--stage", str(previous.get("stage"))]
    source = previous.get("matrix_source")
    if isinstance(source, str) and source and source != DEFAULT_MATRIX_SOURCE:
        argv += ["--matrix", source]
    driver = previous.get("driver")
    faults = driver.get("faults") if isinstance(driver, dict) else None
    for fault in faults if isinstance(faults, list) else []:
        argv += ["--fault", str(fault)]
    argv += ["--out", str(out_dir), "--resume"]
    return shlex.join(argv)
