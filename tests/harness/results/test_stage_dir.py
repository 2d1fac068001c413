"""`results_dir.StageDir`, the one door to a results directory: each file it writes
reads back through the same model (stage.json, verdict.json, memory-lane.json), and a
file missing, unreadable or not what the stage writes is an error that names the file
and says what is wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from record_builders import MATRIX
from spillover_harness.evaluate import evaluate
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.results_dir import (
    AdaptiveRound,
    LaneFileError,
    LanePoint,
    MemoryLane,
    Provenance,
    ReadBackError,
    ResultFileInvalid,
    ResultFileMissing,
    ResultFileUnreadable,
    ResultsDirError,
    StageDir,
    StageFile,
    StageSetup,
    VerdictHeader,
    extend_stage,
    prepare_results_dir,
    written_view,
)
from spillover_harness.results.verdict import Verdict


def _write(tmp_path: Path, name: str, data: Any) -> Path:
    text = data if isinstance(data, str) else json.dumps(data)
    (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def _header(directory: Path) -> Any:
    return StageDir(directory).read_verdict_header()


# -- stage.json ---------------------------------------------------------------------------


def _prepared(out: Path) -> StageDir:
    setup = StageSetup(
        matrix=load_matrix(None),
        stage="sim",
        driver={"kind": "sim", "faults": ["ignore-env"], "study": "sweep"},
        matrix_source="<default>",
        resume_command=None,
        provenance=Provenance(simulator_parameters={"model": {"a": 1.5}}, commit=None),
    )
    out.mkdir()
    prepare_results_dir(out, setup, resume=False)
    return StageDir(out)


def test_stage_json_round_trips_through_its_model(tmp_path: Path) -> None:
    """What `prepare_results_dir` writes reads back as a StageFile, and writing that
    StageFile again gives the same bytes (what a stage.json holds is kept, key for key)."""
    directory = _prepared(tmp_path / "out")
    written = directory.stage_file.read_bytes()
    stage = directory.read_stage()
    assert stage is not None
    assert stage.stage == "sim" and stage.schema_version == 1
    assert stage.driver.faults == ("ignore-env",) and stage.driver.study == "sweep"
    assert stage.provenance is not None and stage.provenance.harness_commit is None
    assert stage.provenance.simulator_parameters == {"model": {"a": 1.5}}
    assert stage.matrix is not None and stage.matrix["name"] == stage.matrix_name
    assert stage.resume_command and "--fault ignore-env" in stage.resume_command
    assert stage.rounds == ()
    directory.write_stage(stage)
    assert directory.stage_file.read_bytes() == written


def test_an_older_stage_json_keeps_its_keys(tmp_path: Path) -> None:
    """A stage.json without the newer keys reads (defaults), and is written back
    without them: nothing is added that the stage did not write."""
    old = {"schema": 1, "stage": "minikube", "driver": {"kind": "cluster", "t2": {"a": 1}}}
    directory = StageDir(_write(tmp_path, "stage.json", old))
    stage = directory.read_stage()
    assert stage is not None and stage.provenance is None and stage.matrix is None
    assert stage.driver.identity() == {"kind": "cluster", "t2": {"a": 1}}  # a driver's own key
    assert stage.to_json() == old


def test_extend_stage_records_rounds_through_the_model(tmp_path: Path) -> None:
    directory = _prepared(tmp_path / "out")
    matrix = load_matrix(None)
    extended = matrix.model_copy(update={"extension": {"code-review/small": 7}})
    record = {"stability": 0.5, "decision": "131072", "cells": {"code-review/small": 7}}
    extend_stage(directory.path, extended, {**record, "why": "w", "until_stable": 0.9, "cap": 9})
    stage = directory.read_stage()
    assert stage is not None and stage.matrix is not None
    assert stage.matrix["extension"] == {"code-review/small": 7}
    assert stage.rounds == (
        AdaptiveRound(**record, why="w", until_stable=0.9, cap=9),  # type: ignore[arg-type]
    )


def test_stage_json_reads_back(tmp_path: Path) -> None:
    assert StageDir(tmp_path).read_stage() is None  # none written: the callers decide
    stage = {
        "schema": 1,
        "stage": "minikube",
        "matrix_name": "spillover-default",
        "driver": {"kind": "cluster", "profile": "local", "mcp_host_version": "sha256:a",
                   "simulated_platform": True},
    }  # fmt: skip
    read = StageDir(_write(tmp_path, "stage.json", stage)).read_stage()
    assert read is not None
    assert read.stage == "minikube"
    assert read.driver.profile == "local" and read.driver.mcp_host_version == "sha256:a"
    assert read.simulated_platform
    assert StageFile.model_validate({"stage": "sim", "driver": None}).driver.kind is None
    assert read.driver.faults == ()
    faulted = {"stage": "sim", "driver": {"kind": "sim", "faults": ["ignore-env"]}}
    assert StageFile.model_validate(faulted).driver.faults == ("ignore-env",)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ("[1", "stage.json"),  # not JSON
        ('{"stage": "sim", "stage": "dev"}', "stage"),  # a key twice
        ([1], "a JSON list, not an object"),
        ({"stage": "minikube", "driver": "x"}, "driver: Input should be a valid dictionary"),
        ({"stage": "sim", "stages": "x"}, "stages: Extra inputs are not permitted"),
        ({"stage": 3}, "stage: Input should be a valid string"),
        ({"driver": {"simulated_platform": "yes"}}, "driver.simulated_platform"),
        ({"provenance": {"harness_version": "1", "extra": 1}}, "provenance.extra"),
        ({"adaptive": {"rounds": [{"why": 1}]}}, "adaptive.rounds.0.why"),
    ],
)
def test_a_stage_json_that_is_not_what_the_harness_writes(
    tmp_path: Path, data: Any, needle: str
) -> None:
    """An unknown field or a wrong type is refused, naming the file, the field and how
    to go on; never a KeyError or a wrong type passed on."""
    directory = StageDir(_write(tmp_path, "stage.json", data))
    with pytest.raises((ResultFileUnreadable, ResultFileInvalid)) as info:
        directory.read_stage()
    assert isinstance(info.value, ResultsDirError)  # the CLI's exit 2
    assert str(directory.stage_file) in str(info.value)
    assert needle in str(info.value)
    assert "run the stage into a new --out" in str(info.value)


def test_a_stage_json_that_is_no_regular_file_is_refused_unread(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "stage.json")  # never waited on
    with pytest.raises(ResultFileUnreadable, match="not a regular file"):
        StageDir(tmp_path).read_stage()


# -- verdict.json -------------------------------------------------------------------------


def test_a_verdict_written_reads_back_as_its_header(tmp_path: Path) -> None:
    """StageDir writes `Verdict.to_json()`; the header reads the same fields back."""
    verdict = evaluate([], MATRIX, allow_incomplete=True, resamples=10)
    directory = StageDir(tmp_path)
    path = directory.write_verdict(verdict)
    assert json.loads(path.read_text(encoding="utf-8")) == verdict.to_json()
    read = directory.read_verdict_header()
    assert read.decision == verdict.decision
    assert read.decided is verdict.decided
    assert read.stage == verdict.stage
    assert read.matrix_name == verdict.matrix_name
    assert read.baseline == verdict.baseline
    assert read.decision_values == verdict.decision_values
    assert (read.incomplete is None) is (verdict.incomplete is None)
    if verdict.incomplete is not None and read.incomplete is not None:
        assert read.incomplete.missing == verdict.incomplete.missing
        assert read.incomplete.judged is verdict.incomplete.judged
    assert read.config_env == verdict.config_env
    assert read.config_env["off"] == {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"}
    assert set(read.configs) == set(verdict.configs)  # the configuration names
    for name, config in verdict.configs.items():
        assert read.configs[name].verdict == config.verdict
        assert {k: c.status for k, c in read.configs[name].criteria.items()} == {
            k: c.status for k, c in config.criteria.items()
        }
    assert len(read.cells) == len(verdict.cells)


def test_the_header_is_derived_from_the_verdict() -> None:
    """Not a copy: every header field is a Verdict field that the file holds, read
    under the name it is written as; a field Verdict does not write is not there."""
    fields = VerdictHeader.model_fields
    for name, info in fields.items():
        source = Verdict.model_fields[name]
        assert not source.exclude
        assert info.validation_alias == (source.serialization_alias or name)
    assert "tolerance" not in fields  # exclude=True: not in verdict.json
    assert fields["matrix_name"].validation_alias == "matrix"
    # a view of the whole Verdict holds exactly what to_json() writes
    whole = written_view(Verdict)
    written = {f.validation_alias for f in whole.model_fields.values()}
    assert written == set(evaluate([], MATRIX, allow_incomplete=True, resamples=10).to_json())


def test_a_verdict_from_before_decided_reads_with_decided_none(tmp_path: Path) -> None:
    read = _header(_write(tmp_path, "verdict.json", {"decision": "131072"}))
    assert read.decided is None and read.incomplete is None and read.matrix_name is None
    assert read.config_env == {}  # a verdict.json from before config_env
    partial = {"decision": "131072", "incomplete": {"missing": 3, "judged": True}}
    read = _header(_write(tmp_path, "verdict.json", partial))
    assert read.incomplete.missing == 3 and read.incomplete.judged is True


@pytest.mark.parametrize(("value", "decided"), [(True, True), (False, False), (None, None)])
def test_decided_is_a_boolean(tmp_path: Path, value: Any, decided: bool | None) -> None:
    data = {"decision": "131072", "decided": value}
    assert _header(_write(tmp_path, "verdict.json", data)).decided is decided


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"decided": "true"}, "decided: Input should be a valid boolean"),
        ({"decided": 1}, "decided: Input should be a valid boolean"),
        ({"incomplete": {"missing": 2, "judged": "false"}}, "incomplete.judged"),
        ({"incomplete": "none"}, "incomplete"),
        ({"stability": {"decision": "most"}}, "stability.decision"),
        ({"decisions": "131072"}, "decisions: not a field of Verdict"),
        ({"incomplete": {"missing": 2, "why": "x"}}, "why: not a field of Incomplete"),
    ],
)
def test_a_verdict_field_unknown_or_of_another_type_is_refused(
    tmp_path: Path, data: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ResultFileInvalid) as info:
        _header(_write(tmp_path, "verdict.json", {"decision": "131072", **data}))
    assert needle in info.value.detail
    assert isinstance(info.value, ResultsDirError)


def test_a_missing_verdict(tmp_path: Path) -> None:
    with pytest.raises(ResultFileMissing) as info:
        _header(tmp_path)
    assert info.value.path == tmp_path / "verdict.json"
    assert info.value.cause == "FileNotFoundError"


def test_a_verdict_that_is_not_json(tmp_path: Path) -> None:
    with pytest.raises(ResultFileUnreadable) as info:
        _header(_write(tmp_path, "verdict.json", "{not json"))
    assert info.value.cause == "JSONDecodeError"
    assert str(tmp_path / "verdict.json") in str(info.value)


def test_a_verdict_that_is_a_fifo_is_refused_unread(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "verdict.json")
    with pytest.raises(ResultFileUnreadable, match="not a regular file"):
        _header(tmp_path)


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ({"decision": 5}, "decision: Input should be a valid string"),
        ({"decided": True}, "no `decision`"),
        ([1, 2], "a JSON list, not an object"),
        ({"decision": "false", "stage": 3}, "stage: Input should be a valid string"),
    ],
)
def test_a_file_that_is_not_a_verdict(tmp_path: Path, data: Any, detail: str) -> None:
    with pytest.raises(ResultFileInvalid) as info:
        _header(_write(tmp_path, "verdict.json", data))
    assert info.value.detail == detail


# -- memory-lane.json ---------------------------------------------------------------------


def test_the_lane_round_trips_and_a_bad_one_is_named(tmp_path: Path) -> None:
    directory = StageDir(tmp_path)
    assert directory.read_lane() is None
    lane = MemoryLane("code-review", "budget", (LanePoint("off", 1, 9, 20, "prometheus@30s"),))
    assert directory.write_lane(lane) == tmp_path / "memory-lane.json"
    assert directory.read_lane() == lane
    directory.lane_file.unlink()
    os.mkfifo(directory.lane_file)  # refused, never waited on
    with pytest.raises(LaneFileError, match="not a regular file"):
        directory.read_lane()


def test_every_read_error_is_a_results_dir_error() -> None:
    """The CLI turns a ResultsDirError into exit 2 with its message."""
    assert issubclass(ReadBackError, ResultsDirError)
