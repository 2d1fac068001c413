"""The cluster stage measures the right pod, only our runs (issue 11), on the platform
of platform_env.py: the local control plane with kwok, the HTTP simulator (its run
environment read from the standing mcp-host pod), a real Prometheus, the real
operator, and `WrcRendererForTests` re-rendering the mcp-host Deployment from the
WRC's env (paused: the pods keep their env).

- a stale mcp-host pod stops the stage before any run, naming the pod;
- a pod that changes mid-stage is caught;
- records name the pod that served them, with its values;
- a foreign run overlapping ours, and log lines without a run id, do not reach our
  records: the matrix with them gives the same measured fields as without them;
- each consistency fault switch of the simulator changes the outcome.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import is_ready, wait_for
from kubernetes import client
from matrix_builders import CLUSTER_SEED, cluster_matrix
from platform_env import MCP_HOST_SELECTOR, PlatformEnv, platform_env
from spillover_harness.cli import main
from spillover_harness.results.records import RunRecord, read_records
from spillover_harness.sim.steprun import SimFaults
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR
from spillover_operator.exit_codes import API as EXIT_CLUSTER
from spillover_operator.exit_codes import INCONCLUSIVE as EXIT_INCONCLUSIVE
from spillover_operator.exit_codes import OK as EXIT_OK

pytestmark = pytest.mark.integration

SEED = CLUSTER_SEED
MATRIX = cluster_matrix("cluster-pods")
# Every field a run measures, but times and durations (and the pod's name and UID,
# which a rollout changes: its values are compared).
MEASURED = (
    "outcome", "hit_iteration_limit", "iterations", "input_tokens", "output_tokens",
    "spillover_persisted", "spillover_reads", "status_report_bytes", "quality_ok",
    "disk_clean", "logs_clean", "consistency_ok",
)  # fmt: skip
VALUES = {
    "off": {ENABLED_VAR: "false", THRESHOLD_VAR: None, BUDGET_VAR: None},
    "128KiB": {ENABLED_VAR: "true", THRESHOLD_VAR: None, BUDGET_VAR: None},
    "32KiB": {ENABLED_VAR: "true", THRESHOLD_VAR: "32768", BUDGET_VAR: None},
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformEnv]:
    with platform_env(tmp_path_factory.mktemp("cluster-pods"), MATRIX, "cluster-pods") as e:
        yield e


def _profile(e: PlatformEnv, name: str, **pods: Any) -> Path:
    profile = e.profile()
    profile["pods"].update(pods)
    return e.write_profile(name, profile)


def _run(
    e: PlatformEnv, capsys: pytest.CaptureFixture[str], out: Path, profile: Path | None = None
) -> tuple[int, str, str]:
    """The stage through the CLI, once the operator has applied the policy."""
    wait_for("the operator to apply the policy", lambda: is_ready(e.policy()))
    code = main(e.stage_args(profile or e.profile_path, out))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _settled(e: PlatformEnv) -> None:
    wait_for("the restored policy to be applied", lambda: is_ready(e.policy()))


def _post(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url + "/runs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as resp:
        resp.read()


class ForeignTraffic:
    """Another user of the shared platform while our stage runs: runs of the same
    recipes started directly on the simulator (their lines reach the same pod logs,
    their increments the same counters), and log lines without any run id carrying
    figures that would spoil ours if they were used."""

    def __init__(self, e: PlatformEnv) -> None:
        self.e = e
        self.started = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ForeignTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _loop(self) -> None:
        n = 0
        while not self._stop.wait(1.0):
            n += 1
            recipe, inp = ("summarize", "document") if n % 2 else ("code-review", "large")
            _post(
                self.e.sim.url,
                {"recipe": recipe, "input": inp, "run_id": f"foreign-{time.time_ns()}",
                 "seed": 7, "env": {}},
            )  # fmt: skip
            self.started += 1
            self.e.cluster.append_pod_log(
                'level=info msg="LLM call started" iteration=99\n'
                'level=info msg="status report received" bodyBytes=999999\n'
                'level=info msg="spillover result persisted" tool=read_document'
            )


def _by_cell(records: list[RunRecord]) -> dict[tuple[str, str], RunRecord]:
    return {(r.config, r.input): r for r in records}


# ---------------------------------------------------------------------------- tests


def test_records_name_the_pod_that_served_them(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    out = env.tmp / "results-served"
    with env.operator("op-served"):
        code, stdout, err = _run(env, capsys, out)
        _settled(env)
    assert code == EXIT_OK, stdout + err
    assert "decision: 131072" in stdout, stdout
    records = read_records(out / "runs.jsonl")
    assert len(records) == 6
    for r in records:
        assert r.mcp_host_pods, (r.run_id, r.notes)
        for pod in r.mcp_host_pods:
            assert pod.name.startswith("mcp-host-") and pod.uid
            assert pod.values == VALUES[r.config], (r.config, pod)
        assert r.consistency_ok is True, r.notes
    # One block's pods are not the next block's: the rollout replaced them.
    names = {r.config: {p.name for p in r.mcp_host_pods or []} for r in records}
    assert names["off"].isdisjoint(names["128KiB"]) and names["128KiB"].isdisjoint(names["32KiB"])
    report = (out / "report.md").read_text()
    assert "## mcp-host pods that served the runs" in report
    assert "THRESHOLD=32768" in report
    # The counters are read once per block and cross-checked in the report.
    assert "counters, block 32KiB (2 run(s)): Prometheus persisted +" in report
    assert ": agree" in report
    # Each block's end (captured at its switch: the rollout replaces the pods) came
    # straight from the simulator Prometheus scrapes, and each block was judged alone.
    assert f"read directly from 1 target(s) ({env.sim.url}/metrics)" in report
    assert "judged per series" in report
    for config in ("off", "128KiB", "32KiB"):
        assert f"configuration {config}: mcp-host pods of summarize carry it: mcp-host-" in err


def test_a_stale_mcp_host_pod_stops_the_stage_before_any_run(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """The WRC stand-in does not re-render: the running mcp-host pod keeps the env it
    has, the configuration `off` never reaches it; the stage waits (here 3 s), then
    stops with exit 5 naming the pod. No run is made."""
    out = env.tmp / "results-stale"
    profile = _profile(env, "profile-stale", current_timeout_s=3)
    before = env.sim.run_ids()
    env.renderer.paused.set()
    try:
        with env.operator("op-stale"):
            code, stdout, err = _run(env, capsys, out, profile)
            _settled(env)
    finally:
        env.renderer.paused.clear()
    assert code == EXIT_CLUSTER, stdout + err
    assert "configuration 'off', recipe code-review" in err
    assert "mcp-host pod(s) still do not carry the configuration: pod mcp-host-" in err
    assert "ENABLED expected 'false', found 'true'" in err
    assert "No run of this configuration was made on them" in err
    assert env.sim.run_ids() == before
    records = out / "runs.jsonl"
    assert not records.exists() or records.read_text().strip() == ""


def test_a_pod_that_changes_mid_stage_is_caught(env: PlatformEnv) -> None:
    """After the first run, the mcp-host pods are rolled to another threshold behind
    the operator's back: the stage (the real CLI) stops naming the new pod, before
    running on it."""
    out = env.tmp / "results-drift"
    profile = _profile(env, "profile-drift", current_timeout_s=3)
    harness = Path(sys.executable).parent / "spillover-harness"
    with env.operator("op-drift"):
        wait_for("the operator to apply the policy", lambda: is_ready(env.policy()))
        proc = subprocess.Popen(
            [str(harness), *env.stage_args(profile, out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            records = out / "runs.jsonl"
            wait_for("the first record", lambda: records.exists() and records.read_text() != "")
            env.renderer.paused.set()
            env.renderer.set_pod_template_env({ENABLED_VAR: "false", THRESHOLD_VAR: "4096"})
            stdout, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            env.renderer.paused.clear()
        _settled(env)
    assert proc.returncode == EXIT_CLUSTER, stdout + err
    assert "THRESHOLD expected unset, found '4096'" in err
    assert "pod mcp-host-" in err
    assert len(read_records(out / "runs.jsonl")) < 6


def test_a_foreign_overlapping_run_does_not_leak_into_our_records(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Done when: the reduced matrix with a concurrent foreign run (and log lines
    without a run id) gives records equal in every measured field, times and durations
    aside, to the same matrix without it."""
    clean_out, busy_out = env.tmp / "results-alone", env.tmp / "results-busy"
    with env.operator("op-foreign"):
        code, stdout, err = _run(env, capsys, clean_out)
        assert code == EXIT_OK, stdout + err
        with ForeignTraffic(env) as foreign:
            code, stdout, err = _run(env, capsys, busy_out)
        assert code == EXIT_OK, stdout + err
        _settled(env)
    assert foreign.started >= 3
    alone, busy = (_by_cell(read_records(o / "runs.jsonl")) for o in (clean_out, busy_out))
    assert alone.keys() == busy.keys()
    for cell, mine in busy.items():
        for name in MEASURED:
            assert getattr(mine, name) == getattr(alone[cell], name), (cell, name, mine.notes)
        assert [p.values for p in mine.mcp_host_pods or []] == [
            p.values for p in alone[cell].mcp_host_pods or []
        ]
        assert mine.status_report_bytes != 999999
    notes = [n for r in busy.values() for n in r.notes]
    assert any("other run(s) in the window excluded" in n for n in notes), notes
    assert any("without a run id not used for fields" in n for n in notes), notes
    # The counters, moved by the foreign runs too, are only a block-level cross-check.
    assert "differ (other runs overlapped?)" in (busy_out / "report.md").read_text()


@pytest.mark.parametrize(
    ("fault", "broken"),
    [
        (SimFaults(ignore_env=True), "32KiB"),
        (SimFaults(default_threshold=32768), "128KiB"),
        (SimFaults(feed_first_party=True), "128KiB"),
    ],
    ids=["ignores-env", "drifted-default", "first-party-fed"],
)
def test_each_consistency_fault_changes_the_outcome(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str], fault: SimFaults, broken: str
) -> None:
    out = env.tmp / f"results-fault-{len(list(env.tmp.glob('results-fault-*')))}"
    env.sim.faults = fault
    try:
        with env.operator("op-fault"):
            code, stdout, err = _run(env, capsys, out)
            _settled(env)
    finally:
        env.sim.faults = SimFaults()
    assert code in (EXIT_OK, EXIT_INCONCLUSIVE), stdout + err
    assert "decision: 131072" not in stdout, stdout
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["configs"][broken]["verdict"] != "pass", verdict
    report = (out / "report.md").read_text()
    assert "## Consistency checks that broke" in report
    assert f"- `{broken}`:" in report
    records = read_records(out / "runs.jsonl")
    assert any(r.consistency_ok is False for r in records)


def test_the_platforms_t2_lane_runs_first_and_its_verdict_is_reported(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The profile names the platform's T2 preflight and lane (here two commands in a
    git checkout standing for the platform's); they run before the stage, and their
    verdict and exact head go into stage.json and the report. The mcp-host version
    comes from a pod annotation naming the commit (mcp_host_version_source)."""
    platform = tmp_path / "platform"
    platform.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(platform), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    (platform / "Makefile").write_text("minikube-t2:\n\ttrue\n")
    git("add", "Makefile")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "t2")
    head = git("rev-parse", "HEAD")
    marker = tmp_path / "ran.txt"
    step = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    profile = env.profile()
    profile["mcp_host_version"] = None
    profile["mcp_host_version_source"] = {"kind": "pod_annotation", "key": "clerum.io/commit"}
    profile["stage1_lane"] = {
        "workdir": str(platform),
        "commands": [
            {"name": "preflight", "argv": [sys.executable, "-c", step, str(marker), "preflight"]},
            {"name": "lane", "argv": [sys.executable, "-c", step, str(marker), "lane"]},
        ],
    }
    env.renderer.set_pod_template_annotation("clerum.io/commit", head)
    core = client.CoreV1Api(env.api)

    def annotated() -> bool:
        pods = core.list_namespaced_pod(env.namespace, label_selector=MCP_HOST_SELECTOR).items
        live = [p for p in pods if not p.metadata.deletion_timestamp]
        return bool(live) and all(
            (p.metadata.annotations or {}).get("clerum.io/commit") == head
            and p.status.phase == "Running"
            for p in live
        )

    wait_for("the annotated mcp-host pods", annotated)
    out = env.tmp / "results-t2"
    with env.operator("op-t2"):
        code, stdout, err = _run(env, capsys, out, env.write_profile("profile-t2", profile))
        _settled(env)
    assert code == EXIT_OK, stdout + err
    assert marker.read_text().splitlines() == ["preflight", "lane"]
    assert err.index("platform T2 lane passed") < err.index("preflight passed")
    stage = json.loads((out / "stage.json").read_text())
    assert stage["driver"]["t2"]["verdict"] == "passed"
    assert stage["driver"]["t2"]["head"] == head
    assert stage["driver"]["mcp_host_version"] == head
    report = (out / "report.md").read_text()
    assert f"platform T2 lane passed at head `{head}`" in report


def test_runs_of_one_configuration_at_once(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--concurrency 2`: the inputs of a configuration run together, never two
    configurations at once; the records measure what they measure one at a time, and
    the report says durations were measured under concurrency."""
    alone, together = env.tmp / "results-one-at-a-time", env.tmp / "results-together"
    with env.operator("op-concurrency"):
        code, stdout, err = _run(env, capsys, alone)
        assert code == EXIT_OK, stdout + err
        wait_for("the operator to apply the policy", lambda: is_ready(env.policy()))
        code = main([*env.stage_args(env.profile_path, together), "--concurrency", "2"])
        captured = capsys.readouterr()
        assert code == EXIT_OK, captured.out + captured.err
        _settled(env)
    one, two = (_by_cell(read_records(o / "runs.jsonl")) for o in (alone, together))
    for cell, mine in two.items():
        for name in MEASURED:
            assert getattr(mine, name) == getattr(one[cell], name), (cell, name, mine.notes)
    # Never two configurations at once: each configuration's runs lie between the
    # previous configuration's last end and the next one's first start.
    records = read_records(together / "runs.jsonl")
    spans = {
        c: (min(r.started_at for r in records if r.config == c),
            max(r.finished_at for r in records if r.config == c))
        for c in ("off", "128KiB", "32KiB")
    }  # fmt: skip
    assert spans["off"][1] <= spans["128KiB"][0] and spans["128KiB"][1] <= spans["32KiB"][0]
    assert "durations were measured under concurrency" in (together / "report.md").read_text()
