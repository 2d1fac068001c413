"""`spilloverctl render` reads policies and Deployments through the strict loader
(issue 21 item 5): `enabled: false` then `enabled: true` rendered ON, silently releasing
the kill switch; now it is refused, as are the other inputs YAML would take."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from spillover_operator import exit_codes
from spillover_operator.cli.main import run

POLICY = """\
apiVersion: spillover.clerum.io/v1alpha1
kind: SpilloverPolicy
metadata:
  name: spillover
  namespace: clerum
spec:
  enabled: false
  target:
    deployment: wrc
"""


def render(tmp_path: Path, text: str) -> tuple[int, str, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = run(["render", "-f", str(path)], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_the_policy_renders(tmp_path: Path) -> None:
    code, out, err = render(tmp_path, POLICY)
    assert code == exit_codes.OK, err
    assert "CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED" in out


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        pytest.param("  enabled: false\n", "  enabled: false\n  enabled: true\n",
                     "duplicate key 'enabled'", id="kill-switch-released-by-a-duplicate"),
        pytest.param("  enabled: false\n", "  enabled: false\n  thresholdBytes: .inf\n",
                     ".inf is not a finite number", id="inf"),
        pytest.param("  enabled: false\n", "  enabled: false\n  budgetBytes: 1" + "0" * 400
                     + "\n", "is too large", id="10**400"),
        pytest.param("  enabled: false\n", "  enabled: false\n  1: x\n", "not a string",
                     id="non-string-key"),
        pytest.param("  enabled: false\n", "  enabled: false\n  x: " + "[" * 100_000
                     + "]" * 100_000 + "\n", "nested more than", id="deep"),
        pytest.param("deployment: wrc", "deployment: " + "W" * 1_000_000, "…",
                     id="1mb-scalar-cut"),
        pytest.param("  enabled: false\n", "  enabled: off\n",
                     "off reads as a boolean only in YAML 1.1", id="yaml-1.1-off"),
        pytest.param("  enabled: false\n", "  enabled: false\n  thresholdBytes: 65536.0\n",
                     "65536.0", id="float-size"),
    ],
)  # fmt: skip
def test_render_refuses_what_yaml_would_take(
    tmp_path: Path, old: str, new: str, needle: str
) -> None:
    code, out, err = render(tmp_path, POLICY.replace(old, new, 1))
    assert code == exit_codes.BAD_INPUT, err
    assert out == "" and "Traceback" not in err
    assert needle in err
    assert len(err) < 4000 and "W" * 100 not in err


def render_path(path: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["render", "-f", path], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_dev_zero_is_refused_as_a_device_not_read() -> None:
    """/dev/zero reports size 0 and never ends: refused before a byte is read."""
    code, _, err = render_path("/dev/zero")
    assert code == exit_codes.BAD_INPUT, err
    assert "/dev/zero: is a character device" in err and "pass a YAML file" in err


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Opening a FIFO for reading would wait for a writer forever: it is never opened."""
    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    code, _, err = render_path(str(fifo))
    assert code == exit_codes.BAD_INPUT, err
    assert "is a FIFO (named pipe)" in err


def test_a_file_over_the_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY + "#" + "x" * (16 * 1024 * 1024) + "\n", encoding="utf-8")
    code, _, err = render_path(str(path))
    assert code == exit_codes.BAD_INPUT, err
    assert "more than 16777216 bytes" in err
