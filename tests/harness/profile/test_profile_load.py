"""The cluster profile: the shipped profiles load, and every mistake names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from repo_paths import PROFILES
from spillover_harness.profile import (
    CustomResourceRun,
    HttpRun,
    JsonPath,
    LogPatterns,
    ProfileError,
    load_profile,
    parse_profile,
    render_template,
)

MINIMAL = """\
name: test
run:
  mode: http
  service: workflow-recipe-controller
  port: 8080
  execute_path: /runs
  poll_path: /runs/{platform_run_id}
"""

CR = """\
name: cr
run:
  mode: custom-resource
  api_version: workflows.clerum.io/v1alpha1
  kind: RecipeRun
  plural: reciperuns
  template:
    spec: {recipe: "{recipe}", input: "{input}", seed: "{seed}"}
"""


def write(tmp_path: Path, text: str, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def with_changes(text: str, **changes: object) -> str:
    data = yaml.safe_load(text)
    for dotted, value in changes.items():
        node = data
        keys = dotted.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return yaml.safe_dump(data, sort_keys=False)


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message, message
    return message


@pytest.mark.parametrize("name", ["minikube", "dev"])
def test_shipped_profiles_load_with_spec_defaults(name: str) -> None:
    p = load_profile(name)
    assert p.name == name
    assert p.namespace == "clerum"
    assert p.policy == "spillover"
    assert p.wrc.deployment == "workflow-recipe-controller"
    assert p.wrc.container is None
    assert isinstance(p.run, HttpRun)
    # The shipped patterns are the model's defaults (one source of truth, documented).
    assert p.logs == LogPatterns()
    assert p.prometheus.scrape_interval_s > 0


def test_the_local_profile_is_a_simulated_platform_reached_through_the_api_server() -> None:
    p = load_profile("local")
    assert p.simulated_platform is True  # its verdict is refused like sim's
    assert load_profile("minikube").simulated_platform is False
    assert isinstance(p.run, HttpRun) and p.run.access == "service-proxy"
    assert p.run.service == p.wrc.deployment == "workflow-recipe-controller"
    assert p.fields.mcp_host_pod == "$.mcpHostPod"  # the WRC stand-in names the pod
    assert p.pods.recipe_label == "spillover.clerum.io/recipe"
    assert p.prometheus.url == "http://127.0.0.1:9391"  # make validate-local's Prometheus


def test_shipped_profile_by_path(tmp_path: Path) -> None:
    shipped = PROFILES / "dev.yaml"
    assert load_profile(shipped).run.mode == "http"
    assert load_profile(str(shipped)).name == "dev"


def test_minimal_profile_takes_defaults(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, MINIMAL))
    assert p.kube_context is None
    assert p.pods.mcp_host.selector
    assert p.fields.outcome.outcome("Succeeded") == "succeeded"
    assert p.fields.outcome.outcome("Running") is None
    assert p.fields.outcome.classify("Running") == "in_progress"
    assert p.fields.outcome.classify("TimedOut") == "timed_out"
    assert p.fields.outcome.classify("Error") == "unknown"
    assert p.prometheus.url == "http://127.0.0.1:9090"


def test_custom_resource_mode(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, CR))
    assert isinstance(p.run, CustomResourceRun)
    assert (p.run.group, p.run.version) == ("workflows.clerum.io", "v1alpha1")
    body = render_template(
        p.run.template, {"recipe": "summarize", "input": "document", "seed": 7, "run_id": "r1"}
    )
    assert body == {"spec": {"recipe": "summarize", "input": "document", "seed": 7}}
    assert p.run.name_template.format(run_id="r1") == "spill-r1"


def test_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    msg = error_of(tmp_path, MINIMAL + "prometheus: {url: 'http://127.0.0.1:9090', scrape: 5}\n")
    assert "unknown key 'prometheus.scrape'" in msg


def test_unknown_key_inside_run_mode(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, run__plural="x"))
    assert "unknown key 'run.plural'" in msg


def test_wrong_type_names_key_and_file(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, run__port="8080"))
    assert "key 'run.port'" in msg
    msg = error_of(tmp_path, with_changes(MINIMAL, prometheus={"scrape_interval_s": "30s"}))
    assert "key 'prometheus.scrape_interval_s'" in msg


def test_unknown_mode_names_key_and_file(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, run__mode="grpc"))
    assert "key 'run.mode'" in msg
    assert "'grpc'" in msg
    assert "custom-resource" in msg and "http" in msg


def test_missing_mode(tmp_path: Path) -> None:
    data = yaml.safe_load(MINIMAL)
    del data["run"]["mode"]
    msg = error_of(tmp_path, yaml.safe_dump(data))
    assert "missing key 'run.mode'" in msg


def test_missing_key_in_mode(tmp_path: Path) -> None:
    data = yaml.safe_load(MINIMAL)
    del data["run"]["service"]
    msg = error_of(tmp_path, yaml.safe_dump(data))
    assert "missing key 'run.service'" in msg


def test_bad_regex_names_key_and_file(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, logs={"llm_call_started": "LLM call (started"}))
    assert "key 'logs.llm_call_started'" in msg
    assert "not a valid regular expression" in msg


def test_regex_without_its_named_group(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, logs={"body_bytes": r"bodyBytes=(\d+)"}))
    assert "key 'logs.body_bytes'" in msg
    assert "(?P<body_bytes>" in msg


def test_bad_jsonpath(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, fields={"iterations": "$.status..x"}))
    assert "key 'fields.iterations'" in msg


def test_unknown_placeholder_in_template(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(CR, run__template={"spec": {"recipe": "{recipie}"}}))
    assert "key 'run.template'" in msg
    assert "{recipie}" in msg


def test_outcome_mapping_to_non_spec_outcome(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, fields={"outcome": {"phases": {"Done": "ok"}}}))
    assert "key 'fields.outcome.phases.Done'" in msg


def test_phase_both_finished_and_in_progress(tmp_path: Path) -> None:
    msg = error_of(
        tmp_path,
        with_changes(
            MINIMAL,
            fields={"outcome": {"phases": {"Done": "succeeded"}, "in_progress": ["Done"]}},
        ),
    )
    assert "fields.outcome" in msg and "'Done'" in msg


def test_bad_label_selector(tmp_path: Path) -> None:
    msg = error_of(
        tmp_path, with_changes(MINIMAL, pods={"mcp_host": {"selector": "app in mcp-host"}})
    )
    assert "key 'pods.mcp_host.selector'" in msg


def test_bad_prometheus_matchers(tmp_path: Path) -> None:
    msg = error_of(tmp_path, with_changes(MINIMAL, prometheus={"selector": "{job='x'}"}))
    assert "key 'prometheus.selector'" in msg


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    msg = error_of(
        tmp_path, with_changes(MINIMAL, namespace="Not_A_Namespace", policy=3, extra=True)
    )
    assert "key 'namespace'" in msg
    assert "key 'policy'" in msg
    assert "unknown key 'extra'" in msg


def test_not_a_mapping_and_not_yaml(tmp_path: Path) -> None:
    assert "YAML mapping" in error_of(tmp_path, "- a\n- b\n")
    assert "not valid YAML" in error_of(tmp_path, "name: [unclosed\n")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no such profile file"):
        load_profile(tmp_path / "nope.yaml")


def test_parse_profile_source_in_message() -> None:
    with pytest.raises(ProfileError, match=r"^here.yaml: missing key 'run'"):
        parse_profile({"name": "x"}, source="here.yaml")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$.status.phase", ["Running"]),
        ("{.status.phase}", ["Running"]),
        (".status.phase", ["Running"]),
        ("$['status']['phase']", ["Running"]),
        ("$.status.steps[0].iterations", [3]),
        ("$.status.steps[-1].iterations", [5]),
        ("$.status.steps[*].iterations", [3, 5]),
        ("$.status.missing", []),
        ("$.status.steps[7]", []),
    ],
)
def test_jsonpath_subset(path: str, expected: list[object]) -> None:
    doc = {"status": {"phase": "Running", "steps": [{"iterations": 3}, {"iterations": 5}]}}
    assert JsonPath.parse(path).find(doc) == expected


def test_http_service_proxy_prefix(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, MINIMAL))
    assert isinstance(p.run, HttpRun)
    assert p.run.service_proxy_prefix("clerum") == (
        "/api/v1/namespaces/clerum/services/http:workflow-recipe-controller:8080/proxy"
    )
