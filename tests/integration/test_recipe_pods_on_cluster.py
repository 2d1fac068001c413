"""The spillover values where they take effect: the recipe mcp-host pods.

On the local control plane (real API server, kube-controller-manager, scheduler, kwok
making pods Running), with the real kopf operator running as a ServiceAccount bound to
exactly the Roles of manifests/base (the refresh Role present or left out), spilloverctl
in-process, and the test-only WRC stand-in (wrc_stand_in.py: the real WRC cannot be had
here) creating recipe mcp-host workloads from the WRC's env in its three behaviours.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    condition,
    connection,
    container_manifest,
    deployment_manifest,
    is_ready,
    model,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.client import config_map_lookup, list_pods
from spillover_operator.domain.allowlist import REFRESH_DEPLOYMENTS_VAR
from spillover_operator.domain.change_record import decode
from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION
from spillover_operator.domain.model import (
    BUDGET_VAR,
    ENABLED_VAR,
    PASSTHROUGH_VAR,
    SPILLOVER_VARS,
    THRESHOLD_VAR,
)
from spillover_operator.domain.resolved_env import resolve
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION
from wrc_stand_in import MCP_HOST_LABELS, Behaviour, Via, WrcStandIn

pytestmark = pytest.mark.integration

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
REFRESH_COMPONENT = BASE.parent / "components" / "recipe-pods-refresh"
# The stand-in's recipe Deployments (via="deployment"): the operator may restart these.
RECIPE_DEPLOYMENTS = ("mcp-host-r1", "mcp-host-r2", "mcp-host-r3")
WRC = "workflow-recipe-controller"
SELECTOR = "app.kubernetes.io/name=mcp-host"
WAIT = 120.0


@dataclass
class Setup:
    control_plane: LocalCluster
    api: client.ApiClient
    namespace: str
    workdir: Path
    operator: OperatorProcess | None = None
    stand_in: WrcStandIn | None = None
    extra: list[Any] = field(default_factory=list)
    # The recipe Deployments the operator may restart (refresh Role, allow-list).
    recipe_deployments: tuple[str, ...] = RECIPE_DEPLOYMENTS

    # ---- RBAC and the operator

    def install_rbac(self, *, refresh_role: bool) -> Path:
        """The ServiceAccount and Roles of manifests/base, moved into this namespace;
        with `refresh_role` the opt-in refresh Role of components/recipe-pods-refresh,
        narrowed by name to the stand-in's recipe Deployments (in a cluster the
        admission policy spillover-operator-writes narrows it to the ConfigMap's list;
        here RBAC does) and without its StatefulSet rule (no StatefulSet here)."""
        files = [BASE / n for n in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml")]
        if refresh_role:
            files += [
                REFRESH_COMPONENT / n for n in ("role-refresh.yaml", "rolebinding-refresh.yaml")
            ]
        core, rbac = client.CoreV1Api(self.api), client.RbacAuthorizationV1Api(self.api)
        for path in files:
            doc = yaml.safe_load(path.read_text())
            doc["metadata"]["namespace"] = self.namespace
            if doc["kind"] == "Role" and doc["metadata"]["name"] == "spillover-operator-refresh":
                doc["rules"][0]["resourceNames"] = list(self.recipe_deployments)
                del doc["rules"][1]
            if doc["kind"] == "ServiceAccount":
                core.create_namespaced_service_account(
                    self.namespace, model(client.V1ServiceAccount, doc)
                )
            elif doc["kind"] == "Role":
                rbac.create_namespaced_role(self.namespace, model(client.V1Role, doc))
            else:
                doc["subjects"][0]["namespace"] = self.namespace
                rbac.create_namespaced_role_binding(
                    self.namespace, model(client.V1RoleBinding, doc)
                )
        return Path(
            self.control_plane.service_account_kubeconfig(self.namespace, "spillover-operator")
        )

    def start_operator(self, *, refresh_role: bool = True) -> OperatorProcess:
        kubeconfig = self.install_rbac(refresh_role=refresh_role)
        # The refresh allow-list, as components/recipe-pods-refresh sets it (also without
        # the Role: an operator told it may refresh, that RBAC does not let).
        extra = {REFRESH_DEPLOYMENTS_VAR: ",".join(self.recipe_deployments)}
        self.operator = OperatorProcess(self.namespace, kubeconfig, self.workdir, extra_env=extra)
        return self.operator.start()

    # ---- objects

    def create_wrc(self, env_from: list[dict[str, Any]] | None = None) -> None:
        env = {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "OPENAI_BASE_URL"}
        container = container_manifest("wrc", "example.invalid/wrc:1", env)
        if env_from:
            container["envFrom"] = env_from
        body = deployment_manifest(WRC, [container], labels={"app": "wrc"})
        client.AppsV1Api(self.api).create_namespaced_deployment(
            self.namespace, model(client.V1Deployment, body)
        )

    def create_policy(self, **recipe_pods: Any) -> None:
        spec: dict[str, Any] = {"enabled": True, "target": {"deployment": WRC, "container": "wrc"}}
        if recipe_pods:
            spec["recipePods"] = recipe_pods
        client.CustomObjectsApi(self.api).create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, policy_manifest(self.namespace, spec)
        )

    def policy(self) -> dict[str, Any]:
        return read_policy(self.api, self.namespace)

    def wait_policy(self, what: str, check: Any) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            pol = self.policy()
            return pol if check(pol) else None

        try:
            found: dict[str, Any] = wait_for(what, probe, timeout=WAIT, operator=self.operator)
        except pytest.fail.Exception as exc:
            last = self.policy().get("status")
            raise AssertionError(f"{exc}\nlast status: {json.dumps(last, indent=1)}") from None
        return found

    def start_stand_in(self, behaviour: Behaviour, via: Via = "pods", **options: Any) -> WrcStandIn:
        """The stand-in; `options`: WrcStandIn's (recipes, replicas, pass_delay, ...)."""
        api = self.control_plane.api_client()
        self.extra.append(api)
        self.stand_in = WrcStandIn(api, self.namespace, behaviour, via=via, **options).start()
        return self.stand_in

    # ---- reading the pods directly (not through the code under test's verdicts)

    def pod_values(self) -> dict[str, dict[str, str | None]]:
        """Every live matched pod: the spillover variables its container resolves to."""
        conn = connection(self.api, self.namespace)
        lookup = config_map_lookup(conn)
        out: dict[str, dict[str, str | None]] = {}
        for pod in list_pods(conn, SELECTOR):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            values = resolve(pod["spec"]["containers"][0], SPILLOVER_VARS, lookup)
            out[pod["metadata"]["name"]] = {k: v.value for k, v in values.items()}
        return out

    def ctl(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = run(
            ["--kubeconfig", str(self.control_plane.kubeconfig), "-n", self.namespace, *argv],
            stdout=out,
            stderr=err,
        )
        return code, out.getvalue(), err.getvalue()

    def events(self, reason: str) -> list[str]:
        items = (
            client.CoreV1Api(self.api)
            .list_namespaced_event(self.namespace, field_selector=f"reason={reason}")
            .items
        )
        return [str(e.message) for e in items]

    def close(self) -> None:
        if self.stand_in is not None:
            self.stand_in.stop()
            assert not self.stand_in.errors, "the WRC stand-in failed:\n" + "\n".join(
                self.stand_in.errors[:3]
            )
        if self.operator is not None:
            self.operator.stop()
        for api in self.extra:
            api.close()
        conn = connection(self.api, self.namespace)
        custom = client.CustomObjectsApi(self.api)
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)[
            "items"
        ]:
            if item["metadata"].get("finalizers"):
                custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
        del conn


@pytest.fixture
def setup(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[Setup]:
    s = Setup(control_plane, admin, namespace, tmp_path)
    try:
        yield s
    finally:
        s.close()


def counts(pol: dict[str, Any]) -> dict[str, Any]:
    return dict((pol.get("status") or {}).get("recipePods") or {})


def all_current(n: int) -> Any:
    def check(pol: dict[str, Any]) -> bool:
        c = counts(pol)
        return is_ready(pol) and c.get("matched") == n and c.get("current") == n

    return check


def start_running(
    s: Setup,
    behaviour: Behaviour,
    *,
    refresh: str = "Never",
    refresh_role: bool = True,
    env_from: list[dict[str, Any]] | None = None,
    via: Via = "pods",
) -> None:
    """WRC + operator + policy (spillover on) + three recipe pods running it."""
    s.create_wrc(env_from)
    s.start_operator(refresh_role=refresh_role)
    s.create_policy(refresh=refresh)
    s.wait_policy("the policy Ready", is_ready)
    s.start_stand_in(behaviour, via)
    s.wait_policy("three current recipe pods", all_current(3))
    assert all(v[ENABLED_VAR] == "true" for v in s.pod_values().values())


def spillover_off_everywhere(s: Setup) -> bool:
    values = s.pod_values()
    return bool(values) and all(v[ENABLED_VAR] == "false" for v in values.values())


# ---- behaviour (2): pods keep the env they were created with ------------------------------


def test_kill_wait_never_succeeds_while_a_pod_still_has_spillover_on(setup: Setup) -> None:
    start_running(setup, "at-pod-creation")
    code, out, err = setup.ctl("kill", "--wait", "--timeout", "20")
    assert code == exit_codes.TIMEOUT, (code, out, err)
    stale = sorted(setup.pod_values())
    assert len(stale) == 3
    for name in stale:
        assert name in err, f"the timeout message does not name {name}:\n{err}"
    assert "recipe pods: 0 current, 3 stale" in err  # progress shows the counts
    # Still on in every pod: the exit code was right to be non-zero.
    assert all(v[ENABLED_VAR] == "true" for v in setup.pod_values().values())

    pol = setup.wait_policy(
        "RecipePodsCurrent=False reason Stale",
        lambda p: condition(p, "RecipePodsCurrent").get("reason") == "Stale",
    )
    assert counts(pol)["stale"] == 3
    # Counts and owners only: the pods are listed by `spilloverctl status` (below).
    assert sum(o["stale"] for o in counts(pol)["staleOwners"]) == 3
    assert not any(name in json.dumps(pol["status"]) for name in stale)
    assert setup.operator is not None
    assert setup.operator.metric("spillover_operator_recipe_pods", state="stale") == 3
    assert any("3 stale" in m for m in setup.events("RecipePods"))  # the count changed

    code, out, _ = setup.ctl("status")
    assert code == exit_codes.MISMATCH
    assert "recipe pods: 3 stale of 3" in out
    for name in stale:
        assert any(name in line and line.rstrip().endswith("stale") for line in out.splitlines())
    # Refresh Never: nobody restarted them.
    assert sorted(setup.pod_values()) == stale


def test_kill_wait_refresh_recipe_pods_succeeds_only_when_every_pod_is_current(
    setup: Setup,
) -> None:
    start_running(setup, "at-pod-creation", via="deployment")
    before = sorted(setup.pod_values())
    code, out, err = setup.ctl(
        "kill", "--wait", "--refresh-recipe-pods", "--reason", "INC-42 spill storm"
    )
    # The moment it exits 0, every matched pod has spillover off.
    values = setup.pod_values()
    assert code == exit_codes.OK, (out, err)
    assert spillover_off_everywhere(setup), values
    assert len(values) == 3 and not set(values) & set(before)  # all replaced
    assert re.search(r"recipe pods: all \d+ run the policy's values", out), out

    pol = setup.policy()
    assert condition(pol, "RecipePodsCurrent")["status"] == "True"
    record = decode(pol["metadata"]["annotations"][CHANGE_RECORD_ANNOTATION])
    assert (record.reason, record.generation) == (
        "INC-42 spill storm",
        pol["metadata"]["generation"],
    )
    assert any(m.endswith(": INC-42 spill storm)") for m in setup.events("Applied"))
    assert setup.events("RecipePodsRefresh")
    op = setup.operator
    assert op is not None
    wait_for(
        "the histogram: once for the first apply, once for the kill",
        lambda: op.metric("spillover_operator_recipe_pods_current_seconds_count") >= 2,
        operator=op,
    )
    code, out, _ = setup.ctl("status")
    assert code == exit_codes.OK, out
    assert f"last change:  generation {record.generation} changed by {record.user}" in out
    assert ": INC-42 spill storm\n" in out
    assert "recipe pods: 0 stale of 3" in out


def test_refresh_rolls_out_deployments_whose_pods_read_an_old_config_map(setup: Setup) -> None:
    """Behaviour (2) through a Deployment: the ConfigMap it reads already says false,
    the running pods started before that: stale, and a rollout restart fixes them."""
    start_running(setup, "at-pod-creation", via="deployment")
    before = set(setup.pod_values())
    code, out, err = setup.ctl("kill", "--wait", "--timeout", "20")
    assert code == exit_codes.TIMEOUT, (out, err)
    assert "changed after the container started" in err
    code, out, err = setup.ctl("kill", "--wait", "--refresh-recipe-pods")
    assert code == exit_codes.OK, (out, err)
    after = setup.pod_values()
    assert len(after) == 3 and not set(after) & before  # every pod replaced
    assert all(v[ENABLED_VAR] == "false" for v in after.values())
    refreshes = setup.events("RecipePodsRefresh")
    assert sorted(m.split(" (")[0] for m in refreshes) == [
        f"rollout restart of Deployment/mcp-host-{r}" for r in ("r1", "r2", "r3")
    ]
    for recipe in ("r1", "r2", "r3"):
        dep = read_deployment(setup.api, setup.namespace, f"mcp-host-{recipe}")
        assert (
            "kubectl.kubernetes.io/restartedAt"
            in dep["spec"]["template"]["metadata"]["annotations"]
        )
        assert "env" not in dep["spec"]["template"]["spec"]["containers"][0]


def test_refresh_on_kill_switch_restarts_only_when_spillover_is_turned_off(setup: Setup) -> None:
    start_running(setup, "at-pod-creation", refresh="OnKillSwitch", via="deployment")
    # A threshold change is not the kill switch: the pods stay stale.
    code, out, err = setup.ctl("set", "--threshold", "32768")
    assert code == 0, (out, err)
    setup.wait_policy(
        "3 stale pods after a threshold change",
        lambda p: counts(p).get("stale") == 3 and is_ready(p),
    )
    assert not setup.events("RecipePodsRefresh")
    # The kill switch: the operator refreshes them without being asked.
    code, out, err = setup.ctl("kill", "--wait")
    assert code == exit_codes.OK, (out, err)
    assert spillover_off_everywhere(setup)
    assert all(v[THRESHOLD_VAR] == "32768" for v in setup.pod_values().values())


def test_refresh_on_kill_switch_converges_when_the_wrc_passes_the_value_on_late(
    setup: Setup,
) -> None:
    """The cause of the flaky test above: the WRC passes its new env on to the recipe
    ConfigMaps some time after its rollout completes. The operator restarted a recipe
    Deployment at once, its new pods read the old ConfigMap, and the refresh waited
    for a ConfigMap change that no watch of the operator reports: nothing looked again
    until the 300 s resync (`kill --wait` timed out). Made certain here with a WRC that
    passes values on 3 s late: the refresh waits for the ConfigMap (looking again by
    itself), restarts once the value is there, and converges."""
    setup.create_wrc()
    setup.start_operator()
    setup.create_policy(refresh="OnKillSwitch")
    setup.wait_policy("the policy Ready", is_ready)
    setup.start_stand_in("at-pod-creation", "deployment", pass_delay=3.0)
    setup.wait_policy("three current recipe pods", all_current(3))
    code, out, err = setup.ctl("kill", "--wait", "--timeout", "60")
    assert code == exit_codes.OK, (code, out, err)
    assert spillover_off_everywhere(setup)
    # Restarted once each, after the ConfigMap held the new value: never in vain.
    refreshes = setup.events("RecipePodsRefresh")
    assert len(refreshes) == 3 and not any("again" in m for m in refreshes), refreshes


def test_direct_kill_reports_and_refreshes_the_pods_without_the_operator(setup: Setup) -> None:
    start_running(setup, "at-pod-creation")
    assert setup.operator is not None
    setup.operator.stop()
    code, out, err = setup.ctl("kill", "--direct", "--wait", "--timeout", "15")
    assert code == exit_codes.TIMEOUT, (out, err)
    assert "stale" in err
    code, out, err = setup.ctl("kill", "--direct", "--wait", "--refresh-recipe-pods")
    assert code == exit_codes.OK, (out, err)
    assert "recipe pods: deleted 1 stale pods of ConfigMap/" in out
    assert spillover_off_everywhere(setup)


def test_no_wait_recipe_pods_says_what_it_skipped(setup: Setup) -> None:
    start_running(setup, "at-pod-creation")
    code, out, err = setup.ctl("kill", "--wait", "--no-wait-recipe-pods")
    assert code == exit_codes.OK, (out, err)
    assert "recipe pods: NOT waited for (--no-wait-recipe-pods); 3 of 3 still run old values" in out


# ---- behaviour (1): the WRC re-renders its recipe workloads -------------------------------


def test_rerendering_wrc_kill_wait_succeeds_without_refresh(setup: Setup) -> None:
    start_running(setup, "rerender")
    code, out, err = setup.ctl("kill", "--wait")
    assert code == exit_codes.OK, (out, err)
    assert spillover_off_everywhere(setup)
    assert not setup.events("RecipePodsRefresh")
    pol = setup.policy()
    assert counts(pol)["current"] == 3 or condition(pol, "RecipePodsCurrent")


# ---- behaviour (3): the template is baked, a refresh cannot help --------------------------


def test_baked_template_refresh_always_reports_stale_after_refresh(setup: Setup) -> None:
    start_running(setup, "baked", refresh="Always")
    templates = {
        name: read_deployment(setup.api, setup.namespace, f"mcp-host-{name}")["spec"]["template"][
            "spec"
        ]["containers"][0]["env"]
        for name in ("r1", "r2", "r3")
    }
    code, out, err = setup.ctl("kill", "--wait", "--timeout", "90")
    assert code == exit_codes.MISMATCH, (code, out, err)
    assert "StaleAfterRefresh" in err and "Deployment/mcp-host-r1" in err
    pol = setup.policy()
    cond = condition(pol, "RecipePodsCurrent")
    assert cond["reason"] == "StaleAfterRefresh" and "Deployment/mcp-host-r1" in cond["message"]
    assert counts(pol)["staleAfterRefresh"] == ["Deployment/mcp-host-r1"]
    # One owner at a time: it stopped at the first, and never wrote env into it.
    for name, env in templates.items():
        dep = read_deployment(setup.api, setup.namespace, f"mcp-host-{name}")
        assert dep["spec"]["template"]["spec"]["containers"][0]["env"] == env
    restarted = read_deployment(setup.api, setup.namespace, "mcp-host-r1")
    annotations = restarted["spec"]["template"]["metadata"].get("annotations") or {}
    assert "kubectl.kubernetes.io/restartedAt" in annotations
    untouched = read_deployment(setup.api, setup.namespace, "mcp-host-r2")
    assert not (untouched["spec"]["template"]["metadata"].get("annotations") or {})


def test_without_the_refresh_role_the_refresh_is_reported_not_permitted(setup: Setup) -> None:
    start_running(setup, "baked", refresh="Always", refresh_role=False, via="deployment")
    code, out, err = setup.ctl("kill")
    assert code == 0, (out, err)
    pol = setup.wait_policy(
        "a refresh reported as not permitted",
        lambda p: "not permitted" in condition(p, "RecipePodsCurrent").get("message", ""),
    )
    assert condition(pol, "RecipePodsCurrent")["reason"] == "Stale"
    assert setup.events("RecipePodsRefreshForbidden")
    assert setup.operator is not None
    setup.operator.check_alive()


# ---- effective values: envFrom on the WRC, configMapKeyRef and Secrets on pods -------------


def test_envfrom_on_the_wrc_is_reported_and_the_spec_wins(setup: Setup) -> None:
    core = client.CoreV1Api(setup.api)
    core.create_namespaced_config_map(
        setup.namespace,
        {"metadata": {"name": "wrc-tuning"}, "data": {THRESHOLD_VAR: "4096"}},
    )
    start_running(setup, "rerender", env_from=[{"configMapRef": {"name": "wrc-tuning"}}])
    pol = setup.policy()
    # The unset threshold is written as the mcp-host default, explicitly: env wins.
    assert pol["status"]["effective"]["thresholdBytes"] == "131072"
    notes = pol["status"]["envFromNotes"]
    assert any("envFrom configMap wrc-tuning sets" in n and "4096" in n for n in notes), notes
    dep = read_deployment(setup.api, setup.namespace, WRC)
    env = {
        e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env[THRESHOLD_VAR] == "131072" and BUDGET_VAR not in env
    assert all(v[THRESHOLD_VAR] == "131072" for v in setup.pod_values().values())
    code, out, _ = setup.ctl("status")
    assert code == exit_codes.OK, out
    assert "NOTE: envFrom configMap wrc-tuning sets" in out


def test_pod_values_from_config_maps_are_read_and_secrets_are_unknown(setup: Setup) -> None:
    core = client.CoreV1Api(setup.api)
    made = core.create_namespaced_config_map(
        setup.namespace, {"metadata": {"name": "mcp-tuning"}, "data": {"enabled": "true"}}
    )
    setup.create_wrc()
    setup.start_operator()
    setup.create_policy()
    setup.wait_policy("the policy Ready", is_ready)
    # Times have one-second resolution: a container started in the ConfigMap's own
    # second may have read it before it changed, and counts as stale (the operator
    # cannot tell). The pods below start in a later second, however fast this ran.
    changed = made.metadata.creation_timestamp
    wait_for(
        "a second later than the ConfigMap's",
        lambda: datetime.now(UTC) >= changed + timedelta(seconds=1),
    )

    def pod(name: str, env: list[dict[str, Any]]) -> None:
        core.create_namespaced_pod(
            setup.namespace,
            {
                "metadata": {"name": name, "labels": dict(MCP_HOST_LABELS)},
                "spec": {
                    "containers": [
                        {"name": "mcp-host", "image": "example.invalid/mcp-host:1", "env": env}
                    ]
                },
            },
        )

    pod(
        "from-configmap",
        [
            {
                "name": ENABLED_VAR,
                "valueFrom": {"configMapKeyRef": {"name": "mcp-tuning", "key": "enabled"}},
            }
        ],
    )
    pod(
        "from-secret",
        [{"name": ENABLED_VAR, "valueFrom": {"secretKeyRef": {"name": "creds", "key": "on"}}}],
    )
    pol = setup.wait_policy(
        "one current and one unknown pod",
        lambda p: (
            counts(p).get("matched") == 2
            and counts(p).get("current") == 1
            and counts(p).get("unknown") == 1
        ),
    )
    assert condition(pol, "RecipePodsCurrent")["reason"] == "Unknown"
    code, out, _ = setup.ctl("status")
    assert code == exit_codes.OK, out  # unknown is reported, never guessed, not a mismatch
    line = next(line for line in out.splitlines() if "from-secret" in line)
    assert "unknown" in line
    assert "Secrets are not read" in out
    # Turning spillover off makes the ConfigMap pod stale (it still says true).
    setup.ctl("kill")
    setup.wait_policy(
        "the ConfigMap-fed pod stale",
        lambda p: counts(p).get("staleOwners") == [{"owner": "(no controller)", "stale": 1}],
    )


def test_status_reads_the_wrc_values_from_config_maps_and_not_secrets(setup: Setup) -> None:
    """Without the operator: what spilloverctl status says the WRC process sees."""
    core = client.CoreV1Api(setup.api)
    core.create_namespaced_config_map(
        setup.namespace, {"metadata": {"name": "wrc-knobs"}, "data": {"threshold": "65536"}}
    )
    env = [
        {"name": ENABLED_VAR, "valueFrom": {"secretKeyRef": {"name": "creds", "key": "on"}}},
        {
            "name": THRESHOLD_VAR,
            "valueFrom": {"configMapKeyRef": {"name": "wrc-knobs", "key": "threshold"}},
        },
        {"name": PASSTHROUGH_VAR, "value": ",".join(SPILLOVER_VARS)},
    ]
    body = deployment_manifest(
        WRC, [container_manifest("wrc", "example.invalid/wrc:1", env)], labels={"app": "wrc"}
    )
    client.AppsV1Api(setup.api).create_namespaced_deployment(
        setup.namespace, model(client.V1Deployment, body)
    )
    setup.create_policy()
    code, out, _ = setup.ctl("status")
    assert code == exit_codes.MISMATCH, out
    enabled = next(line for line in out.splitlines() if line.strip().startswith(ENABLED_VAR))
    assert "unknown (env (secretKeyRef creds/on): Secrets are not read)" in enabled
    threshold = next(line for line in out.splitlines() if line.strip().startswith(THRESHOLD_VAR))
    assert "65536 (from env (configMapKeyRef wrc-knobs/threshold))" in threshold
    code, out, _ = setup.ctl("status", "-o", "json")
    doc = json.loads(out)
    assert doc["deployment"]["env"][ENABLED_VAR] == "unknown"
    assert doc["deployment"]["env"][THRESHOLD_VAR] == "65536"
