"""`run.mode: custom-resource` and per-run mcp-host pods end to end, on the platform
of platform_env.py (local control plane with kwok, the HTTP simulator, a real
Prometheus, the real operator).

Runs are started by creating a test-only `RecipeRun` custom resource; the platform's
recipe controller, which cannot be had here, is played by `RecipeRunBridgeForTests`
(recipe_run_bridge.py): it forwards the WRC's passthrough environment to the run (and,
when asked, to one mcp-host pod per run), runs it on the simulator and writes the
simulator's status into the RecipeRun's status.

Each test runs its own tiny matrix (2 configurations x 2 inputs x 1 repetition) whose
configuration names carry the test's tag: run ids are stable per (stage,
configuration, recipe, input, repetition), and the simulator, like a platform, refuses
a run id it has already run.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import connection, install_crd
from kubernetes import client
from platform_env import MCP_HOST_SELECTOR, PlatformEnv, deep_merge, platform_env
from recipe_run_bridge import API_VERSION, GROUP, KIND, PLURAL, VERSION, RecipeRunBridgeForTests
from recipe_run_bridge import recipe_run_crd as _recipe_run_crd
from spillover_harness.cluster.observe import exec_sh
from spillover_harness.fixtures import build_fixtures
from spillover_harness.results.records import RunRecord, read_records
from spillover_operator.client import ExecFailed
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR
from spillover_operator.exit_codes import API as EXIT_CLUSTER
from spillover_operator.exit_codes import OK as EXIT_OK

pytestmark = pytest.mark.integration

HARNESS = Path(sys.executable).parent / "spillover-harness"
SEED = 20261130
MEASURED = (
    "hit_iteration_limit", "iterations", "input_tokens", "output_tokens", "duration_s",
    "status_report_bytes", "quality_ok", "disk_clean", "logs_clean",
)  # fmt: skip


# The configuration judged against off: its name, environment and the default it decides.
DEFAULT_CONFIG = ("128KiB", {}, "131072")
SMALL_CONFIG = ("32KiB", {THRESHOLD_VAR: "32768"}, "32768")


def matrix(tag: str, config: tuple[str, dict[str, str], str] = DEFAULT_CONFIG) -> dict[str, Any]:
    name, config_env, decides = config
    off, other = f"off-{tag}", f"{name}-{tag}"
    return {
        "name": f"cluster-cr-{tag}",
        "seed": SEED,
        "configurations": [
            {"name": off, "env": {ENABLED_VAR: "false"}},
            {"name": other, "env": config_env},
        ],
        "recipes": [
            {"name": "code-review", "inputs": [{"name": "large", "size_class": "large"}]},
            {"name": "summarize", "inputs": [{"name": "document", "size_class": "medium"}]},
        ],
        "repetitions": {"sim": 1, "minikube": 1, "dev": 1},
        "run_timeout_s": 30,
        "concurrency": 1,
        "acceptance": {
            "baseline": off,
            "token_tolerance": 0.1,
            "quality_recipes": ["summarize"],
        },
        "decision": {"chain": [{"config": other, "default": decides}], "fallback": "false"},
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformEnv]:
    tmp = tmp_path_factory.mktemp("cluster-cr")
    with platform_env(tmp, matrix("base"), "cluster-cr") as e:
        install_crd(e.api, _recipe_run_crd())
        yield e


def cr_profile(env: PlatformEnv, **overrides: Any) -> dict[str, Any]:
    """The platform_env profile with runs started as RecipeRun objects."""
    profile = env.profile()
    profile["run"] = {
        "mode": "custom-resource",
        "api_version": API_VERSION,
        "kind": KIND,
        "plural": PLURAL,
        "template": {
            "metadata": {"labels": {"spillover-test": "cr-mode"}},
            "spec": {
                "recipe": "{recipe}",
                "input": "{input}",
                "runId": "{run_id}",
                "seed": "{seed}",
                "repetition": "{repetition}",
            },
        },
        "poll_interval_s": 0.2,
    }
    profile["fields"] = {
        "outcome": {"path": "$.status.phase"},
        "iterations": "$.status.iterations",
        "input_tokens": "$.status.tokensUsed.input",
        "output_tokens": "$.status.tokensUsed.output",
        "tools_called": "$.status.toolsCalled",
        "duration_s": "$.status.durationSeconds",
    }
    profile["disk"]["output_dir_path"] = "$.status.outputDir"
    return deep_merge(profile, overrides)


def run_stage(
    env: PlatformEnv, tag: str, profile: dict[str, Any], config: Any = DEFAULT_CONFIG
) -> tuple[Path, Any]:
    """`spillover-harness run --stage minikube` (the console script) on the tag's matrix."""
    matrix_path = env.tmp / f"matrix-{tag}.yaml"
    matrix_path.write_text(yaml.safe_dump(matrix(tag, config), sort_keys=False))
    out = env.tmp / f"results-{tag}"
    args = env.stage_args(env.write_profile(f"profile-{tag}", profile), out)
    args[args.index("--matrix") + 1] = str(matrix_path)
    proc = subprocess.run(
        [str(HARNESS), *args], capture_output=True, text=True, timeout=600, check=False
    )
    return out, proc


def recipe_runs(env: PlatformEnv) -> list[dict[str, Any]]:
    listing: Any = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL
    )
    return list(listing["items"])


def policy_fields(env: PlatformEnv) -> dict[str, Any]:
    spec = env.policy()["spec"]
    return {k: spec.get(k) for k in ("enabled", "thresholdBytes", "budgetBytes")}


def assert_complete(records: list[RunRecord]) -> None:
    for r in records:
        assert r.stage == "minikube"
        assert r.outcome in ("succeeded", "failed"), (r.run_id, r.notes)
        for name in MEASURED:
            assert getattr(r, name) is not None, (r.run_id, name, r.notes)
        assert r.disk_clean is True and r.logs_clean is True, r.notes


# ---------------------------------------------------------------------------- tests


def test_custom_resource_mode_end_to_end(env: PlatformEnv) -> None:
    tag = "cr"
    with env.operator("op-cr"), RecipeRunBridgeForTests(env.api, env.namespace, env.sim.url) as br:
        out, proc = run_stage(env, tag, cr_profile(env))
    assert proc.returncode == EXIT_OK, (proc.stdout + proc.stderr, br.errors)
    assert br.errors == []
    assert "preflight passed" in proc.stderr
    assert f"decision: 131072 (128KiB-{tag} passed)" in proc.stdout, proc.stdout

    records = read_records(out / "runs.jsonl")
    assert len(records) == 4
    assert_complete(records)
    by = {(r.config, r.input): r for r in records}
    # The configuration reached the runs through the policy, the WRC and its passthrough.
    assert (by[(f"128KiB-{tag}", "large")].spillover_persisted or 0) > 0
    assert by[(f"off-{tag}", "large")].spillover_persisted in (0, None)

    # One RecipeRun per run, named from the run id (made a valid Kubernetes name), with
    # the template's spec and label, and the outcome the record holds.
    runs = {
        o["spec"]["runId"]: o for o in recipe_runs(env) if o["spec"]["runId"] in br.started.values()
    }
    # One harness process names all its platform runs `<run_id>-<attempt>`, so a later
    # stage on the same platform is never refused as a duplicate.
    attempts = {rid.rsplit("-", 1)[1] for rid in runs}
    assert len(attempts) == 1, sorted(runs)
    (attempt,) = attempts
    assert sorted(runs) == sorted(f"{r.run_id}-{attempt}" for r in records)
    for r in records:
        platform_id = f"{r.run_id}-{attempt}"
        obj = runs[platform_id]
        name = f"spill-{platform_id}".lower().replace("_", "-")
        assert obj["metadata"]["name"] == name
        assert f"platform run id: {name}" in r.notes, r.notes  # the object to look at
        assert obj["metadata"]["labels"]["spillover-test"] == "cr-mode"
        assert (obj["spec"]["recipe"], obj["spec"]["input"]) == (r.recipe, r.input)
        assert obj["status"]["outcome"] == r.outcome
        assert obj["status"]["iterations"] == r.iterations
        assert obj["status"]["tokensUsed"]["input"] == r.input_tokens

    # The harness's own files never carry tool-result content.
    canaries = build_fixtures(SEED).all_canaries()
    for path in (out / "runs.jsonl", out / "report.md", out / "verdict.json"):
        assert not [c for c in canaries if c in path.read_text()], path
    assert not [c for c in canaries if c in proc.stdout + proc.stderr]


def test_per_run_mcp_host_pod_carries_the_configuration(env: PlatformEnv) -> None:
    """The platform starts one mcp-host pod per run (and ends it with the run): the
    harness reads the values on every mcp-host pod of the recipe before and after each
    run and while it runs, and each record names the pod that served it (the status
    names it) with the values in effect there."""
    tag = "per-run"
    profile = cr_profile(
        env, pods={"mcp_host_per_run": True}, fields={"mcp_host_pod": "$.status.mcpHostPod"}
    )
    with (
        env.operator("op-per-run"),
        RecipeRunBridgeForTests(
            env.api, env.namespace, env.sim.url, mcp_host_pod_per_run=True
        ) as bridge,
    ):
        out, proc = run_stage(env, tag, profile, SMALL_CONFIG)
    assert proc.returncode == EXIT_OK, (proc.stdout + proc.stderr, sorted(set(bridge.errors)))
    assert bridge.errors == []
    records = read_records(out / "runs.jsonl")
    assert len(records) == 4
    assert_complete(records)

    expected = {
        f"off-{tag}": {ENABLED_VAR: "false", THRESHOLD_VAR: None, BUDGET_VAR: None},
        f"32KiB-{tag}": {ENABLED_VAR: "true", THRESHOLD_VAR: "32768", BUDGET_VAR: None},
    }
    served = {pod for pod in bridge.pods.values()}
    for r in records:
        assert r.mcp_host_pods is not None and len(r.mcp_host_pods) == 1, (r.run_id, r.notes)
        (pod,) = r.mcp_host_pods
        # The pod the record names is the one the bridge created for that run.
        run_names = [n for n, p in bridge.pods.items() if p == pod.name and r.run_id.lower() in n]
        assert run_names, (pod.name, bridge.pods)
        assert pod.uid and pod.values == expected[r.config], (r.config, pod)
    assert len(served) == 4
    assert "mcp-host pods that served the runs" in (out / "report.md").read_text()


def test_per_run_mcp_host_pod_with_a_stale_env_stops_the_stage(env: PlatformEnv) -> None:
    """A WRC that does not forward the configuration: the per-run pod carries the
    environment from before the change. The harness sees it while the run runs: the
    stage stops after that first run with exit 5 naming the pod and what differs;
    nothing is recorded; the policy is restored."""
    tag = "stale"
    profile = cr_profile(env)
    before = policy_fields(env)
    with env.operator("op-stale"):
        stale = RecipeRunBridgeForTests(env.api, env.namespace, env.sim.url).forwarded_env()
        assert stale[ENABLED_VAR] == "true"  # what the WRC forwarded before the stage
        with RecipeRunBridgeForTests(
            env.api, env.namespace, env.sim.url, mcp_host_pod_per_run=True, stale_env=stale
        ) as bridge:
            out, proc = run_stage(env, tag, profile)
    assert proc.returncode == EXIT_CLUSTER, (proc.stdout + proc.stderr, bridge.errors)
    assert bridge.errors == []
    assert len(bridge.pods) == 1  # one run was spent, then the stage stopped
    (pod,) = bridge.pods.values()
    assert f"error: stage minikube stopped: configuration 'off-{tag}': mcp-host pod(s) of" in (
        proc.stderr
    )
    assert f"pod {pod} (ENABLED expected 'false', found 'true')" in proc.stderr
    assert "Traceback" not in proc.stderr
    records = out / "runs.jsonl"
    assert not records.exists() or records.read_text().strip() == ""
    assert "policy restored to" in proc.stderr
    assert policy_fields(env) == before


def test_a_failing_exec_command_is_reported(env: PlatformEnv) -> None:
    """With exec available (kwok's ClusterExec runs it on this host), a command that
    exits non-zero raises instead of passing for empty output."""
    core = client.CoreV1Api(env.api)
    pod = core.list_namespaced_pod(env.namespace, label_selector=MCP_HOST_SELECTOR).items[0]
    conn = connection(env.api, env.namespace)
    assert exec_sh(conn, env.namespace, pod.metadata.name, "mcp-host", "echo ok") == "ok\n"
    with pytest.raises(ExecFailed, match="exit status 3"):
        exec_sh(conn, env.namespace, pod.metadata.name, "mcp-host", "exit 3")
