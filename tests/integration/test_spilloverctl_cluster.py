"""spilloverctl against a real Kubernetes API server (the local control plane: etcd,
kube-apiserver, controller-manager, scheduler, kwok making pods Ready), with and
without the real kopf operator running as a subprocess."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    container_manifest,
    create_object,
    deployment_manifest,
    env_map,
    is_ready,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import running_operator
from kubernetes import client
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.domain.model import (
    BUDGET_VAR,
    ENABLED_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_VAR,
)

pytestmark = pytest.mark.integration


# ---- cluster helpers -----------------------------------------------------------------------


def wrc(namespace: str, env: dict[str, str], replicas: int = 2) -> dict[str, Any]:
    containers = [
        container_manifest("controller", "example.invalid/wrc:1", env),
        container_manifest("sidecar", "example.invalid/sidecar:1"),
    ]
    return deployment_manifest(
        "wrc", containers, namespace=namespace, labels={"app": "wrc"}, replicas=replicas
    )


def deployment(api: client.ApiClient, namespace: str, name: str = "wrc") -> dict[str, Any]:
    return read_deployment(api, namespace, name)


def policy(api: client.ApiClient, namespace: str, name: str = "spillover") -> dict[str, Any]:
    return read_policy(api, namespace, name)


def env_of(dep: dict[str, Any], container: str = "controller") -> dict[str, Any]:
    return env_map(dep, container)


def rolled_out(api: client.ApiClient, namespace: str) -> dict[str, Any] | None:
    dep = deployment(api, namespace)
    status = dep.get("status") or {}
    want = dep["spec"].get("replicas", 1)
    done = (
        status.get("observedGeneration") == dep["metadata"]["generation"]
        and status.get("updatedReplicas") == want
        and status.get("availableReplicas") == want
        and status.get("replicas") == want
    )
    return dep if done else None


def events_for(api: client.ApiClient, namespace: str, name: str, reason: str) -> list[Any]:
    items = (
        client.CoreV1Api(api)
        .list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},reason={reason}"
        )
        .items
    )
    return list(items)


def ready_for_generation(api: client.ApiClient, namespace: str) -> dict[str, Any] | None:
    pol = policy(api, namespace)
    return pol if is_ready(pol) else None


def ctl(cluster: LocalCluster, namespace: str, *argv: str) -> tuple[int, str, str]:
    """spilloverctl in-process, exactly as the console script runs it."""
    out, err = io.StringIO(), io.StringIO()
    code = run(
        ["--kubeconfig", str(cluster.kubeconfig), "-n", namespace, *argv],
        stdout=out,
        stderr=err,
    )
    return code, out.getvalue(), err.getvalue()


def operator(cluster: LocalCluster, namespace: str, log_dir: Path) -> Any:
    """The real operator (`kopf run`) watching `namespace` with the admin kubeconfig,
    stopped on exit (kopf_operator.running_operator)."""
    return running_operator(cluster.kubeconfig, namespace, log_dir)


ALL_NAMES = ",".join(SPILLOVER_VARS)


def setup_wrc(
    api: client.ApiClient, namespace: str, env: dict[str, str], spec: dict[str, Any]
) -> None:
    create_object(api, wrc(namespace, env))
    wait_for("the WRC Deployment to roll out", lambda: rolled_out(api, namespace))
    create_object(api, policy_manifest(namespace, spec))


# ---- tests ---------------------------------------------------------------------------------


def test_kill_direct_without_operator_patches_both_and_repeats_as_noop(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    setup_wrc(
        admin,
        namespace,
        {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "OPENAI_API_KEY", ENABLED_VAR: "true"},
        {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": "wrc"}},
    )
    before = deployment(admin, namespace)

    code, out, err = ctl(control_plane, namespace, "kill", "--direct")
    assert code == exit_codes.OK, err
    assert "enabled=true -> enabled=false" in out
    assert "patched directly" in out

    pol = policy(admin, namespace)
    assert pol["spec"]["enabled"] is False
    assert pol["spec"]["thresholdBytes"] == 32768  # the rest of the spec untouched
    dep = deployment(admin, namespace)
    env = env_of(dep)
    assert env[ENABLED_VAR] == "false"
    assert env[THRESHOLD_VAR] == "32768"
    assert BUDGET_VAR not in env
    assert env[PASSTHROUGH_VAR] == f"OPENAI_API_KEY,{ALL_NAMES}"
    assert env["LOG_LEVEL"] == "info"
    assert env_of(dep, "sidecar") == {}
    assert dep["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert events_for(admin, namespace, "spillover", "KillSwitchDirect")
    assert events_for(admin, namespace, "wrc", "KillSwitchDirect")

    code, out, err = ctl(control_plane, namespace, "kill", "--direct")
    assert code == exit_codes.OK, err
    assert "already enabled=false" in out
    assert "nothing to change" in out
    again = deployment(admin, namespace)
    assert again["metadata"]["generation"] == dep["metadata"]["generation"]
    assert env_of(again) == env  # (resourceVersion moves: the rollout updates the status)
    assert policy(admin, namespace)["metadata"]["generation"] == pol["metadata"]["generation"]

    # --wait with --direct waits for the rollout only, and says the status is stale.
    code, out, err = ctl(control_plane, namespace, "kill", "--direct", "--wait", "--timeout", "120")
    assert code == exit_codes.OK, err
    assert "policy status: never written by the operator" in out
    assert "rollout is complete" in out
    assert rolled_out(admin, namespace)


def test_operator_finds_nothing_to_change_after_a_direct_kill(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    setup_wrc(
        admin,
        namespace,
        {PASSTHROUGH_VAR: ALL_NAMES, ENABLED_VAR: "true"},
        {"enabled": True, "target": {"deployment": "wrc"}},
    )
    code, _, err = ctl(control_plane, namespace, "kill", "--direct", "--wait", "--timeout", "120")
    assert code == exit_codes.OK, err
    dep = deployment(admin, namespace)

    with operator(control_plane, namespace, tmp_path):
        pol = wait_for(
            "the operator to report Ready", lambda: ready_for_generation(admin, namespace)
        )
        assert pol["status"]["killSwitch"]["engagedAt"]
        code, out, err = ctl(control_plane, namespace, "status")
        assert code == exit_codes.OK, out + err
        assert "OK: spillover is OFF" in out

    after = deployment(admin, namespace)
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]
    assert env_of(after) == env_of(dep)


def test_status_reports_the_mismatch_when_the_operator_is_not_running(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    setup_wrc(
        admin,
        namespace,
        {PASSTHROUGH_VAR: "FOO"},
        {"enabled": True, "target": {"deployment": "wrc"}},
    )
    with operator(control_plane, namespace, tmp_path):
        wait_for("the operator to apply", lambda: ready_for_generation(admin, namespace))
        wait_for("the operator's rollout", lambda: rolled_out(admin, namespace))
        code, out, err = ctl(control_plane, namespace, "status")
        assert code == exit_codes.OK, out + err

    # The operator is down; the kill switch goes through the policy only.
    code, out, err = ctl(control_plane, namespace, "kill")
    assert code == exit_codes.OK, err
    generation = policy(admin, namespace)["metadata"]["generation"]

    code, out, err = ctl(control_plane, namespace, "status")
    assert code == exit_codes.MISMATCH
    assert (
        f"MISMATCH: policy says enabled=false, the WRC container has {ENABLED_VAR}=true — the "
        f"operator has not applied it yet (generation {generation}, observed "
        f"{generation - 1}; is it running?)"
    ) in out
    assert f"PENDING: the operator has not processed generation {generation}" in out
    assert out.rstrip().splitlines()[-1].startswith("NOT CONSISTENT")

    code, out, _ = ctl(control_plane, namespace, "status", "-o", "json")
    assert code == exit_codes.MISMATCH
    doc = yaml.safe_load(out)
    assert doc["consistent"] is False
    assert doc["deployment"]["env"][ENABLED_VAR] == "true"
    assert doc["deployment"]["expectedEnv"][ENABLED_VAR] == "false"


def test_kill_wait_restore_and_set_through_the_running_operator(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    setup_wrc(
        admin,
        namespace,
        {PASSTHROUGH_VAR: "A,B"},
        {"enabled": True, "target": {"deployment": "wrc", "container": "controller"}},
    )
    with operator(control_plane, namespace, tmp_path):
        code, out, err = ctl(
            control_plane, namespace, "kill", "spillover", "--wait", "--timeout", "120"
        )
        assert code == exit_codes.OK, out + err
        assert "applied by the operator" in out
        assert "rollout:" in err  # progress on stderr
        dep = deployment(admin, namespace)
        assert env_of(dep)[ENABLED_VAR] == "false"
        assert env_of(dep)[PASSTHROUGH_VAR] == f"A,B,{ALL_NAMES}"
        assert rolled_out(admin, namespace)  # --wait returned only after the rollout
        code, out, err = ctl(control_plane, namespace, "status")
        assert code == exit_codes.OK, out + err

        code, out, err = ctl(control_plane, namespace, "restore", "--wait", "--timeout", "120")
        assert code == exit_codes.OK, out + err
        assert env_of(deployment(admin, namespace))[ENABLED_VAR] == "true"

        code, out, err = ctl(
            control_plane, namespace, "set", "--threshold", "32KiB", "--budget", "2MiB",
            "--wait", "--timeout", "120",
        )  # fmt: skip
        assert code == exit_codes.OK, out + err
        env = env_of(deployment(admin, namespace))
        assert (env[THRESHOLD_VAR], env[BUDGET_VAR]) == ("32768", "2097152")

        code, out, err = ctl(
            control_plane, namespace, "set", "--unset-threshold", "--wait", "--timeout", "120"
        )
        assert code == exit_codes.OK, out + err
        env = env_of(deployment(admin, namespace))
        assert THRESHOLD_VAR not in env
        assert env[BUDGET_VAR] == "2097152"
        assert "thresholdBytes" not in policy(admin, namespace)["spec"]

        # Nothing new to apply: no new generation, and --wait still returns at once.
        generation = policy(admin, namespace)["metadata"]["generation"]
        code, out, err = ctl(control_plane, namespace, "restore", "--wait", "--timeout", "120")
        assert code == exit_codes.OK, out + err
        assert "already enabled=true" in out
        assert policy(admin, namespace)["metadata"]["generation"] == generation


def test_wait_without_an_operator_times_out_with_exit_3(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    setup_wrc(admin, namespace, {}, {"enabled": True, "target": {"deployment": "wrc"}})
    code, _, err = ctl(control_plane, namespace, "kill", "--wait", "--timeout", "2")
    assert code == exit_codes.TIMEOUT
    assert "timed out after 2s" in err
    assert "is it running?" in err
    assert "Traceback" not in err
    assert policy(admin, namespace)["spec"]["enabled"] is False  # the change was made


def test_not_found_is_exit_4(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    code, _, err = ctl(control_plane, namespace, "status", "nope")
    assert code == exit_codes.NOT_FOUND
    assert f"SpilloverPolicy 'nope' not found in namespace '{namespace}'" in err

    code, _, err = ctl(control_plane, namespace, "kill", "nope", "--direct")
    assert code == exit_codes.NOT_FOUND

    # A policy whose Deployment does not exist: status says so, --direct writes nothing.
    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}})
    )
    generation = policy(admin, namespace)["metadata"]["generation"]
    code, out, err = ctl(control_plane, namespace, "status")
    assert code == exit_codes.NOT_FOUND
    assert "NOT FOUND" in out
    code, _, err = ctl(control_plane, namespace, "kill", "--direct")
    assert code == exit_codes.NOT_FOUND
    assert "Deployment 'wrc' not found" in err
    pol = policy(admin, namespace)
    assert pol["metadata"]["generation"] == generation
    assert pol["spec"]["enabled"] is True

    # The installed console script, as the Makefile runs it.
    script = Path(sys.executable).parent / "spilloverctl"
    proc = subprocess.run(
        [str(script), "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, "restore",
         "missing", "--wait", "--timeout", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == exit_codes.NOT_FOUND
    assert "SpilloverPolicy 'missing' not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_direct_unset_shadowed_by_envfrom_writes_what_the_operator_would(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Issue 20: an `envFrom` ConfigMap sets THRESHOLD=4096. `set --unset-threshold
    --direct` must not remove the env entry (4096 would be in effect) but write the
    default explicitly, as the operator does: after it the container resolves the
    default, and the operator, started afterwards, finds nothing to change."""
    from spillover_operator.domain.envplan import resolved_env
    from spillover_operator.domain.model import DEFAULTS

    create_object(
        admin,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "wrc-tuning", "namespace": namespace},
            "data": {THRESHOLD_VAR: "4096"},
        },
    )
    manifest = wrc(
        namespace, {ENABLED_VAR: "true", THRESHOLD_VAR: "32768", PASSTHROUGH_VAR: ALL_NAMES}
    )
    manifest["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "wrc-tuning"}}
    ]
    create_object(admin, manifest)
    wait_for("the WRC Deployment to roll out", lambda: rolled_out(admin, namespace))
    create_object(
        admin,
        policy_manifest(
            namespace, {"enabled": True, "thresholdBytes": 32768, "target": {"deployment": "wrc"}}
        ),
    )

    def config_maps(name: str) -> dict[str, str] | None:
        found = client.CoreV1Api(admin).read_namespaced_config_map(name, namespace)
        return dict(found.data or {})

    # The installed console script, as a platform operator runs it.
    script = Path(sys.executable).parent / "spilloverctl"
    proc = subprocess.run(
        [str(script), "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, "set",
         "--unset-threshold", "--direct"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == exit_codes.OK, proc.stdout + proc.stderr
    assert "patched directly" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert "thresholdBytes" not in policy(admin, namespace)["spec"]

    dep = deployment(admin, namespace)
    in_effect = resolved_env(dep, "controller", config_maps)[THRESHOLD_VAR]
    assert (in_effect.value, in_effect.source) == (DEFAULTS[THRESHOLD_VAR], "env")
    assert DEFAULTS[THRESHOLD_VAR] == "131072"
    assert env_of(dep)[THRESHOLD_VAR] == "131072"  # written explicitly: env wins over envFrom

    # What the operator would write: it has nothing to change after the direct patch.
    with operator(control_plane, namespace, tmp_path):
        wait_for("the operator to report Ready", lambda: ready_for_generation(admin, namespace))
    after = deployment(admin, namespace)
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]
    assert env_of(after) == env_of(dep)


# What `spilloverctl kill` (no --wait, no --direct) must not import: it is one GET and one
# PATCH of the policy, and every module it loads is start-up time an incident pays.
KILL_NEEDS_NONE_OF = (
    "kubernetes",  # the plain transport speaks HTTP itself
    "urllib3",
    "yaml",  # the local control plane's kubeconfig is JSON
    "tempfile",  # the client certificate is loaded from memory
    "traceback",  # only for a bug
    "shutil",  # argparse measures the terminal with it; spilloverctl without it
    "spillover_operator.domain.assess",
    "spillover_operator.domain.envplan",
    "spillover_operator.domain.recipe_pods",
    "spillover_operator.reconciler.recipe_reconcile",
    "spillover_operator.domain.status",
    "spillover_operator.observed",
    "spillover_operator.client.pods",
    "spillover_operator.client.deployments",
    "spillover_operator.client.events",
    "spillover_operator.cli.render",
    "spillover_operator.cli.status",
    "spillover_operator.cli.report",
)


def test_a_plain_kill_imports_only_what_it_uses(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    create_object(
        admin, policy_manifest(namespace, {"enabled": True, "target": {"deployment": "wrc"}})
    )
    argv = ["--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, "kill"]
    code = (
        "import sys\n"
        "from spillover_operator.cli.main import run\n"
        f"code = run({argv!r})\n"
        "print('modules:', ' '.join(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == exit_codes.OK, proc.stderr
    assert "enabled=true -> enabled=false (generation 1 -> 2)" in proc.stdout
    assert policy(admin, namespace)["spec"]["enabled"] is False
    loaded = proc.stdout.split("modules:", 1)[1].split()
    unwanted = sorted(
        m for m in loaded if any(m == u or m.startswith(u + ".") for u in KILL_NEEDS_NONE_OF)
    )
    assert unwanted == []


def test_forbidden_names_the_permission_and_the_context(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "default")
    out, err = io.StringIO(), io.StringIO()
    code = run(["--kubeconfig", str(kubeconfig), "status"], stdout=out, stderr=err)
    assert code == exit_codes.API
    message = err.getvalue()
    assert "forbidden" in message
    assert "may not get spilloverpolicies.spillover.clerum.io" in message
    assert f"namespace '{namespace}'" in message  # from the kubeconfig's context
    assert str(kubeconfig) in message
    assert "Traceback" not in message


def test_direct_kill_with_rbac_but_no_event_permission(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    setup_wrc(admin, namespace, {}, {"enabled": True, "target": {"deployment": "wrc"}})
    rbac = client.RbacAuthorizationV1Api(admin)
    core = client.CoreV1Api(admin)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="oncall"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="kill-switch"),
            rules=[
                client.V1PolicyRule(
                    api_groups=["spillover.clerum.io"],
                    resources=["spilloverpolicies"],
                    verbs=["get", "patch"],
                ),
                client.V1PolicyRule(
                    api_groups=["apps"], resources=["deployments"], verbs=["get", "patch"]
                ),
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="kill-switch"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="kill-switch"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="oncall", namespace=namespace)
            ],
        ),
    )
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "oncall")
    out, err = io.StringIO(), io.StringIO()
    code = run(["--kubeconfig", str(kubeconfig), "kill", "--direct"], stdout=out, stderr=err)
    assert code == exit_codes.OK, err.getvalue()
    assert "no Event recorded" in err.getvalue()
    assert "may not create events" in err.getvalue()
    assert env_of(deployment(admin, namespace))[ENABLED_VAR] == "false"
    assert policy(admin, namespace)["spec"]["enabled"] is False


def test_ctrl_c_while_waiting_is_exit_130(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    setup_wrc(admin, namespace, {}, {"enabled": True, "target": {"deployment": "wrc"}})
    script = Path(sys.executable).parent / "spilloverctl"
    proc = subprocess.Popen(
        [str(script), "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, "kill",
         "--wait", "--timeout", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first progress line: it is waiting now
        assert first.startswith("["), first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert "interrupted" in err
    assert "Traceback" not in err
    assert "enabled=true -> enabled=false" in out


def test_wait_stops_when_the_operator_refuses_the_policy(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    setup_wrc(admin, namespace, {}, {"enabled": True, "target": {"deployment": "wrc"}})
    with operator(control_plane, namespace, tmp_path):
        wait_for("the first policy", lambda: ready_for_generation(admin, namespace))
        create_object(
            admin,
            policy_manifest(
                namespace, {"enabled": True, "target": {"deployment": "wrc"}}, "second"
            ),
        )
        code, out, err = ctl(control_plane, namespace, "kill", "second", "--wait")
        assert code == exit_codes.MISMATCH, out + err
        assert "the operator refused generation 2: Ready=False reason=Conflict" in err
        # The refused policy changed nothing.
        assert env_of(deployment(admin, namespace))[ENABLED_VAR] == "true"
