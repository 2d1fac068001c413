"""A records file checked against the matrix (issue 12 item 5): empty files, records
outside the matrix, run_ids that contradict the record, duplicates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from record_builders import MATRIX, Spec, make_dataset, make_record
from spillover_harness.evaluate import evaluate
from spillover_harness.results.records import (
    RecordError,
    RecordLog,
    RunRecord,
    read_numbered_records,
    read_records,
)
from spillover_harness.results.records_check import check_against_matrix, read_checked_records


def _good_run(config: str) -> Spec:
    return {
        "hit_iteration_limit": False,
        "input_tokens": 1000 if config == "off" else 900,
        "quality_ok": True,
        "disk_clean": True,
        "logs_clean": True,
    }


def rec(config: str, recipe: str, inp: str, *, stage: str = "sim", **fields: Any) -> RunRecord:
    return make_record(_good_run, config, recipe, inp, stage=stage, **fields)


def lines_of(records: list[RunRecord]) -> list[str]:
    return [json.dumps(r.to_json()) for r in records]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def stage_lines() -> list[str]:
    """The 60 records of a whole sim stage of the default matrix."""
    return lines_of(make_dataset(rec, n=5))


def refused(path: Path) -> str:
    with pytest.raises(RecordError) as info:
        read_checked_records(path, MATRIX)
    return str(info.value)


# -- empty files -------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["empty", "blank-lines"])
def test_an_empty_records_file_says_it_is_empty(tmp_path: Path, content: str) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(content, encoding="utf-8")
    for read in (read_records, read_numbered_records):
        with pytest.raises(RecordError, match=r"runs.jsonl: the records file is empty"):
            read(path)


def test_the_log_of_a_stage_that_recorded_nothing_yet_opens_empty(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text("", encoding="utf-8")
    assert RecordLog(path).open() == []  # resuming such a stage is not an error


# -- a whole stage passes ----------------------------------------------------------------


def test_a_whole_stage_passes_and_keeps_its_order(tmp_path: Path, stage_lines: list[str]) -> None:
    path = write(tmp_path / "runs.jsonl", stage_lines)
    records = read_checked_records(path, MATRIX)
    assert [json.dumps(r.to_json()) for r in records] == stage_lines


def test_line_numbers_count_blank_lines(tmp_path: Path, stage_lines: list[str]) -> None:
    path = write(tmp_path / "runs.jsonl", ["", *stage_lines[:2]])
    assert [n for n, _ in read_numbered_records(path)] == [2, 3]


# -- records that do not fit the matrix --------------------------------------------------


def _edit(lines: list[str], index: int, **changes: Any) -> list[str]:
    data = json.loads(lines[index])
    data.update(changes)
    return [*lines[:index], json.dumps(data), *lines[index + 1 :]]


def test_a_config_that_contradicts_the_run_id_is_refused(
    tmp_path: Path, stage_lines: list[str]
) -> None:
    original = json.loads(stage_lines[4])
    other = "32KiB" if original["config"] != "32KiB" else "off"
    path = write(tmp_path / "runs.jsonl", _edit(stage_lines, 4, config=other))
    message = refused(path)
    assert message.startswith(f"{path}: 1 record(s) do not fit matrix 'spillover-default'")
    assert "line 5: run_id" in message and original["run_id"] in message
    assert "does not match" in message


def test_a_repetition_beyond_the_matrix_is_refused(tmp_path: Path, stage_lines: list[str]) -> None:
    path = write(tmp_path / "runs.jsonl", _edit(stage_lines, 2, repetition=9))
    message = refused(path)
    assert "line 3: repetition 9 is outside the matrix's 5 repetition(s) of stage sim" in message


def test_the_repetitions_are_those_of_the_records_stage(tmp_path: Path) -> None:
    lines = lines_of(make_dataset(rec, n=3, stage="minikube"))  # minikube plans 2
    message = refused(write(tmp_path / "runs.jsonl", lines))
    assert "repetition 3 is outside the matrix's 2 repetition(s) of stage minikube" in message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"config": "16KiB"}, "configuration '16KiB' is not in matrix 'spillover-default'"),
        ({"input": "huge"}, "recipe/input code-review/huge is not in matrix"),
        ({"recipe": "translate"}, "recipe/input translate/"),
    ],
    ids=["config", "input", "recipe"],
)
def test_records_outside_the_matrix_are_refused(
    tmp_path: Path, stage_lines: list[str], changes: dict[str, str], expected: str
) -> None:
    lines = _edit(stage_lines, 0, **changes)
    message = refused(write(tmp_path / "runs.jsonl", lines))
    assert "line 1: " in message and expected in message


def test_the_first_problems_are_listed_on_one_line_the_rest_counted(
    tmp_path: Path, stage_lines: list[str]
) -> None:
    lines = stage_lines
    for index in range(30):
        lines = _edit(lines, index, repetition=9)
    message = refused(write(tmp_path / "runs.jsonl", lines))
    assert "30 record(s) do not fit" in message
    assert "\n" not in message  # one line: the problem, the lines, the fix
    assert "line 1: " in message and "line 3: " in message and "line 4: " not in message
    assert "(and 27 more)" in message and "Fix the records file" in message


def test_records_of_several_stages_are_refused(tmp_path: Path, stage_lines: list[str]) -> None:
    other = lines_of([rec("off", "code-review", "small", stage="dev", repetition=1)])
    message = refused(write(tmp_path / "runs.jsonl", [*stage_lines, *other]))
    assert "mix stages (dev, sim" in message and "dev on line 61" in message


# -- duplicates --------------------------------------------------------------------------


def test_the_same_line_twice_is_accepted_and_the_run_counted_once(
    tmp_path: Path, stage_lines: list[str]
) -> None:
    doubled = [line for line in stage_lines for _ in range(2)]  # every line duplicated
    records = read_checked_records(write(tmp_path / "runs.jsonl", doubled), MATRIX)
    assert len(records) == 120
    v = evaluate(records, MATRIX, resamples=20)
    assert v.records_evaluated == 60 and v.incomplete is None
    assert v.decision == "131072"
    assert any("60 record(s) are exact copies" in w for w in v.warnings)


def test_two_different_records_of_the_same_run_are_refused(
    tmp_path: Path, stage_lines: list[str]
) -> None:
    changed = json.loads(stage_lines[7])
    changed["outcome"] = "failed"
    path = write(tmp_path / "runs.jsonl", [*stage_lines, json.dumps(changed)])
    message = refused(path)
    assert "lines 8 and 61: two different records of the same run" in message
    assert changed["run_id"] in message and "outcome" in message


def test_check_against_matrix_takes_numbered_records(stage_lines: list[str]) -> None:
    records = [RunRecord.from_json(json.loads(line)) for line in stage_lines]
    check_against_matrix(list(enumerate(records, start=1)), MATRIX, "mem")
    bad = records[0].model_copy(update={"repetition": 6})
    with pytest.raises(RecordError, match=r"^mem: 1 record\(s\)[\s\S]*line 1: repetition 6"):
        check_against_matrix([(1, bad)], MATRIX, "mem")


# -- repetitions run --until-stable added ----------------------------------------------


def test_the_stage_files_extension_admits_its_repetitions_and_no_more() -> None:
    """stage.json names the repetitions `run --until-stable` added per cell: the records
    check accepts them in that cell, refuses one beyond them, and refuses an added-looking
    repetition in a cell the stage never extended."""
    from spillover_harness.results.records_check import check_against_stage_file
    from spillover_harness.results.results_dir import StageFile

    stage_file = StageFile.model_validate(
        {
            "stage": "sim",
            "matrix": {"repetitions": {"sim": 5}, "extension": {"code-review/small": 10}},
            "adaptive": {"rounds": [{"cells": {"code-review/small": 10}}]},
        }
    )
    path = Path("results/sim/runs.jsonl")
    added = [(1, rec("off", "code-review", "small", repetition=10))]
    check_against_stage_file(added, stage_file, path)  # nothing raised

    beyond = [*added, (2, rec("off", "code-review", "small", repetition=11))]
    with pytest.raises(RecordError) as info:
        check_against_stage_file(beyond, stage_file, path)
    message = str(info.value)
    assert "line 2: repetition 11" in message
    assert "runs 10 repetition(s) of stage sim (code-review/small included, with" in message

    other_cell = [(1, rec("off", "code-review", "medium", repetition=6))]
    with pytest.raises(RecordError, match=r"line 1: repetition 6 .* runs 5 repetition"):
        check_against_stage_file(other_cell, stage_file, path)


def test_the_matrix_extended_by_the_stage_admits_its_repetitions_and_no_more(
    tmp_path: Path, stage_lines: list[str]
) -> None:
    extended = MATRIX.model_copy(update={"extension": {"code-review/small": 10}})
    more = [rec("off", "code-review", "small", repetition=r) for r in (6, 10)]
    path = write(tmp_path / "runs.jsonl", [*stage_lines, *lines_of(more)])
    assert len(read_checked_records(path, extended)) == len(stage_lines) + 2
    assert "repetition 6 is outside the matrix's 5" in refused(path)  # the plain matrix

    beyond = [rec("off", "code-review", "small", repetition=11)]
    path = write(tmp_path / "beyond.jsonl", [*stage_lines, *lines_of(beyond)])
    with pytest.raises(RecordError, match="repetition 11 is outside the matrix's 10"):
        read_checked_records(path, extended)
