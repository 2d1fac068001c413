"""Small matrices for tests that run the simulator end to end (a few runs, fast), as
the YAML a user would write: off against 128KiB on one cell, chain to 131072; and the
reduced matrix of the cluster-stage tests and `make bench-cluster`."""

from __future__ import annotations

from typing import Any

from spillover_operator.domain.model import ENABLED_VAR, THRESHOLD_VAR

CLUSTER_SEED = 20261130

SMALL_MATRIX = """\
name: {name}
seed: 20261130
configurations:
  - name: "off"
    env: {{CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED: "false"}}
  - name: 128KiB
{extra_configurations}recipes:
  - name: code-review
    inputs: [{{name: {input}, size_class: {input}}}]
repetitions: {{sim: 2, minikube: 1, dev: 1}}
run_timeout_s: 900
concurrency: 2
acceptance: {{baseline: "off", token_tolerance: 0.1, quality_recipes: []}}
decision:
  chain:
    - {{config: 128KiB, default: "131072"}}
  fallback: "false"
"""


def small_matrix(name: str, *, input_name: str = "large", extra_configurations: str = "") -> str:
    """The YAML of a small matrix named `name` on code-review/`input_name` (whose size
    class is its name); `extra_configurations`: more configuration entries, as YAML
    list items indented by two spaces."""
    return SMALL_MATRIX.format(
        name=name, input=input_name, extra_configurations=extra_configurations
    )


def cluster_matrix(
    name: str, *, minikube_repetitions: int = 1, run_timeout_s: int = 120
) -> dict[str, Any]:
    """The reduced matrix a cluster stage runs in the tests and `make bench-cluster`:
    off, 128KiB and 32KiB on code-review/large and summarize/document (6 cells)."""
    return {
        "name": name,
        "seed": CLUSTER_SEED,
        "configurations": [
            {"name": "off", "env": {ENABLED_VAR: "false"}},
            {"name": "128KiB", "env": {}},
            {"name": "32KiB", "env": {THRESHOLD_VAR: "32768"}},
        ],
        "recipes": [
            {"name": "code-review", "inputs": [{"name": "large", "size_class": "large"}]},
            {"name": "summarize", "inputs": [{"name": "document", "size_class": "medium"}]},
        ],
        "repetitions": {"sim": 1, "minikube": minikube_repetitions, "dev": 1},
        "run_timeout_s": run_timeout_s,
        "concurrency": 1,
        "acceptance": {
            "baseline": "off",
            "token_tolerance": 0.1,
            "quality_recipes": ["summarize"],
        },
        "decision": {
            "chain": [
                {"config": "128KiB", "default": "131072"},
                {"config": "32KiB", "default": "32768"},
            ],
            "fallback": "false",
        },
    }
