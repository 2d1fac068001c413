"""Small matrices for tests that run the simulator end to end (a few runs, fast), as
the YAML a user would write: off against 128KiB on one cell, chain to 131072."""

from __future__ import annotations

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
