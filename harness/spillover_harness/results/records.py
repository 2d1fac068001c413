"""Run records: one JSON object per run, one line per object, schema 1 (docs/reference.md §3).

The file is the harness's durable memory: every record is appended whole,
flushed and fsynced as its run finishes, so an interrupted stage leaves a
valid file and `--resume` can pick up exactly where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from spillover_operator.domain.quoting import shorten
from spillover_operator.domain.strict_load import MAX_TEXT_CHARS, StrictLoadError, load_json
from spillover_operator.regular_file import NotARegularFile, open_regular

from spillover_harness.names import name_problem

SCHEMA_VERSION = 1

Stage = Literal["sim", "minikube", "dev"]
Outcome = Literal["succeeded", "failed", "aborted", "timed_out", "harness_error"]
SizeClass = Literal["small", "medium", "large"]

STAGES: tuple[str, ...] = ("sim", "minikube", "dev")
OUTCOMES: tuple[str, ...] = ("succeeded", "failed", "aborted", "timed_out", "harness_error")


# The note every record of a simulator run with faults injected carries (`run --fault`),
# followed by the switches: such a run tests the harness's checks, its stage is never a
# decision to apply (apply/decision.py), whatever stage.json says.
FAULTS_NOTE = "simulator faults injected: "


def faults_noted(records: Iterable[RunRecord]) -> list[str]:
    """The fault switches the records say their runs were made with (sorted, each once)."""
    found: set[str] = set()
    for record in records:
        for note in record.notes:
            if note.startswith(FAULTS_NOTE):
                found.update(p.strip() for p in note.removeprefix(FAULTS_NOTE).split(","))
    return sorted(found - {""})


class RunKey(NamedTuple):
    """What makes a run unique within a stage's matrix (used by --resume)."""

    stage: str
    config: str
    recipe: str
    input: str
    repetition: int


# Fields only a handoff-cache run has (simulator, strategy: handoff).
CACHE_FIELDS: tuple[str, ...] = ("cache_evictions", "cache_ref_misses")
# Fields added to schema 1 after its first release: absent in older records, and left
# out of a record that does not have them (the cache's, and the cluster stages' serving
# pod and consistency check).
OPTIONAL_FIELDS: tuple[str, ...] = (
    *CACHE_FIELDS,
    "mcp_host_pods",
    "consistency_ok",
    "mcp_host_memory",
    "budget_inline",
)


class McpHostPod(BaseModel):
    """An mcp-host pod that served a run (cluster stages): its name, UID and the three
    spillover variables as its process saw them (null: unset)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    uid: str
    values: dict[str, str | None]


class McpHostMemory(BaseModel):
    """The mcp-host's memory, restarts and OOM kills around a run (optional, schema 1).

    Cluster stages: the figures of the configuration block the run belongs to (`block`,
    1-based, in the order the blocks ran): the peak working set of the mcp-host
    container(s) that served it, their memory limit, and the restarts and OOM kills
    during the block. The simulator: this execution alone on its mcp-host (`block`
    null). `start_bytes` and `end_bytes`: the working set at the block's (execution's)
    start and end, whose difference is the leak figure of the report's memory check.
    `peak_source` (cluster stages): where the peak came from and at what step
    (`prometheus@30s`, `kubelet-summary@1s`): a peak is the highest sample at that step.
    `store_bytes` and `store_results_bytes`: the spillover store at its fullest, the
    memory it took and the bytes of the results it held then (the simulator's model; a
    cluster stage has no first-party figure of them yet): the memory claim compares the
    two. `None` in a field: not measured."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    peak_bytes: int | None = None
    limit_bytes: int | None = None
    restarts: int | None = None
    oom_kills: int | None = None
    block: int | None = None
    start_bytes: int | None = None
    end_bytes: int | None = None
    peak_source: str | None = Field(default=None, min_length=1, max_length=64)
    store_bytes: int | None = None
    store_results_bytes: int | None = None

    @field_validator(
        "peak_bytes",
        "limit_bytes",
        "restarts",
        "oom_kills",
        "start_bytes",
        "end_bytes",
        "store_bytes",
        "store_results_bytes",
    )
    @classmethod
    def _not_negative(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("cannot be negative (use null for 'not measured')")
        return value

    @field_validator("block")
    @classmethod
    def _block_one_based(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("block is 1-based: it must be >= 1")
        return value


class RunRecord(BaseModel):
    """One run, as docs/reference.md §3 defines it. `None` always means "not measured"."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    schema_: Literal[1] = 1
    run_id: str
    stage: Stage
    config: str
    recipe: str
    input: str
    size_class: SizeClass
    repetition: int
    outcome: Outcome
    hit_iteration_limit: bool | None = None
    iterations: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    duration_s: float | None = None
    spillover_persisted: int | None = None
    spillover_reads: int | None = None
    status_report_bytes: int | None = None
    quality_ok: bool | None = None
    disk_clean: bool | None = None
    logs_clean: bool | None = None
    # The handoff cache only (strategy: handoff, simulator): results evicted from the
    # bounded FIFO cache, and queries of evicted results. None for spillover runs.
    cache_evictions: int | None = None
    cache_ref_misses: int | None = None
    # Optional (cluster stages; records without them stay valid schema 1):
    # the mcp-host pod(s) that served the run and the values in effect there,
    mcp_host_pods: list[McpHostPod] | None = None
    # and whether the platform did what the configuration says (checks/consistency.py):
    # false makes the configuration's verdict unable to pass.
    consistency_ok: bool | None = None
    # Optional: the mcp-host's memory around the run (McpHostMemory), and how many tool
    # results were kept inline because the step's spillover budget was full.
    mcp_host_memory: McpHostMemory | None = None
    budget_inline: int | None = None
    started_at: str
    finished_at: str
    notes: list[str] = []

    @field_validator("config", "recipe", "input")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        problem = name_problem(value)  # it would reach the report as written
        if problem is not None:
            raise ValueError(f"{problem} (in the matrix and in the records)")
        return value

    @field_validator("repetition")
    @classmethod
    def _repetition_is_one_based(cls, value: int) -> int:
        if value < 1:
            raise ValueError("repetition is 1-based: it must be >= 1")
        return value

    @field_validator(
        "iterations",
        "input_tokens",
        "output_tokens",
        "spillover_persisted",
        "spillover_reads",
        "status_report_bytes",
        "cache_evictions",
        "cache_ref_misses",
        "budget_inline",
    )
    @classmethod
    def _count_not_negative(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError("a count cannot be negative (use null for 'not measured')")
        return value

    @field_validator("duration_s")
    @classmethod
    def _duration_not_negative(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("a duration must be a finite number (use null for 'not measured')")
        if value is not None and value < 0:
            raise ValueError("a duration cannot be negative (use null for 'not measured')")
        return value

    @field_validator("started_at", "finished_at")
    @classmethod
    def _rfc3339(cls, value: str) -> str:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"not an RFC 3339 timestamp: {value!r}") from exc
        if parsed.tzinfo is None:
            raise ValueError(f"RFC 3339 timestamps need a UTC offset or 'Z': {value!r}")
        return value

    @model_validator(mode="after")
    def _finished_after_started(self) -> RunRecord:
        started = datetime.fromisoformat(self.started_at)
        finished = datetime.fromisoformat(self.finished_at)
        if finished < started:
            raise ValueError(
                f"finished_at {self.finished_at} is before started_at {self.started_at}: a "
                "run cannot end before it starts; the record is damaged: restore it or "
                "remove the line"
            )
        return self

    @property
    def key(self) -> RunKey:
        return RunKey(self.stage, self.config, self.recipe, self.input, self.repetition)

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump()
        data.pop("schema_")
        for name in OPTIONAL_FIELDS:  # written only when measured: older readers
            if data.get(name) is None:
                data.pop(name, None)
        return {"schema": SCHEMA_VERSION, **data}

    @classmethod
    def from_json(cls, data: Any) -> RunRecord:
        """Validate one decoded JSON object; raises RecordError naming every bad field."""
        if not isinstance(data, dict):
            raise RecordError(f"a record must be a JSON object, got {type(data).__name__}")
        if "schema" not in data:
            raise RecordError("missing field 'schema' (expected 1)")
        if type(data["schema"]) is not int or data["schema"] != SCHEMA_VERSION:
            # checked here: the Literal[1] field would take `true` (True == 1)
            raise RecordError(
                f"field 'schema': this harness reads schema {SCHEMA_VERSION} "
                f"(got {data['schema']!r})"
            )
        body = dict(data)
        body["schema_"] = body.pop("schema")
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            raise RecordError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<record>"
        loc = "schema" if loc == "schema_" else loc
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field '{loc}'")
        elif err["type"] == "missing":
            parts.append(f"missing field '{loc}'")
        elif not err["loc"]:  # the record as a whole (its fields disagree): the message says
            parts.append(err["msg"].removeprefix("Value error, "))
        else:
            msg = err["msg"].removeprefix("Value error, ")
            parts.append(f"field '{loc}': {msg} (got {shorten(err.get('input'))})")
    return "; ".join(parts)


class RecordError(ValueError):
    """A record (or a line of a records file) that does not follow schema 1."""


def now_rfc3339() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def not_before(started: str, finished: str) -> str:
    """`finished`, or `started` when the wall clock stepped back during the run: a record
    whose run ends before it starts is refused on read, and a run is never lost to it."""
    return (
        started if datetime.fromisoformat(finished) < datetime.fromisoformat(started) else finished
    )


def parse_line(line: str, *, path: Path | str = "<records>", lineno: int = 0) -> RunRecord:
    try:
        # duplicate keys, NaN/Infinity, huge integers and deep nesting refused
        data = load_json(line, f"{path}:{lineno}")
    except StrictLoadError as exc:
        raise RecordError(str(exc).replace(" at line 1 column ", " at column ")) from None
    try:
        return RunRecord.from_json(data)
    except RecordError as exc:
        raise RecordError(f"{path}:{lineno}: {exc}") from None


def iter_numbered_records(path: Path) -> Iterator[tuple[int, RunRecord]]:
    """Yield (line number, record) of a JSONL file; a bad line raises RecordError naming it.

    Blank lines are skipped. A last line without its newline is the trace of a
    write that was cut short (the process was killed mid-append): it is
    reported, not trusted.
    """
    if path.is_dir():
        raise RecordError(
            f"{path}: is a directory, not a records file; move it aside (the records file is "
            "a runs.jsonl file)"
        )
    lineno = 0
    try:
        handle = open_regular(path)
    except NotARegularFile as exc:
        raise RecordError(
            f"{path}: is {exc.kind}, not a records file; pass the runs.jsonl of a stage "
            "(a pipe or device is never read)"
        ) from None
    except FileNotFoundError:
        raise RecordError(f"{path}: no such records file") from None
    except OSError as exc:
        raise RecordError(f"{path}: cannot read the records file: {exc.strerror or exc}") from None
    with handle:
        while True:
            try:
                raw = handle.readline(MAX_TEXT_CHARS + 1)  # bounded: a line read is a line held
            except OSError as exc:
                raise RecordError(
                    f"{path}: cannot read the records file: {exc.strerror or exc}"
                ) from None
            if not raw:
                return
            lineno += 1
            if len(raw) > MAX_TEXT_CHARS:
                raise RecordError(
                    f"{path}:{lineno}: the line is longer than {MAX_TEXT_CHARS} bytes, more "
                    "than any run record; the records file is damaged: restore it or remove "
                    "the line"
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(
                    f"{path}:{lineno}: not UTF-8 text (byte {exc.start} of the line); "
                    "the records file is damaged: restore it or remove the line"
                ) from None
            if not line.strip():
                continue
            if not line.endswith("\n"):
                raise RecordError(
                    f"{path}:{lineno}: the last line is incomplete (a write was "
                    "interrupted); run the stage again with --resume to repair it"
                )
            yield lineno, parse_line(line, path=path, lineno=lineno)


def iter_records(path: Path) -> Iterator[RunRecord]:
    """Yield the records of a JSONL file (see `iter_numbered_records`); none for an empty file."""
    for _, record in iter_numbered_records(path):
        yield record


def read_numbered_records(path: Path) -> list[tuple[int, RunRecord]]:
    """(line number, record) of every record of a records file that must hold some.

    RecordError when the file is missing or holds no record (empty, or only
    blank lines): there is nothing to evaluate, and saying so beats a verdict
    of nothing.
    """
    if not path.exists():
        raise RecordError(f"{path}: no such records file")
    numbered = list(iter_numbered_records(path))
    if not numbered:
        raise RecordError(
            f"{path}: the records file is empty: it holds no run record (was the stage "
            "interrupted before its first run finished? pass the runs.jsonl of a stage "
            "that recorded runs)"
        )
    return numbered


def read_records(path: Path) -> list[RunRecord]:
    """The records of a records file; RecordError naming the line of a bad one, or
    saying the file is missing or empty."""
    return [record for _, record in read_numbered_records(path)]


class RecordLog:
    """Append-only, crash-safe JSONL of run records.

    Each record is one `os.write` of a whole line followed by fsync. On open,
    a torn last line (from a kill mid-write) is moved aside to
    `<file>.torn-<n>` rather than deleted, so nothing is ever lost.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.repaired_from: Path | None = None

    def open(self) -> list[RunRecord]:
        """Repair a torn tail if any, and return the records already there."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_dir():
            raise RecordError(
                f"{self.path}: is a directory, not the records file; move it aside, then "
                "resume (nothing was run)"
            )
        if not self.path.exists():
            self.path.touch()
            _fsync_dir(self.path.parent)
            return []
        try:
            with open_regular(self.path) as handle:  # a FIFO here would hang the resume
                data = handle.read()
        except NotARegularFile as exc:
            raise RecordError(
                f"{self.path}: is {exc.kind}, not the records file; move it aside, then "
                "resume (nothing was run)"
            ) from None
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            n = 1
            while (aside := self.path.with_name(f"{self.path.name}.torn-{n}")).exists():
                n += 1
            aside.write_bytes(data[cut:])
            with self.path.open("r+b") as handle:
                handle.truncate(cut)
                os.fsync(handle.fileno())
            self.repaired_from = aside
        return list(iter_records(self.path))  # empty is fine: a stage that recorded nothing yet

    def append(self, record: RunRecord) -> None:
        line = (json.dumps(record.to_json(), sort_keys=False) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(line)
            while view:  # os.write may write less than asked (rare on files, legal)
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def extend(self, records: Iterable[RunRecord]) -> None:
        for record in records:
            self.append(record)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def run_id_for(key: RunKey) -> str:
    """`{stage}-{config}-{recipe}-{input}-r{rep}-{hash8}`, stable for the same key."""
    exact = "\x1f".join([key.stage, key.config, key.recipe, key.input, str(key.repetition)])
    digest = hashlib.sha256(exact.encode("utf-8")).hexdigest()[:8]
    parts = [_UNSAFE.sub("_", p) for p in (key.stage, key.config, key.recipe, key.input)]
    return f"{'-'.join(parts)}-r{key.repetition}-{digest}"
