"""verdict.json and stage.json read back as models (`spillover_harness.readback`): what
the evaluator and the stage write reads back; a file missing, unreadable or not what
the stage writes is an error that says which."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from record_builders import MATRIX
from spillover_harness.evaluate import evaluate
from spillover_harness.readback import (
    ResultFileInvalid,
    ResultFileMissing,
    ResultFileUnreadable,
    StageSummary,
    VerdictSummary,
    read_stage,
    read_verdict,
)


def _write(tmp_path: Path, name: str, data: Any) -> Path:
    text = data if isinstance(data, str) else json.dumps(data)
    (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_a_verdict_the_evaluator_writes_reads_back(tmp_path: Path) -> None:
    """The read model follows the writer (`evaluate.schema.Verdict.to_json()`)."""
    verdict = evaluate([], MATRIX, allow_incomplete=True, resamples=10)
    read = read_verdict(_write(tmp_path, "verdict.json", verdict.to_json()))
    assert read.decision == verdict.decision
    assert read.decided is verdict.decided
    assert read.stage == verdict.stage
    assert read.matrix == verdict.matrix_name
    assert (read.incomplete is None) is (verdict.incomplete is None)
    if verdict.incomplete is not None and read.incomplete is not None:
        assert read.incomplete.missing == verdict.incomplete.missing
        assert read.incomplete.judged is verdict.incomplete.judged
    # every configuration's spillover variables, the baseline's too
    assert read.config_env == verdict.config_env
    assert read.config_env["off"] == {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"}
    assert read.config_env["128KiB"] == {}


def test_a_verdict_from_before_decided_reads_with_decided_none(tmp_path: Path) -> None:
    read = read_verdict(_write(tmp_path, "verdict.json", {"decision": "131072"}))
    assert read == VerdictSummary(decision="131072")
    assert read.decided is None and read.incomplete is None and read.matrix == ""
    assert read.config_env == {}  # a verdict.json from before config_env


@pytest.mark.parametrize(("value", "decided"), [(True, True), (False, False), (None, None)])
def test_decided_is_a_boolean(tmp_path: Path, value: Any, decided: bool | None) -> None:
    data = {"decision": "131072", "decided": value}
    assert read_verdict(_write(tmp_path, "verdict.json", data)).decided is decided


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"decided": "true"}, "decided: Input should be a valid boolean"),
        ({"decided": 1}, "decided: Input should be a valid boolean"),
        ({"incomplete": {"missing": 2, "judged": "false"}}, "incomplete.judged"),
        ({"incomplete": "none"}, "incomplete"),
    ],
)
def test_a_verdict_field_of_another_type_is_refused(
    tmp_path: Path, data: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ResultFileInvalid) as info:
        read_verdict(_write(tmp_path, "verdict.json", {"decision": "131072", **data}))
    assert needle in info.value.detail


def test_a_missing_verdict(tmp_path: Path) -> None:
    with pytest.raises(ResultFileMissing) as info:
        read_verdict(tmp_path)
    assert info.value.path == tmp_path / "verdict.json"
    assert info.value.cause == "FileNotFoundError"


def test_a_verdict_that_is_not_json(tmp_path: Path) -> None:
    with pytest.raises(ResultFileUnreadable) as info:
        read_verdict(_write(tmp_path, "verdict.json", "{not json"))
    assert info.value.cause == "JSONDecodeError"
    assert str(tmp_path / "verdict.json") in str(info.value)


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ({"decision": 5}, "no `decision`"),
        ({"decided": True}, "no `decision`"),
        ([1, 2], "a JSON list, not an object"),
        ({"decision": "false", "stage": 3}, "stage: Input should be a valid string"),
    ],
)
def test_a_file_that_is_not_a_verdict(tmp_path: Path, data: Any, detail: str) -> None:
    with pytest.raises(ResultFileInvalid) as info:
        read_verdict(_write(tmp_path, "verdict.json", data))
    assert info.value.detail == detail


def test_stage_json_reads_back_through_results_dir(tmp_path: Path) -> None:
    assert read_stage(tmp_path) is None  # none written: not an error, the callers decide
    stage = {
        "schema": 1,
        "stage": "minikube",
        "matrix_name": "spillover-default",
        "driver": {"kind": "cluster", "profile": "local", "mcp_host_version": "sha256:a",
                   "simulated_platform": True},
    }  # fmt: skip
    read = read_stage(_write(tmp_path, "stage.json", stage))
    assert read is not None
    assert read.stage == "minikube"
    assert read.driver.profile == "local" and read.driver.mcp_host_version == "sha256:a"
    assert read.simulated_platform
    assert StageSummary.model_validate({"stage": "sim", "driver": None}).driver.kind is None
    assert read.driver.faults == ()
    faulted = {"stage": "sim", "driver": {"kind": "sim", "faults": ["ignore-env"]}}
    assert StageSummary.model_validate(faulted).driver.faults == ("ignore-env",)


def test_a_stage_json_that_cannot_be_used(tmp_path: Path) -> None:
    with pytest.raises(ResultFileUnreadable, match=r"stage\.json"):
        read_stage(_write(tmp_path, "stage.json", "[1"))
    with pytest.raises(ResultFileInvalid, match="driver: Input should be a valid dictionary"):
        read_stage(_write(tmp_path, "stage.json", {"stage": "minikube", "driver": "x"}))
