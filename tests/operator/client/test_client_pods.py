"""Label selectors as the list API takes them, and a pod's variables resolved (pure
parts of `spillover_operator.client.pods`; listing runs against the real API server in
tests/integration/test_client_api.py)."""

from __future__ import annotations

import pytest
from spillover_operator.client import SelectorError, pod_container, pod_values, selector_string


def test_match_labels_and_expressions() -> None:
    selector = {
        "matchLabels": {"app": "mcp-host", "a": "b"},
        "matchExpressions": [
            {"key": "recipe", "operator": "In", "values": ["r1", "r2"]},
            {"key": "tier", "operator": "NotIn", "values": ["x"]},
            {"key": "owner", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert selector_string(selector) == (
        "a=b,app=mcp-host,recipe in (r1,r2),tier notin (x),owner,!legacy"
    )


def test_empty_selector_matches_everything() -> None:
    assert selector_string({}) == ""


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ({"key": "k", "operator": "In", "values": []}, r"matchExpressions\[0\]: operator In"),
        ({"key": "k", "operator": "Exists", "values": ["v"]}, "takes no values"),
        ({"key": "k", "operator": "Gt", "values": ["1"]}, "not one of In, NotIn"),
        ({"operator": "Exists"}, r"matchExpressions\[0\]: a label key"),
        ({"key": "k", "operator": "In", "values": ["a,b"]}, r"label value 'a,b'"),
        ({"key": "k", "operator": "In", "values": ["a) ,x in (b"]}, "label value"),
        ({"key": "bad key!", "operator": "Exists"}, r"label key 'bad key!'"),
    ],
)
def test_bad_expressions_are_named(expr: dict[str, object], message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        selector_string({"matchExpressions": [expr]})


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        # A comma would add a requirement of its own to the rendered string.
        ({"app": "mcp-host,tier!=x"}, r"matchLabels\['app'\]: label value 'mcp-host,tier!=x'"),
        ({"app": "x" * 64}, "at most 63 characters"),
        ({"bad key!": "x"}, r"matchLabels\['bad key!'\]: label key"),
        ({"a/b/c": "x"}, "prefix 'a/b' must be a DNS subdomain"),
        ({"/x": "x"}, "prefix before '/' is empty"),
        ({f"k{i}": "v" for i in range(17)}, "17 labels, at most 16"),
    ],
)
def test_match_labels_are_checked_as_kubernetes_checks_them(
    labels: dict[str, object], message: str
) -> None:
    with pytest.raises(SelectorError, match=message):
        selector_string({"matchLabels": labels})


def test_valid_keys_and_values_render_as_given() -> None:
    labels = {"example.com/app_name.v1": "A-b_c.9", "x": "", "k": "v" * 63}
    assert selector_string({"matchLabels": labels}) == (
        f"example.com/app_name.v1=A-b_c.9,k={'v' * 63},x="
    )


def test_pod_values_read_the_named_container() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "sidecar", "env": [{"name": "X", "value": "side"}]},
                {"name": "mcp-host", "env": [{"name": "X", "value": "host"}]},
            ]
        }
    }
    assert pod_container(pod, None) == pod["spec"]["containers"][0]
    values = pod_values(pod, ["X", "Y"], "mcp-host")
    assert values is not None
    assert (values["X"].state, values["X"].value) == ("set", "host")
    assert values["Y"].state == "unset"
    assert pod_values(pod, ["X"], "missing") is None
