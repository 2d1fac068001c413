"""What a stage wrote, read back as models: `verdict.json` and `stage.json`.

`verdict.json` is written from `evaluate.schema.Verdict`; the callers that act on it
(`apply-decision`, the Stage 1 gate of stage dev) need a few of its fields, and need
them checked: a file that is missing, unreadable or not a verdict is an error that
says which, never a `KeyError` or a wrong type passed on. The read models take only
those fields (the rest of the file is ignored) and accept a verdict.json from before
`decided` was written (`VerdictSummary.decided` is None then).

`stage.json` is read through `results_dir.read_stage_file` (the one reader of it) and
validated as `StageSummary`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from spillover_operator.domain.strict_load import MAX_TEXT_CHARS, StrictLoadError, load_json
from spillover_operator.regular_file import read_regular

from spillover_harness.results_dir import STAGE_FILE, ResultsDirError, read_stage_file

VERDICT_FILE = "verdict.json"

__all__ = [
    "VERDICT_FILE",
    "IncompleteSummary",
    "ReadBackError",
    "ResultFileInvalid",
    "ResultFileMissing",
    "ResultFileUnreadable",
    "Stage1Gate",
    "StageDriver",
    "StageProvenance",
    "StageSummary",
    "VerdictSummary",
    "read_stage",
    "read_verdict",
]


class ReadBackError(Exception):
    """A results file that cannot be used. `path` is the file, `cause` a short name of
    what went wrong (`FileNotFoundError`, `JSONDecodeError`, `invalid`), `detail` the
    rest for people."""

    def __init__(self, path: Path, cause: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.cause = cause
        self.detail = detail


class ResultFileMissing(ReadBackError):
    """The file does not exist (the stage did not run, or another directory)."""


class ResultFileUnreadable(ReadBackError):
    """The file exists but cannot be read or is not JSON."""


class ResultFileInvalid(ReadBackError):
    """The file is JSON but not what the stage writes there."""


class _ReadModel(BaseModel):
    # Only what the callers use: the files hold more, written by newer code too.
    model_config = ConfigDict(frozen=True, extra="ignore")


class IncompleteSummary(_ReadModel):
    """`verdict.json`'s `incomplete`: how many runs are missing, and whether the
    criteria judged the stage anyway (`--allow-incomplete`)."""

    missing: StrictInt | StrictStr = "some"
    # a boolean as the evaluator writes it: "false" (a string) would read as true
    judged: StrictBool = False


class VerdictSummary(_ReadModel):
    """The fields of `verdict.json` (`evaluate.schema.Verdict.to_json()`) that the
    callers act on."""

    decision: StrictStr
    # True/False as the evaluator writes it; None: a verdict.json from before the field.
    # Anything else (`"true"`, 1) is not what the evaluator writes: the file is refused.
    decided: StrictBool | None = None
    incomplete: IncompleteSummary | None = None
    stage: StrictStr | None = None
    matrix: StrictStr = ""
    # Each configuration's spillover variables ({} from a verdict.json before the field).
    config_env: dict[StrictStr, dict[StrictStr, StrictStr]] = {}

    @field_validator("config_env", mode="before")
    @classmethod
    def _absent_env_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("incomplete", mode="before")
    @classmethod
    def _mapping_or_none(cls, value: Any) -> Any:
        # The evaluator writes an object or null: anything else is an edited file.
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"an object or null, not {type(value).__name__}")
        return value


class StageDriver(_ReadModel):
    """`stage.json`'s `driver`: where the stage ran."""

    kind: StrictStr | None = None
    profile: StrictStr | None = None
    mcp_host_version: StrictStr | None = None
    simulated_platform: bool = False
    # The simulator's fault switches the stage ran with (`run --stage sim --fault`).
    faults: tuple[StrictStr, ...] = ()

    @field_validator("simulated_platform", mode="before")
    @classmethod
    def _only_true_is_simulated(cls, value: Any) -> bool:
        return value is True

    @field_validator("faults", mode="before")
    @classmethod
    def _null_is_none(cls, value: Any) -> Any:
        return () if value is None else value


class AdaptiveRound(_ReadModel):
    """One round `run --until-stable` added (results_dir.extend_stage)."""

    stability: float | None = None
    decision: StrictStr | None = None
    cells: dict[StrictStr, int] = {}
    why: StrictStr = ""


class Stage1Gate(_ReadModel):
    """`provenance.stage1_gate` of a dev stage: how the Stage 1 gate let it start."""

    status: StrictStr  # "accepted" | "overridden"
    flag: StrictStr | None = None  # the flag that overrode it
    reason: StrictStr | None = None  # --override-stage1's REASON
    stage1_results: StrictStr | None = None
    stage1_decision: StrictStr | None = None


class StageProvenance(_ReadModel):
    """`stage.json`'s `provenance` (`results_dir.Provenance`): what made the stage."""

    harness_version: StrictStr | None = None
    harness_commit: StrictStr | None = None
    # stage sim: {"model": {...}, "memory": {...}}, the simulator's values in effect
    simulator_parameters: dict[StrictStr, dict[StrictStr, int | float | bool | str]] | None = None
    profile: StrictStr | None = None  # cluster stages: --profile as given
    stage1_gate: Stage1Gate | None = None


class StageSummary(_ReadModel):
    """The fields of `stage.json` (`results_dir`) that the callers act on."""

    stage: StrictStr | None = None
    driver: StageDriver = StageDriver()
    # None: a stage.json written before provenance was recorded
    provenance: StageProvenance | None = None
    # The command that continues the stage: it repeats the run's --fault switches.
    resume_command: StrictStr | None = None
    # The rounds `run --until-stable` added, in order (empty: none).
    rounds: tuple[AdaptiveRound, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _rounds_of_adaptive(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            adaptive = value.get("adaptive")
            rounds = adaptive.get("rounds") if isinstance(adaptive, Mapping) else None
            value = {**value, "rounds": rounds if isinstance(rounds, list) else ()}
        return value

    @field_validator("driver", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @property
    def simulated_platform(self) -> bool:
        """A cluster stage on a simulated platform (the simulator as mcp-host): its
        verdict is the simulator's (`results_dir.simulated_platform`)."""
        return self.driver.simulated_platform


def _problems(exc: ValidationError) -> str:
    """The validation errors as one line: `decision: Input should be a valid string`."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(the file)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def read_verdict(results: Path) -> VerdictSummary:
    """The verdict of the stage in `results`; ResultFileMissing, ResultFileUnreadable or
    ResultFileInvalid (`detail`: `no \\`decision\\`` when that is what is wrong)."""
    path = results / VERDICT_FILE
    try:
        # duplicate keys, NaN/Infinity, huge integers and deep nesting refused
        data = load_json(read_regular(path, MAX_TEXT_CHARS).decode("utf-8"), str(path))
    except FileNotFoundError:
        raise ResultFileMissing(path, "FileNotFoundError", "no such file") from None
    except StrictLoadError as exc:
        detail = str(exc).removeprefix(f"{path}: ")
        raise ResultFileUnreadable(path, "JSONDecodeError", detail) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultFileUnreadable(path, type(exc).__name__, str(exc)) from None
    if not isinstance(data, dict):
        raise ResultFileInvalid(path, "invalid", f"a JSON {type(data).__name__}, not an object")
    try:
        return VerdictSummary.model_validate(data)
    except ValidationError as exc:
        bad_decision = any(e["loc"] == ("decision",) for e in exc.errors())
        detail = "no `decision`" if bad_decision else _problems(exc)
        raise ResultFileInvalid(path, "invalid", detail) from None


def read_stage(results: Path) -> StageSummary | None:
    """The stage.json of `results` (None when there is none); ResultFileUnreadable or
    ResultFileInvalid when it cannot be used."""
    path = results / STAGE_FILE
    try:
        data = read_stage_file(results)
    except ResultsDirError as exc:
        raise ResultFileUnreadable(path, "unreadable", str(exc).removeprefix(f"{path}: ")) from None
    if data is None:
        return None
    try:
        return StageSummary.model_validate(data)
    except ValidationError as exc:
        raise ResultFileInvalid(path, "invalid", _problems(exc)) from None
