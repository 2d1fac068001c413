"""Cluster mode end to end on real parts.

- the local control plane (etcd, kube-apiserver, controllers, kwok) started by this
  module with kwok's ClusterExec (exec runs on this host) and ClusterPortForward
  (pod port 8080 -> the simulator, 8081 -> a simulator with its fault switches on),
  and ClusterLogs fed with the simulators' log lines (platform_env.py);
- the real operator (`kopf run`) applying the SpilloverPolicy to a WRC Deployment;
- the simulator served over HTTP on loopback playing the platform (runs, logs, metrics);
- a real Prometheus scraping both simulators.

The harness runs a reduced matrix (3 configurations x 2 inputs x 1 repetition)
through `spillover-harness run --stage minikube`, applying each configuration
through the policy.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_helpers import DynamicClient, create_object, is_ready, wait_for
from kubernetes import client
from matrix_builders import cluster_matrix
from platform_env import PlatformEnv, fake_deployment, platform_env
from spillover_harness.cli import main
from spillover_harness.cluster.kubeconn import Target
from spillover_harness.cluster.preflight import run_preflight
from spillover_harness.fixtures import build_fixtures
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.profile import load_profile
from spillover_harness.results.records import read_records
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR
from spillover_operator.exit_codes import API as EXIT_CLUSTER
from spillover_operator.exit_codes import OK as EXIT_OK
from spillover_operator.exit_codes import PREFLIGHT as EXIT_PREFLIGHT

pytestmark = pytest.mark.integration

MATRIX = cluster_matrix("cluster-e2e")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformEnv]:
    with platform_env(tmp_path_factory.mktemp("cluster-stage"), MATRIX, "cluster-stage") as e:
        yield e


def _ready_for_generation(e: PlatformEnv) -> bool:
    return is_ready(e.policy())


def _replica_set_envs(e: PlatformEnv) -> list[dict[str, str]]:
    sets = client.AppsV1Api(e.api).list_namespaced_replica_set(
        e.namespace, label_selector="app=wrc"
    )
    return [
        {v.name: v.value for v in rs.spec.template.spec.containers[0].env or []}
        for rs in sets.items
    ]


def _stage_args(e: PlatformEnv, profile: Path, out: Path) -> list[str]:
    return e.stage_args(profile, out)


def _context(e: PlatformEnv) -> str:
    return e.context


# ---------------------------------------------------------------------------- tests


def test_preflight_passes_against_the_local_cluster(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    with env.operator("op-preflight"):
        wait_for("the operator to apply the policy", lambda: _ready_for_generation(env))
        code = main([
            "preflight", "--stage", "minikube", "--profile", str(env.profile_path),
            "--kubeconfig", str(env.cluster.kubeconfig), "--context", _context(env),
            "--matrix", str(env.matrix_path),
        ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    for name in ("kube context", "SpilloverPolicy CRD", "operator", "policy", "WRC passthrough",
                 "recipes", "Prometheus", "fixtures"):  # fmt: skip
        assert f"✔ {name}:" in out, out
    assert "preflight passed" in out


def test_preflight_names_a_kubectl_that_cannot_run_and_takes_the_one_given_by_flag(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run.access: port-forward` runs the profile's kubectl unless `--kubectl` names
    another (the make targets pass the one `make kubectl` builds): one that cannot run
    fails the recipes check naming it and the fix, not as an unreachable Service."""
    ours = str(env.profile()["kubectl"])
    missing = str(env.tmp / "no-such-dir" / "kubectl")
    profile = env.write_profile("profile-no-kubectl", {**env.profile(), "kubectl": missing})

    def preflight(*extra: str) -> tuple[int, str]:
        code = main([
            "preflight", "--stage", "minikube", "--profile", str(profile),
            "--kubeconfig", str(env.cluster.kubeconfig), "--context", _context(env),
            "--matrix", str(env.matrix_path), *extra,
        ])  # fmt: skip
        return code, capsys.readouterr().out

    with env.operator("op-preflight-kubectl"):
        wait_for("the operator to apply the policy", lambda: _ready_for_generation(env))
        code, out = preflight()
        assert code == EXIT_PREFLIGHT, out
        assert f"✘ recipes: execute endpoint svc/wrc:{env.profile()['run']['port']}" in out, out
        assert f"cannot run {missing} port-forward: FileNotFoundError" in out, out
        assert "fix: name a kubectl that runs: --kubectl PATH" in out, out
        assert "preflight FAILED: recipes" in out, out
        code, out = preflight("--kubectl", ours)
        assert code == EXIT_OK, out
        assert "✔ recipes:" in out and "preflight passed" in out, out


def test_minikube_stage_end_to_end_through_the_operator(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    before = env.policy()["spec"]
    out_dir = env.tmp / "results-clean"
    with env.operator("op-e2e"):
        code = main(_stage_args(env, env.profile_path, out_dir))
        captured = capsys.readouterr()
        assert code == EXIT_OK, captured.out + captured.err
        wait_for("the restored policy to be applied", lambda: _ready_for_generation(env))
    assert "decision: 131072" in captured.out, captured.out
    assert "mcp-host version: sha256:local-simulator" in captured.out
    # Preflight ran first, then each configuration was applied and verified.
    assert "preflight passed" in captured.err
    for name in ("off", "128KiB", "32KiB"):
        assert f"configuration {name}: applied" in captured.err, captured.err
    # The Deployment's template carried each configuration (one ReplicaSet each).
    envs = _replica_set_envs(env)
    assert any(e.get(ENABLED_VAR) == "false" and THRESHOLD_VAR not in e for e in envs), envs
    assert any(e.get(ENABLED_VAR) == "true" and THRESHOLD_VAR not in e for e in envs), envs
    assert any(e.get(ENABLED_VAR) == "true" and e.get(THRESHOLD_VAR) == "32768" for e in envs), envs
    # Policy restored to what it was before the stage.
    after = env.policy()["spec"]
    assert {k: after.get(k) for k in ("enabled", "thresholdBytes", "budgetBytes")} == {
        k: before.get(k) for k in ("enabled", "thresholdBytes", "budgetBytes")
    }
    assert env.wrc_env()[ENABLED_VAR] == "true" and THRESHOLD_VAR not in env.wrc_env()
    # Records complete: every field measured.
    records = read_records(out_dir / "runs.jsonl")
    assert len(records) == 6
    assert [r.config for r in records] == ["off", "off", "128KiB", "128KiB", "32KiB", "32KiB"]
    for r in records:
        assert r.stage == "minikube"
        assert r.outcome in ("succeeded", "failed"), r.notes
        for name in ("hit_iteration_limit", "iterations", "input_tokens", "output_tokens",
                     "duration_s", "status_report_bytes", "quality_ok", "disk_clean",
                     "logs_clean"):  # fmt: skip
            assert getattr(r, name) is not None, (r.run_id, name, r.notes)
        # A counter with no series at all yet (a fresh mcp-host, spillover off) is "not
        # measured", never 0: null with the collector's note.
        for name, metric in (("spillover_persisted", "persisted"), ("spillover_reads", "reads")):
            if getattr(r, name) is None:
                assert any(metric in n and "not measured" in n for n in r.notes), r.notes
        assert r.disk_clean is True and r.logs_clean is True, r.notes
    by = {(r.config, r.input): r for r in records}
    assert by[("off", "large")].spillover_persisted in (0, None)
    assert (by[("128KiB", "large")].spillover_persisted or 0) > 0  # the config reached the runs
    assert (by[("32KiB", "document")].spillover_persisted or 0) > 0
    assert by[("128KiB", "document")].spillover_persisted in (0, None)
    # Each run carries its configuration block's memory figures (this control plane has
    # no kubelet metrics: read, and not measured), and the results kept inline because
    # the budget was full, counted in the mcp-host's logs (the local profile's pattern).
    assert [r.mcp_host_memory.block if r.mcp_host_memory else None for r in records] == [
        1, 1, 2, 2, 3, 3
    ]  # fmt: skip
    assert all(r.mcp_host_memory and r.mcp_host_memory.peak_bytes is None for r in records)
    # ... but restarts and OOM kills are, from the pods' own status (restarts_from)
    assert {(r.mcp_host_memory.restarts, r.mcp_host_memory.oom_kills) for r in records} == {
        (0, 0)
    }, [r.mcp_host_memory for r in records]
    assert [r.budget_inline for r in records] == [0] * 6
    report = (out_dir / "report.md").read_text()
    assert "## mcp-host memory" in report and "peak_working_set query gave no" in report
    # no switch waited for a scrape: each block's figures were looked for again in
    # Prometheus' later samples after the stage, and are null with their note
    assert "peak_working_set query gave no single number (block(s) 1, 2, 3)" in report
    # the kubelet Summary was asked during each block; kwok's nodes serve none, so the
    # report says the peak is Prometheus' alone (here: not measured at all)
    assert "memory: the kubelet Summary was not read (" in report, report[-4000:]
    stage = json.loads((out_dir / "stage.json").read_text())
    assert stage["driver"]["mcp_host_version"] == "sha256:local-simulator"
    assert "sha256:local-simulator" in (out_dir / "report.md").read_text()
    # The harness's own files never carry tool-result content.
    canaries = build_fixtures(MATRIX["seed"]).all_canaries()  # type: ignore[arg-type]
    for path in (out_dir / "runs.jsonl", out_dir / "report.md", out_dir / "verdict.json"):
        text = path.read_text()
        assert not [c for c in canaries if c in text], path
    assert not [c for c in canaries if c in captured.out + captured.err]


def test_a_second_stage_on_the_same_platform_is_not_refused_as_a_duplicate(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run ids are stable per (stage, config, cell, repetition), and the platform keeps
    its runs: two stages into two results directories must not collide on the platform
    (each harness process names its platform runs `<run_id>-<attempt>`)."""
    outs = [env.tmp / "results-again-1", env.tmp / "results-again-2"]
    with env.operator("op-again"):
        for out_dir in outs:
            code = main(_stage_args(env, env.profile_path, out_dir))
            captured = capsys.readouterr()
            assert code == EXIT_OK, captured.out + captured.err
        wait_for("the restored policy to be applied", lambda: _ready_for_generation(env))
    first, second = (read_records(o / "runs.jsonl") for o in outs)
    assert [r.run_id for r in first] == [r.run_id for r in second]  # the same plan
    assert [r.outcome for r in second if r.outcome == "harness_error"] == [], [
        r.notes for r in second
    ]
    platform_ids = {n for r in first + second for n in r.notes if n.startswith("platform run id")}
    assert len(platform_ids) == len(first) + len(second), sorted(platform_ids)


def test_faulty_mcp_host_fails_no_leak(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = env.tmp / "results-faulty"
    with env.operator("op-faulty"):
        code = main(_stage_args(env, env.faulty_profile_path, out_dir))
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.out + captured.err
    assert "decision: false" in captured.out, captured.out
    assert "no_leak" in captured.out
    records = read_records(out_dir / "runs.jsonl")
    enabled = [r for r in records if r.config != "off"]
    assert all(r.logs_clean is False for r in enabled), [r.notes for r in enabled]
    assert any(r.disk_clean is False for r in enabled)
    verdict = json.loads((out_dir / "verdict.json").read_text())
    assert verdict["configs"]["128KiB"]["criteria"]["no_leak"]["status"] == "fail"


def test_a_configuration_not_applied_stops_the_stage_before_any_run(
    env: PlatformEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """No operator running: the first configuration never becomes Ready; the stage stops
    with exit API (5) and a clear message, no record is written, the policy is restored."""
    before = env.policy()["spec"]
    out_dir = env.tmp / "results-mismatch"
    args = _stage_args(env, env.profile_path, out_dir)
    args[args.index("--apply-timeout") + 1] = "3"
    code = main(args)
    captured = capsys.readouterr()
    assert code == EXIT_CLUSTER, captured.out + captured.err
    assert "configuration 'off': not applied" in captured.err
    assert "is the operator running?" in captured.err
    records_file = out_dir / "runs.jsonl"
    assert not records_file.exists() or records_file.read_text().strip() == ""
    after = env.policy()["spec"]
    assert after.get("enabled") == before.get("enabled")
    assert after.get("thresholdBytes") == before.get("thresholdBytes")


def test_ctrl_c_restores_the_policy(env: PlatformEnv) -> None:
    """SIGINT to the real CLI after the first configuration was applied: exit 130, and
    the policy is back to what it was before the stage (applied by the operator)."""
    before = env.policy()["spec"]
    out_dir = env.tmp / "results-ctrl-c"
    script = Path(sys.executable).parent / "spillover-harness"
    with env.operator("op-ctrl-c"):
        wait_for("the operator to apply the policy", lambda: _ready_for_generation(env))
        proc = subprocess.Popen(
            [str(script), *_stage_args(env, env.profile_path, out_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stderr is not None
            seen: list[str] = []
            for line in proc.stderr:
                seen.append(line)
                if "configuration off: applied" in line:
                    break
            assert any("configuration off: applied" in s for s in seen), "".join(seen)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, out + err
        assert "policy restored to" in err, err
        wait_for("the restored policy to be applied", lambda: _ready_for_generation(env))
    after = env.policy()["spec"]
    for key in ("enabled", "thresholdBytes", "budgetBytes"):
        assert after.get(key) == before.get(key), (key, before, after)
    assert env.wrc_env()[ENABLED_VAR] == "true"


def test_preflight_names_each_failure_and_its_fix(env: PlatformEnv) -> None:
    matrix = load_matrix(env.matrix_path)
    fixtures = build_fixtures(matrix.seed)
    target = Target(str(env.cluster.kubeconfig), _context(env))
    profile = load_profile(env.profile_path)
    apps = client.AppsV1Api(env.api)

    def failed() -> dict[str, str]:
        result = run_preflight(profile, target, "minikube", matrix, fixtures)
        return {c.name: c.detail + " | fix: " + c.fix for c in result.checks if not c.ok}

    # Operator missing (its Deployment gone).
    apps.delete_namespaced_deployment("spillover-operator", env.namespace)
    wait_for("preflight to notice the operator is gone", lambda: "operator" in failed())
    assert "make deploy" in failed()["operator"]
    op_labels = {"app.kubernetes.io/name": "spillover-operator"}
    create_object(
        env.api, fake_deployment(env.namespace, "spillover-operator", op_labels, "operator")
    )
    wait_for("the operator to be back", lambda: "operator" not in failed())

    # Passthrough missing: the WRC container forwards nothing (no operator to fix it).
    dep = apps.read_namespaced_deployment("wrc", env.namespace)
    for var in dep.spec.template.spec.containers[0].env:
        if var.name == PASSTHROUGH_VAR:
            var.value = "OPENAI_API_KEY"
    apps.replace_namespaced_deployment("wrc", env.namespace, dep)
    problems = failed()
    assert "WRC passthrough" in problems
    assert "lacks CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED" in problems["WRC passthrough"]

    # Prometheus missing: nothing listens at the profile's URL.
    bad = profile.model_copy(
        update={"prometheus": profile.prometheus.model_copy(update={"url": "http://127.0.0.1:1"})}
    )
    result = run_preflight(bad, target, "minikube", matrix, fixtures)
    prom = next(c for c in result.checks if c.name == "Prometheus")
    assert not prom.ok and "unreachable" in prom.detail and "port-forward" in prom.fix

    # The CRD missing (last: it deletes every policy). The operator is not running to
    # remove its finalizer from the policy, so drop it, as an admin would.
    custom = client.CustomObjectsApi(env.api)
    group = ("spillover.clerum.io", "v1alpha1", env.namespace, "spilloverpolicies", "spillover")
    custom.patch_namespaced_custom_object(*group, {"metadata": {"finalizers": None}})
    custom.delete_namespaced_custom_object(*group)
    DynamicClient(env.api).resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    ).delete(name="spilloverpolicies.spillover.clerum.io")
    wait_for("preflight to notice the CRD is gone", lambda: "SpilloverPolicy CRD" in failed())
    assert "kubectl apply -k manifests/crd" in failed()["SpilloverPolicy CRD"]
    code = main([
        "preflight", "--stage", "minikube", "--profile", str(env.profile_path),
        "--kubeconfig", str(env.cluster.kubeconfig), "--context", _context(env),
        "--matrix", str(env.matrix_path),
    ])  # fmt: skip
    assert code == EXIT_PREFLIGHT
