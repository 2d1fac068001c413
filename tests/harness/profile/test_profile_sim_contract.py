"""The shipped profiles drive the simulator's HTTP contract as they are: the rendered
body is accepted, the JSONPaths find the status fields, and the default log patterns
parse the simulator's logs into the same numbers the simulator reports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from repo_paths import PROFILES
from spillover_harness.collectors.logs import parse_logs
from spillover_harness.profile import HttpRun, JsonPath, Profile, load_profile, render_template
from spillover_harness.sim.server import SimServer, serve
from spillover_harness.sim.steprun import StepLimits


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    # A low iteration limit so the large review hits it (and logs the limit line).
    server, thread = serve(host="127.0.0.1", port=0, limits=StepLimits(max_iterations=6))
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def start_and_poll(
    profile: Profile, sim: SimServer, run_id: str, recipe: str, input_name: str
) -> tuple[dict[str, Any], list[str]]:
    run = profile.run
    assert isinstance(run, HttpRun)
    values = {
        "recipe": recipe,
        "input": input_name,
        "run_id": run_id,
        "namespace": profile.namespace,
        "seed": 11,
        "repetition": 1,
        "env": {},
    }
    body = render_template(run.body, values)
    resp = requests.request(
        run.execute_method, sim.url + str(render_template(run.execute_path, values)), json=body
    )
    assert resp.status_code == 202, resp.text
    platform_id = JsonPath.parse(run.run_id_path).first(resp.json()) if run.run_id_path else run_id
    ids = {"run_id": run_id, "platform_run_id": platform_id, "namespace": profile.namespace}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status: dict[str, Any] = requests.get(sim.url + run.poll_path.format(**ids)).json()
        phase = JsonPath.parse(profile.fields.outcome.path).first(status)
        assert isinstance(phase, str)
        if phase not in profile.fields.outcome.in_progress:
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the run did not finish")
    assert run.logs_path is not None
    text = requests.get(sim.url + run.logs_path.format(**ids)).text
    return status, text.splitlines()


@pytest.mark.parametrize("name", ["minikube", "dev"])
@pytest.mark.parametrize(
    ("recipe", "input_name"),
    [("code-review", "small"), ("code-review", "large"), ("summarize", "document")],
)
def test_shipped_profile_reads_the_simulator(
    sim: SimServer, name: str, recipe: str, input_name: str
) -> None:
    profile = load_profile(name)
    run_id = f"{name}-{recipe}-{input_name}"
    status, lines = start_and_poll(profile, sim, run_id, recipe, input_name)
    fields = profile.fields

    phase = JsonPath.parse(fields.outcome.path).first(status)
    assert isinstance(phase, str)
    assert fields.outcome.outcome(phase) == status["outcome"]

    def get(key: str) -> object:
        path = fields.path(key)
        assert path is not None, key
        return path.first(status)

    assert get("iterations") == status["iterations"]
    assert get("input_tokens") == status["tokensUsed"]["input"]
    assert get("output_tokens") == status["tokensUsed"]["output"]
    assert get("tools_called") == status["toolsCalled"]
    assert get("duration_s") == status["durationSeconds"]
    assert profile.disk.output_dir_path is not None
    assert JsonPath.parse(profile.disk.output_dir_path).first(status) == status["outputDir"]

    parsed = parse_logs(lines, profile.logs)
    assert parsed.iterations == status["iterations"]
    assert parsed.input_tokens == status["tokensUsed"]["input"]
    assert parsed.output_tokens == status["tokensUsed"]["output"]
    assert parsed.hit_iteration_limit == status["hitIterationLimit"]
    assert parsed.status_report_bytes == status["statusReportBytes"]


def test_the_limit_case_is_exercised(sim: SimServer) -> None:
    profile = load_profile("minikube")
    status, lines = start_and_poll(profile, sim, "limit-check", "code-review", "large")
    assert status["hitIterationLimit"] is True
    assert parse_logs(lines, profile.logs).hit_iteration_limit is True


def test_shipped_profiles_ship_with_the_package() -> None:
    here = PROFILES
    shipped = sorted(p.name for p in here.glob("*.yaml"))
    assert shipped == ["dev.yaml", "local.yaml", "minikube.yaml"]


def test_the_shipped_profiles_budget_pattern_counts_the_simulators_lines() -> None:
    """`logs.budget_inline` of every shipped profile matches what the simulated mcp-host
    logs when a step's budget is full: once per step execution, as the mcp-host does,
    so a run's budget_inline on a cluster stage is 1 when its step reached the budget."""
    from spillover_harness.collectors.logs import count_matching

    # read by default: the shipped minikube and dev profiles measure it
    assert Profile.model_fields["logs"].default.budget_inline == "spillover budget reached"
    lines = [
        '{"msg":"spillover budget reached; result kept inline","sizeBytes":200000}',
        '{"msg":"spillover result persisted","sizeBytes":150000}',
    ]
    for name in ("local", "minikube", "dev"):
        pattern = load_profile(PROFILES / f"{name}.yaml").logs.budget_inline
        assert pattern is not None, name
        assert count_matching(lines, pattern) == 1, name
