"""`spilloverctl render`: good files print the env and the patch; every bad file is exit 2
with a message naming the file, the field and the fix (never a traceback)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from repo_paths import MANIFESTS
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, PASSTHROUGH_VAR, THRESHOLD_VAR

GOOD = """\
apiVersion: spillover.clerum.io/v1alpha1
kind: SpilloverPolicy
metadata:
  name: spillover
  namespace: clerum
spec:
  enabled: false
  thresholdBytes: 32768
  target:
    deployment: wrc
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: wrc
  namespace: clerum
  resourceVersion: "42"
spec:
  template:
    spec:
      containers:
      - name: controller
        image: example/wrc:1
        env:
        - name: MCP_HOST_ENV_PASSTHROUGH
          value: "OPENAI_API_KEY, LOG_LEVEL"
        - name: CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES
          value: "2000000"
        - name: LOG_LEVEL
          value: debug
      - name: sidecar
        image: example/sidecar:1
"""


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_render_against_the_minimal_deployment(tmp_path: Path) -> None:
    code, out, err = _run(["render", "-f", _write(tmp_path, "p.yaml", GOOD)])
    assert code == exit_codes.OK, err
    doc = yaml.safe_load(out)
    assert doc["env"] == {
        ENABLED_VAR: "false",
        THRESHOLD_VAR: "32768",
        BUDGET_VAR: None,
        PASSTHROUGH_VAR: f"{ENABLED_VAR},{THRESHOLD_VAR},{BUDGET_VAR}",
    }
    assert doc["policy"]["spec"]["enabled"] is False
    assert "minimal Deployment" in doc["deployment"]["source"]
    containers = doc["patch"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    env = {e["name"]: e.get("value") for e in containers[0]["env"]}
    assert env[ENABLED_VAR] == "false"
    assert env[THRESHOLD_VAR] == "32768"
    assert BUDGET_VAR not in env  # absent before and after: nothing to delete


def test_render_against_a_deployment_file_as_json(tmp_path: Path) -> None:
    code, out, err = _run(
        [
            "render",
            "-f",
            _write(tmp_path, "p.yaml", GOOD),
            "--deployment",
            _write(tmp_path, "d.yaml", DEPLOYMENT),
            "-o",
            "json",
        ]
    )
    assert code == exit_codes.OK, err
    doc = json.loads(out)
    assert doc["deployment"]["container"] == "controller"  # the first container
    changes = {c["name"]: (c["before"], c["after"]) for c in doc["changes"]}
    assert changes[BUDGET_VAR] == ("2000000", None)
    assert changes[ENABLED_VAR] == (None, "false")
    passthrough = changes[PASSTHROUGH_VAR][1]
    assert passthrough.startswith("OPENAI_API_KEY,LOG_LEVEL,")
    patch = doc["patch"]
    assert patch["metadata"] == {"resourceVersion": "42"}
    [container] = patch["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "controller"
    assert {"name": BUDGET_VAR, "$patch": "delete"} in container["env"]
    assert all(e["name"] != "LOG_LEVEL" for e in container["env"])  # untouched


def test_render_with_nothing_to_change_prints_a_null_patch(tmp_path: Path) -> None:
    done = DEPLOYMENT.replace(
        '          value: "OPENAI_API_KEY, LOG_LEVEL"',
        f'          value: "{ENABLED_VAR},{THRESHOLD_VAR},{BUDGET_VAR}"',
    ).replace(
        '        - name: CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES\n          value: "2000000"',
        f'        - name: {ENABLED_VAR}\n          value: "false"\n'
        f'        - name: {THRESHOLD_VAR}\n          value: "32768"',
    )
    code, out, err = _run(
        [
            "render",
            "-f",
            _write(tmp_path, "p.yaml", GOOD),
            "--deployment",
            _write(tmp_path, "d.yaml", done),
        ]
    )
    assert code == exit_codes.OK, err
    doc = yaml.safe_load(out)
    assert doc["patch"] is None
    assert doc["changes"] == []


def test_render_reads_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD))
    code, out, _ = _run(["render", "-f", "-"])
    assert code == exit_codes.OK
    assert yaml.safe_load(out)["env"][ENABLED_VAR] == "false"


BAD_POLICIES: list[tuple[str, str, list[str]]] = [
    ("not-yaml", "apiVersion: [unclosed\nkind: x\n", ["not valid YAML", "line"]),
    ("empty", "", ["empty file"]),
    ("only-comments", "# nothing here\n", ["empty file"]),
    ("a-list", "- a\n- b\n", ["expected a SpilloverPolicy mapping", "a list"]),
    ("a-scalar", "just words\n", ["expected a SpilloverPolicy mapping"]),
    ("two-docs", GOOD + "---\n" + GOOD, ["2 YAML documents"]),
    ("wrong-kind", GOOD.replace("kind: SpilloverPolicy", "kind: ConfigMap"), ["kind:"]),
    (
        "wrong-apiversion",
        GOOD.replace("spillover.clerum.io/v1alpha1", "spillover.clerum.io/v1"),
        ["apiVersion:", "spillover.clerum.io/v1alpha1"],
    ),
    (
        "threshold-too-small",
        GOOD.replace("32768", "100"),
        ["spec.thresholdBytes", "below the minimum 4096"],
    ),
    (
        "threshold-too-large",
        GOOD.replace("32768", "2097152"),
        ["spec.thresholdBytes", "above the maximum 1048576"],
    ),
    (
        "threshold-a-string",
        GOOD.replace("32768", '"32768"'),
        ["spec.thresholdBytes", "must be an integer", "a string"],
    ),
    (
        "threshold-a-float",
        GOOD.replace("32768", "32768.5"),
        ["spec.thresholdBytes", "must be an integer"],
    ),
    (
        "budget-too-small",
        GOOD.replace("  target:", "  budgetBytes: 1024\n  target:"),
        ["spec.budgetBytes", "below the minimum 1048576"],
    ),
    (
        "enabled-a-string",
        GOOD.replace("enabled: false", 'enabled: "false"'),
        ["spec.enabled", "must be a boolean"],
    ),
    (
        "missing-target",
        GOOD.replace("  target:\n    deployment: wrc\n", ""),
        ["spec.target", "required", "spec.target.deployment"],
    ),
    (
        "missing-target-deployment",
        GOOD.replace("    deployment: wrc\n", "    container: wrc\n"),
        ["spec.target.deployment", "required"],
    ),
    (
        "target-a-string",
        GOOD.replace("  target:\n    deployment: wrc\n", "  target: wrc\n"),
        ["spec.target", "must be a mapping"],
    ),
    (
        "unknown-spec-field",
        GOOD.replace("  enabled: false", "  enabled: false\n  treshold: 4096"),
        ["spec.treshold", "unknown field", "thresholdBytes"],
    ),
    (
        "unknown-target-field",
        GOOD.replace("    deployment: wrc", "    deployment: wrc\n    namespace: other"),
        ["spec.target.namespace", "unknown field"],
    ),
    (
        "bad-on-delete",
        GOOD.replace("  enabled: false", "  enabled: false\n  onDelete: Delete"),
        ["spec.onDelete", "Retain, Remove"],
    ),
    (
        "missing-name",
        GOOD.replace("  name: spillover\n", ""),
        ["metadata.name", "required"],
    ),
    ("missing-spec", GOOD.split("spec:")[0], ["spec: required"]),
    (
        "bad-deployment-name",
        GOOD.replace("deployment: wrc", "deployment: WRC_Controller"),
        ["spec.target.deployment", "not a valid Deployment name"],
    ),
]


@pytest.mark.parametrize(
    ("text", "needles"),
    [pytest.param(text, needles, id=name) for name, text, needles in BAD_POLICIES],
)
def test_bad_policy_files_exit_2_with_a_clear_message(
    tmp_path: Path, text: str, needles: list[str]
) -> None:
    path = _write(tmp_path, "policy.yaml", text)
    code, out, err = _run(["render", "-f", path])
    assert code == exit_codes.BAD_INPUT
    assert out == ""
    assert err.startswith(f"spilloverctl: error: {path}")
    for needle in needles:
        assert needle in err
    assert "Traceback" not in err


def test_several_problems_are_all_listed(tmp_path: Path) -> None:
    text = GOOD.replace("32768", "1").replace("enabled: false", "enabled: maybe")
    code, _, err = _run(["render", "-f", _write(tmp_path, "p.yaml", text)])
    assert code == exit_codes.BAD_INPUT
    assert "2 problems" in err
    assert "spec.enabled" in err and "spec.thresholdBytes" in err


def test_missing_policy_file(tmp_path: Path) -> None:
    code, _, err = _run(["render", "-f", str(tmp_path / "nope.yaml")])
    assert code == exit_codes.BAD_INPUT
    assert "nope.yaml: no such file" in err


def test_a_directory_is_not_a_policy_file(tmp_path: Path) -> None:
    code, _, err = _run(["render", "-f", str(tmp_path)])
    assert code == exit_codes.BAD_INPUT
    assert "is a directory" in err


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        pytest.param("a: [\n", ["not valid YAML"], id="not-yaml"),
        pytest.param("", ["empty file"], id="empty"),
        pytest.param("- 1\n", ["expected a Deployment mapping"], id="a-list"),
        pytest.param(
            DEPLOYMENT.replace("kind: Deployment", "kind: StatefulSet"),
            ["kind: must be 'Deployment'"],
            id="wrong-kind",
        ),
        pytest.param(
            DEPLOYMENT.replace("name: wrc", "name: other"),
            ["targets Deployment 'wrc'", "'other'"],
            id="other-deployment",
        ),
        pytest.param(
            DEPLOYMENT.split("      containers:")[0] + "      containers: []\n",
            ["spec.template.spec.containers: required"],
            id="no-containers",
        ),
        pytest.param(
            DEPLOYMENT.replace("        env:\n", "        env: lots\n        x:\n"),
            ["containers[0].env: must be a list"],
            id="env-not-a-list",
        ),
    ],
)
def test_bad_deployment_files_exit_2(tmp_path: Path, text: str, needles: list[str]) -> None:
    policy = _write(tmp_path, "p.yaml", GOOD)
    deployment = _write(tmp_path, "d.yaml", text)
    code, out, err = _run(["render", "-f", policy, "--deployment", deployment])
    assert code == exit_codes.BAD_INPUT
    assert out == ""
    for needle in needles:
        assert needle in err
    assert "Traceback" not in err


def test_a_named_container_missing_from_the_deployment(tmp_path: Path) -> None:
    policy = GOOD.replace("    deployment: wrc", "    deployment: wrc\n    container: main")
    code, _, err = _run(
        [
            "render",
            "-f",
            _write(tmp_path, "p.yaml", policy),
            "--deployment",
            _write(tmp_path, "d.yaml", DEPLOYMENT),
        ]
    )
    assert code == exit_codes.BAD_INPUT
    assert "container 'main' not found" in err
    assert "controller, sidecar" in err


def test_a_passthrough_from_value_from_cannot_be_planned(tmp_path: Path) -> None:
    dep = DEPLOYMENT.replace(
        '          value: "OPENAI_API_KEY, LOG_LEVEL"',
        "          valueFrom:\n            configMapKeyRef: {name: wrc, key: passthrough}",
    )
    code, _, err = _run(
        [
            "render",
            "-f",
            _write(tmp_path, "p.yaml", GOOD),
            "--deployment",
            _write(tmp_path, "d.yaml", dep),
        ]
    )
    assert code == exit_codes.BAD_INPUT
    assert "valueFrom" in err


SAMPLES = sorted((MANIFESTS / "samples").glob("*.yaml"))


def test_there_are_samples_to_render() -> None:
    assert len(SAMPLES) >= 3, SAMPLES


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_shipped_sample_renders(sample: Path) -> None:
    code, out, err = _run(["render", "-f", str(sample), "-o", "json"])
    assert code == exit_codes.OK, err
    doc = json.loads(out)
    enabled = doc["policy"]["spec"]["enabled"]
    assert doc["env"][ENABLED_VAR] == ("true" if enabled else "false")
    assert doc["patch"] is not None


# ---- envFrom: the operator's plan, ConfigMaps from files ---------------------------------

UNSET_THRESHOLD = GOOD.replace("  thresholdBytes: 32768\n", "")
WITH_ENV_FROM = DEPLOYMENT.replace(
    "        image: example/wrc:1\n",
    "        image: example/wrc:1\n"
    "        envFrom:\n"
    "        - configMapRef:\n"
    "            name: tuning\n",
)
TUNING = f"""\
apiVersion: v1
kind: ConfigMap
metadata:
  name: tuning
data:
  {THRESHOLD_VAR}: "4096"
"""


def test_render_plans_envfrom_from_the_config_map_files(tmp_path: Path) -> None:
    """An unset threshold that an envFrom ConfigMap sets is rendered as the default written
    explicitly, as the operator writes it (issue 20)."""
    code, out, err = _run(
        [
            "render",
            "-f",
            _write(tmp_path, "p.yaml", UNSET_THRESHOLD),
            "--deployment",
            _write(tmp_path, "d.yaml", WITH_ENV_FROM),
            "--config-map",
            _write(tmp_path, "cm.yaml", TUNING),
        ]
    )
    assert code == exit_codes.OK, err
    doc = yaml.safe_load(out)
    assert doc["env"][THRESHOLD_VAR] == "131072"
    assert doc["env"][BUDGET_VAR] is None  # the ConfigMap does not set it: absent is the default
    changes = {c["name"]: c["after"] for c in doc["changes"]}
    assert changes[THRESHOLD_VAR] == "131072"
    [note] = doc["envFromNotes"]
    assert note.startswith(f"envFrom configMap tuning sets {THRESHOLD_VAR}=4096")


def test_render_without_the_config_map_file_says_so_and_writes_the_defaults(
    tmp_path: Path,
) -> None:
    code, out, err = _run(
        [
            "render",
            "-f",
            _write(tmp_path, "p.yaml", UNSET_THRESHOLD),
            "--deployment",
            _write(tmp_path, "d.yaml", WITH_ENV_FROM),
        ]
    )
    assert code == exit_codes.OK, err
    doc = yaml.safe_load(out)
    assert doc["env"][THRESHOLD_VAR] == "131072"
    # Not read, the ConfigMap may set either: both unset fields are written as defaults.
    assert doc["env"][BUDGET_VAR] == "16777216"
    notes = doc["envFromNotes"]
    assert notes and all("pass its manifest with --config-map" in n for n in notes)


def test_render_without_envfrom_has_no_notes(tmp_path: Path) -> None:
    code, out, err = _run(["render", "-f", _write(tmp_path, "p.yaml", GOOD)])
    assert code == exit_codes.OK, err
    assert yaml.safe_load(out)["envFromNotes"] == []


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n", "kind: must be 'ConfigMap'"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "metadata.name: required"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: [1]\n", "data: must be"),
        ("- 1\n", "expected a ConfigMap mapping"),
    ],
)
def test_bad_config_map_files_exit_2(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path, "cm.yaml", text)
    code, _, err = _run(["render", "-f", _write(tmp_path, "p.yaml", GOOD), "--config-map", path])
    assert code == exit_codes.BAD_INPUT
    assert needle in err and path in err
    assert "Traceback" not in err
