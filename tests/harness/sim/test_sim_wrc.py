"""The WRC stand-in renders each recipe's mcp-host Deployment from its own environment
(spillover_harness.sim.wrc), as the platform's WRC forwards MCP_HOST_ENV_PASSTHROUGH."""

from __future__ import annotations

import pytest
from spillover_harness.sim.platform import render_platform
from spillover_harness.sim.wrc import (
    Recipe,
    RecipeSpecError,
    forwarded_env,
    parse_recipe,
    render_mcp_host,
)
from spillover_operator.constants import ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR
from spillover_operator.mcp_host import REPORT_ANNOTATION, report_address


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


@pytest.mark.parametrize("bad", ["", "R1", "r1=", "r1=x", "r1=11", "r1:boom", "-r", "a" * 41])
def test_bad_recipe_arguments_are_refused(bad: str) -> None:
    with pytest.raises(RecipeSpecError):
        parse_recipe(bad)


def test_recipe_arguments() -> None:
    assert parse_recipe("r1") == Recipe("r1", 1, None)
    assert parse_recipe("r1=2") == Recipe("r1", 2, None)
    assert parse_recipe("r2=0:ignore-env") == Recipe("r2", 0, "ignore-env")


def test_the_platform_is_the_wrc_with_a_role_limited_to_deployments() -> None:
    docs = render_platform("clerum", "img", ["r1=2"])
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment"]
    assert docs[1]["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create", "patch"]}
    ]
    wrc = docs[3]["spec"]["template"]["spec"]["containers"][0]
    assert wrc["env"] == [{"name": PASSTHROUGH_VAR, "value": ""}]
    assert "--recipe=r1=2" in wrc["args"]
    with pytest.raises(RecipeSpecError):
        render_platform("clerum", "img", [])
