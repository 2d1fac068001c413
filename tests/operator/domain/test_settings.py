"""The operator's settings: read once from its environment, a bad one refused with one
line. The start-up path itself: `kopf run -m spillover_operator.main` with a bad
allow-list exits 2 with that line, before it connects to anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from spillover_operator import exit_codes
from spillover_operator.domain import allowlist, leadership
from spillover_operator.domain.recipe_pods import Owner
from spillover_operator.domain.settings import (
    DEFAULT_RESYNC_SECONDS,
    METRICS_PORT_VAR,
    RESYNC_VAR,
    OperatorSettings,
    SettingsError,
    from_environ,
    resync_seconds,
)


def test_an_empty_environment_gives_the_defaults() -> None:
    settings = from_environ({})
    assert settings == OperatorSettings()
    assert settings.allowed_targets == allowlist.DEFAULT
    assert settings.resync_seconds == DEFAULT_RESYNC_SECONDS
    assert settings.metrics_port == 9090
    assert settings.leader_id is None


def test_every_setting_is_read() -> None:
    settings = from_environ(
        {
            allowlist.ALLOWED_TARGETS_VAR: "wrc, wrc-b",
            allowlist.REFRESH_DEPLOYMENTS_VAR: "mcp-host-r1",
            RESYNC_VAR: "60",
            METRICS_PORT_VAR: "0",
            leadership.ID_VAR: " op-1 ",
        }
    )
    assert settings.allowed_targets.names == ("wrc", "wrc-b")
    assert settings.target_refusal("wrc-b") is None
    assert "is not one the operator may configure" in str(settings.target_refusal("other"))
    assert settings.refresh_refusal(Owner("Deployment", "mcp-host-r1")) is None
    assert settings.refresh_refusal(Owner("Deployment", "ledger")) is not None
    assert (settings.resync_seconds, settings.metrics_port) == (60.0, 0)
    assert settings.identity() == "op-1"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({allowlist.ALLOWED_TARGETS_VAR: "wrc,*"}, "there is no wildcard"),
        ({allowlist.REFRESH_STATEFULSETS_VAR: "Bad_Name"}, "is not a StatefulSet name"),
        ({RESYNC_VAR: "soon"}, f"{RESYNC_VAR} must be a number, got 'soon'"),
        ({RESYNC_VAR: "0.5"}, f"{RESYNC_VAR} must be at least 1"),
        ({METRICS_PORT_VAR: "-1"}, f"{METRICS_PORT_VAR} must be at least 0"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message) as info:
        from_environ(environ)
    assert "\n" not in str(info.value)


def test_resync_default_and_bounds() -> None:
    assert resync_seconds({}) == DEFAULT_RESYNC_SECONDS
    assert resync_seconds({RESYNC_VAR: " "}) == DEFAULT_RESYNC_SECONDS
    with pytest.raises(SettingsError, match=f"{RESYNC_VAR} must be at least 1"):
        resync_seconds({RESYNC_VAR: "0"})


def test_kopf_run_stops_at_start_up_on_a_bad_allow_list(tmp_path: Path) -> None:
    """The real start-up path: kopf imports spillover_operator.main before it logs in,
    so no cluster is needed to see the operator refuse to start."""
    kopf = Path(sys.executable).with_name("kopf")
    assert kopf.exists(), f"kopf is not installed next to {sys.executable}; run make install"
    env = {
        **os.environ,
        allowlist.ALLOWED_TARGETS_VAR: "workflow-recipe-controller,payments-*",
        "KUBECONFIG": str(tmp_path / "none"),  # never read: the import stops first
    }
    proc = subprocess.run(
        [str(kopf), "run", "--standalone", "-m", "spillover_operator.main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == exit_codes.BAD_INPUT, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "spillover-operator: not started: SPILLOVER_ALLOWED_TARGETS="
        "'workflow-recipe-controller,payments-*' is invalid: 'payments-*': there is no "
        "wildcard, name each Deployment. Set it to the comma-separated names of the "
        "Deployments the operator may configure (for example workflow-recipe-controller)"
    ]
    assert "Traceback" not in proc.stderr
