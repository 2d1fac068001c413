"""The log parser with the profile's patterns: JSON and logfmt lines, nulls when nothing matched."""

from __future__ import annotations

import pytest
from spillover_harness.collectors.logs import find_canaries, lines_containing, parse_logs
from spillover_harness.profile import LogPatterns, load_profile

JSON_LINES = [
    '{"level":"info","msg":"LLM call started","stepId":"s1","iteration":1}',
    '{"level":"info","msg":"LLM response received","inputTokens":1200,"outputTokens":80}',
    '{"level":"info","msg":"tool call","tool":"read_file","bytes":4096}',
    '{"level":"info","msg":"LLM call started","stepId":"s1","iteration":2}',
    '{"level":"info","msg":"LLM response received","inputTokens":5300,"outputTokens":120}',
    '{"level":"info","msg":"status report sent","bodyBytes":2048}',
    '{"level":"info","msg":"status report sent","bodyBytes":512}',
]

LOGFMT_LINES = [
    'ts=2026-11-30T10:00:00Z level=info msg="LLM call started" step=s1 iteration=1',
    'ts=2026-11-30T10:00:01Z level=info msg="LLM response received" input_tokens=100 '
    "output_tokens=7",
    'ts=2026-11-30T10:00:02Z level=info msg="LLM call started" step=s1 iteration=2',
    'ts=2026-11-30T10:00:03Z level=info msg="LLM response received" input_tokens=150 '
    "output_tokens=9",
    'ts=2026-11-30T10:00:04Z level=info msg="LLM call started" step=s1 iteration=3',
    'ts=2026-11-30T10:00:05Z level=info msg="LLM response received" input_tokens=210 '
    "output_tokens=11",
    'ts=2026-11-30T10:00:06Z level=warn msg="Step reached max iterations" step=s1 max=3',
    "ts=2026-11-30T10:00:07Z level=info component=coordinator msg=report bodyBytes=90210",
]


def test_json_lines() -> None:
    f = parse_logs(JSON_LINES)
    assert f.iterations == 2
    assert (f.input_tokens, f.output_tokens) == (6500, 200)
    assert f.hit_iteration_limit is False
    assert f.status_report_bytes == 2048  # the largest report
    assert (f.llm_calls, f.llm_responses) == (2, 2)


def test_logfmt_lines_and_the_limit() -> None:
    f = parse_logs(LOGFMT_LINES)
    assert f.iterations == 3
    assert (f.input_tokens, f.output_tokens) == (460, 27)
    assert f.hit_iteration_limit is True
    assert f.status_report_bytes == 90210


def test_nothing_matched_is_null_never_zero() -> None:
    f = parse_logs(["starting", "tool call read_file", ""])
    assert f.iterations is None
    assert f.input_tokens is None and f.output_tokens is None
    assert f.hit_iteration_limit is None
    assert f.status_report_bytes is None


def test_no_lines() -> None:
    f = parse_logs([])
    assert (f.iterations, f.input_tokens, f.hit_iteration_limit) == (None, None, None)


def test_zero_tokens_reported_is_zero_not_null() -> None:
    f = parse_logs(
        [
            '{"msg":"LLM call started","iteration":1}',
            '{"msg":"LLM response received","inputTokens":0,"outputTokens":0}',
        ]
    )
    assert (f.input_tokens, f.output_tokens) == (0, 0)


def test_limit_without_call_lines_is_still_true() -> None:
    assert parse_logs(["Step reached max iterations"]).hit_iteration_limit is True


def test_output_tokens_missing_stays_null() -> None:
    f = parse_logs(['{"msg":"LLM response received","inputTokens":10}'])
    assert (f.input_tokens, f.output_tokens) == (10, None)


def test_zero_based_iterations() -> None:
    lines = ['{"msg":"LLM call started","iteration":0}', '{"msg":"LLM call started","iteration":4}']
    assert parse_logs(lines, LogPatterns(iteration_base=0)).iterations == 5
    assert parse_logs(lines, LogPatterns()).iterations == 4


def test_iteration_field_of_another_message_is_ignored() -> None:
    f = parse_logs(
        ['{"msg":"tool call","iteration":9}', '{"msg":"LLM call started","iteration":2}']
    )
    assert f.iterations == 2


def test_custom_patterns() -> None:
    patterns = LogPatterns(
        llm_call_started=r"call #(?P<iteration>\d+)",
        llm_response_input_tokens=r"in=(?P<input_tokens>\d+)",
        llm_response_output_tokens=r"out=(?P<output_tokens>\d+)",
        max_iterations=r"LIMIT",
        body_bytes=r"size=(?P<body_bytes>\d+)",
    )
    f = parse_logs(["call #1", "in=5 out=1", "call #2", "in=6 out=2", "LIMIT", "size=10"], patterns)
    assert (f.iterations, f.input_tokens, f.output_tokens) == (2, 11, 3)
    assert (f.hit_iteration_limit, f.status_report_bytes) == (True, 10)


@pytest.mark.parametrize("name", ["minikube", "dev"])
def test_shipped_profiles_parse_both_formats(name: str) -> None:
    patterns = load_profile(name).logs
    assert parse_logs(JSON_LINES, patterns).iterations == 2
    assert parse_logs(LOGFMT_LINES, patterns).input_tokens == 460


def test_lines_containing_and_canaries() -> None:
    lines = ["run=r1 a", "run=r2 CANARY-7f3a", "run=r1 CANARY-0001 leaked"]
    assert lines_containing(lines, "run=r1") == ["run=r1 a", "run=r1 CANARY-0001 leaked"]
    assert find_canaries(lines, ["CANARY-0001", "CANARY-7f3a", "CANARY-none", ""]) == [
        "CANARY-0001",
        "CANARY-7f3a",
    ]
    assert find_canaries(lines_containing(lines, "run=r2"), ["CANARY-0001"]) == []
