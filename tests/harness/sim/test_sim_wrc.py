"""The WRC stand-in renders each recipe's mcp-host Deployment from its own environment
(spillover_harness.sim.wrc), as the platform's WRC forwards MCP_HOST_ENV_PASSTHROUGH."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spillover_harness.sim.platform import main as platform_main
from spillover_harness.sim.platform import render_platform
from spillover_harness.sim.server import serve
from spillover_harness.sim.wrc import (
    MCP_HOST_MEMORY_LIMIT,
    MemoryLimitError,
    Recipe,
    RecipeSpecError,
    RunRouter,
    ServingPod,
    forwarded_env,
    parse_recipe,
    ready_pods,
    render_env_config_map,
    render_mcp_host,
)
from spillover_operator.domain.mcp_host import REPORT_ANNOTATION, report_address
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR


def test_only_the_passthrough_variables_it_has_are_forwarded() -> None:
    env = {PASSTHROUGH_VAR: f"{ENABLED_VAR}, {THRESHOLD_VAR},MISSING,{ENABLED_VAR}",
           ENABLED_VAR: "false", THRESHOLD_VAR: "32768", "SECRET": "no"}  # fmt: skip
    assert forwarded_env(env) == [
        {"name": ENABLED_VAR, "value": "false"},
        {"name": THRESHOLD_VAR, "value": "32768"},
    ]
    assert forwarded_env({ENABLED_VAR: "false"}) == []


def test_the_mcp_host_deployment_runs_the_simulator_on_its_own_env_and_says_where_it_reports() -> (
    None
):
    dep = render_mcp_host(
        Recipe("r2", 3, "ignore-env"),
        image="img",
        env={PASSTHROUGH_VAR: ENABLED_VAR, ENABLED_VAR: "false"},
        node_selector={"n": "1"},
        tolerate=["t"],
    )
    assert dep["metadata"]["name"] == "mcp-host-r2"
    assert dep["spec"]["replicas"] == 3
    template = dep["spec"]["template"]
    assert report_address(template["metadata"]["annotations"]) == (8080, "spillover")
    container = template["spec"]["containers"][0]
    assert "--env-from-process" in container["args"] and "--fault-ignore-env" in container["args"]
    assert container["env"] == [{"name": ENABLED_VAR, "value": "false"}]
    assert template["spec"]["nodeSelector"] == {"n": "1"}
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "mcp-host"
    assert REPORT_ANNOTATION in template["metadata"]["annotations"]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "R1",
        "r1=",
        "r1=x",
        "r1=11",
        "r1:boom",
        "-r",
        "a" * 41,
        "r1:ignore-env:boom",
        "r1:configmap:configmap:ignore-env",
    ],
)
def test_bad_recipe_arguments_are_refused(bad: str) -> None:
    with pytest.raises(RecipeSpecError):
        parse_recipe(bad)


def test_recipe_arguments() -> None:
    assert parse_recipe("r1") == Recipe("r1", 1, None)
    assert parse_recipe("r1=2") == Recipe("r1", 2, None)
    assert parse_recipe("r2=0:ignore-env") == Recipe("r2", 0, "ignore-env")


def test_a_configmap_recipe_passes_the_values_in_a_configmap_its_template_never_shows() -> None:
    env = {PASSTHROUGH_VAR: ENABLED_VAR, ENABLED_VAR: "false"}
    recipe = parse_recipe("r3=2:configmap")
    assert recipe == Recipe("r3", 2, None, via_config_map=True)
    assert parse_recipe("r3=1:ignore-env:configmap").fault == "ignore-env"
    dep = render_mcp_host(recipe, image="img", env=env)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == []
    assert container["envFrom"] == [{"configMapRef": {"name": "mcp-host-r3-env"}}]
    # The template is the same whatever the values: a change never rolls the pods.
    assert render_mcp_host(recipe, image="img", env={}) == dep
    config_map = render_env_config_map(recipe, env)
    assert config_map["metadata"]["name"] == "mcp-host-r3-env"
    assert config_map["data"] == {ENABLED_VAR: "false"}


def test_the_platform_is_the_wrc_with_a_role_limited_to_deployments_and_listing_pods() -> None:
    docs = render_platform("clerum", "img", ["r1=2"])
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]
    assert docs[1]["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    ]
    assert docs[4]["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]
    assert docs[4]["spec"]["selector"] == docs[3]["spec"]["selector"]["matchLabels"]
    wrc = docs[3]["spec"]["template"]["spec"]["containers"][0]
    assert wrc["env"] == [{"name": PASSTHROUGH_VAR, "value": ""}]
    assert "--recipe=r1=2" in wrc["args"]
    assert "--serve-runs" in wrc["args"]
    with pytest.raises(RecipeSpecError):
        render_platform("clerum", "img", [])


def test_the_mcp_host_pods_get_a_memory_limit_the_platform_passes_on() -> None:
    """The cluster stage reports the peak against the container's limit: the stand-in
    gives one (512Mi by default, make platform-local MCP_HOST_MEMORY=...)."""
    recipe = parse_recipe("r1=1")
    default = render_mcp_host(recipe, image="img", env={})
    container = default["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"memory": MCP_HOST_MEMORY_LIMIT}
    tight = render_mcp_host(recipe, image="img", env={}, limit="64Mi")
    assert tight["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "memory": "64Mi"
    }
    docs = render_platform("clerum", "img", ["r1=2"], mcp_host_memory_limit="1Gi")
    wrc = docs[3]["spec"]["template"]["spec"]["containers"][0]
    assert "--mcp-host-memory-limit=1Gi" in wrc["args"]


@pytest.mark.parametrize("bad", ["", "64", "64M", "8Mi", "65Gi", "0Gi", "1.5Gi", "x" * 10_000])
def test_a_bad_memory_limit_is_refused_before_anything_is_rendered(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(MemoryLimitError, match="from 16Mi to 64Gi"):
        render_platform("clerum", "img", ["r1=2"], mcp_host_memory_limit=bad)
    assert platform_main(["--mcp-host-memory-limit", bad]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err) < 300 and "from 16Mi to 64Gi" in captured.err


def _pod(name: str, ip: str = "127.0.0.1", *, ready: bool = True, **over: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    pod["metadata"].update(over.pop("metadata", {}))
    pod["status"].update(over)
    return pod


def test_only_running_ready_pods_with_an_ip_that_are_not_deleted_serve_runs() -> None:
    pods = [
        _pod("a"),
        _pod("b", ready=False),
        _pod("c", phase="Pending"),
        _pod("d", podIP=None),
        _pod("e", metadata={"deletionTimestamp": "2026-12-02T00:00:00Z"}),
        _pod("f", "10.245.0.7"),
    ]
    assert ready_pods(pods) == [ServingPod("a", "127.0.0.1"), ServingPod("f", "10.245.0.7")]


@pytest.fixture
def mcp_host(tmp_path: Path) -> Iterator[int]:
    """A real simulator serving as the mcp-host on loopback; yields its port."""
    server, _ = serve(out_dir=tmp_path / "sim", pace=0.0, process_env=True)
    try:
        yield int(server.url.rsplit(":", 1)[1])
    finally:
        server.shutdown()
        server.server_close()


def _call(router: RunRouter, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    code, data, _kind = router.handle(method, path, json.dumps(body).encode() if body else b"")
    try:
        return code, json.loads(data)
    except ValueError:
        return code, data.decode()


def test_a_run_goes_to_a_ready_pod_of_its_recipe_and_its_status_names_that_pod(
    mcp_host: int,
) -> None:
    asked: list[str] = []

    def pods_of(recipe: str) -> list[dict[str, Any]]:
        asked.append(recipe)
        return [_pod("mcp-host-summarize-x", ready=False), _pod("mcp-host-summarize-y")]

    router = RunRouter(["summarize"], pods_of, port=mcp_host)
    body = {"recipe": "summarize", "input": "document", "run_id": "run-1", "seed": 7}
    code, started = _call(router, "POST", "/runs", body)
    assert (code, started) == (202, {"run_id": "run-1"})
    assert asked == ["summarize"]
    deadline = time.monotonic() + 30
    while True:
        code, status = _call(router, "GET", "/runs/run-1")
        assert code == 200
        if status["phase"] not in ("Pending", "Running") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert status["phase"] == "Succeeded"
    assert status["mcpHostPod"] == "mcp-host-summarize-y"
    code, logs = _call(router, "GET", "/runs/run-1/logs")
    assert code == 200 and "run-1" in logs
    # A second run of the same id is the pod's to refuse, and it does.
    assert _call(router, "POST", "/runs", body)[0] == 409


def test_runs_are_spread_over_the_ready_pods_fewest_served_first() -> None:
    router = RunRouter(["r"], lambda _r: [_pod("p2"), _pod("p1")])
    assert [router.choose("r").name for _ in range(4)] == ["p1", "p2", "p1", "p2"]


def test_bad_requests_get_clear_answers_and_touch_no_pod() -> None:
    def no_pods(_recipe: str) -> list[dict[str, Any]]:
        return [_pod("down", ready=False)]

    router = RunRouter(["summarize"], no_pods, port=1)
    code, doc = _call(router, "POST", "/runs", {"recipe": "other"})
    assert code == 400 and "unknown recipe 'other' (known: summarize)" in doc["error"]
    code, doc = _call(router, "POST", "/runs", {"recipe": "summarize"})
    assert code == 503 and "no Ready mcp-host pod of recipe 'summarize'" in doc["error"]
    assert _call(router, "GET", "/runs/never")[0] == 404
    assert router.handle("POST", "/runs", b"{not json")[0] == 400
    assert _call(router, "DELETE", "/runs")[0] == 404


def test_a_pod_that_cannot_be_reached_is_a_502_naming_it(mcp_host: int) -> None:
    pods = [_pod("p")]
    router = RunRouter(["summarize"], lambda _r: pods, port=mcp_host)
    body = {"recipe": "summarize", "input": "document", "run_id": "run-2", "seed": 1}
    assert _call(router, "POST", "/runs", body)[0] == 202
    router.port = 1  # the pod is gone: nothing listens there any more
    code, doc = _call(router, "GET", "/runs/run-2")
    assert code == 502 and doc["error"].startswith("mcp-host: ")


def test_the_local_profile_reads_what_the_stand_ins_provide() -> None:
    """The `local` profile (make validate-local) and the stand-ins agree on the names."""
    from spillover_harness.profile import load_profile
    from spillover_harness.sim.platform import WRC_NAME, WRC_PORT
    from spillover_harness.sim.wrc import FIXTURES_DIR, MCP_HOST_LABEL, RECIPE_LABEL

    profile = load_profile("local")
    assert profile.fixtures.dir == FIXTURES_DIR
    assert profile.pods.recipe_label == RECIPE_LABEL
    assert profile.pods.mcp_host.selector == "=".join(MCP_HOST_LABEL)
    assert (profile.run.service, profile.run.port) == (WRC_NAME, WRC_PORT)  # type: ignore[union-attr]
    args = render_mcp_host(Recipe("r"), image="i", env={})["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--log-stdout" in args and FIXTURES_DIR in args
