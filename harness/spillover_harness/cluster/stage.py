"""A whole cluster stage: preflight, the Stage 1 gate, the matrix in configuration
blocks through the operator, the policy restored, the report.

- Stage `minikube` runs the preflight first (a failure stops it), then records the
  mcp-host version it validates (the profile's `mcp_host_version`, else the
  `imageID` of a running mcp-host pod) in `stage.json` (`driver.mcp_host_version`)
  and in the report.
- Stage `dev` starts only when the Stage 1 results directory holds an ACCEPTED
  Stage 1 verdict for the same mcp-host version: its `stage.json` says stage
  `minikube` and that version, and its `verdict.json` holds a decision that was
  reached: one the matrix's decision chain can end in (a step's default or the
  fallback, e.g. `131072`, `32768`, `65536`, `false`), not `inconclusive`.
  `--override-stage1 REASON` lets it start anyway; the reason is printed and goes
  into the report.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kubernetes import client

from spillover_harness.cluster.configs import PolicyApplier, PolicyGuard
from spillover_harness.cluster.driver import ClusterDriver
from spillover_harness.cluster.kubeconn import ClusterStageError, Target, connect_profile
from spillover_harness.cluster.observe import mcp_host_image
from spillover_harness.cluster.plan import block_order
from spillover_harness.cluster.preflight import PreflightResult, run_preflight
from spillover_harness.cluster.starters import make_starter
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.fixtures import FixtureSet
from spillover_harness.matrix import Matrix
from spillover_harness.profile import Profile
from spillover_harness.runner import StageResult, run_stage

DEFAULT_STAGE1_DIR = Path("results/minikube")


class PreflightFailed(ClusterStageError):
    def __init__(self, result: PreflightResult) -> None:
        super().__init__("preflight failed")
        self.result = result


class Stage1GateError(ClusterStageError):
    """Stage dev may not start: no accepted Stage 1 verdict for this version."""


def mcp_host_version(profile: Profile, core: client.CoreV1Api) -> str:
    if profile.mcp_host_version:
        return profile.mcp_host_version
    try:
        image = mcp_host_image(core, profile.namespace, profile.pods.mcp_host)
    except Exception as exc:
        raise ClusterStageError(f"cannot read the mcp-host pods: {type(exc).__name__}") from None
    if image is None:
        raise ClusterStageError(
            f"no running mcp-host pod ({profile.pods.mcp_host.selector}) reports an imageID in "
            f"namespace {profile.namespace}, so the stage cannot record the version it validates; "
            "start one, or set mcp_host_version in the profile"
        )
    return image


def stage1_decided(verdict: Mapping[str, object], matrix: Matrix) -> bool:
    """Whether a Stage 1 verdict reached a decision (it is not `inconclusive`).

    The one place the gate judges a decision: one the matrix's chain can end in (a
    step's default or the fallback), never a fixed list of values. Once verdict.json
    carries the evaluator's `decided`, this becomes `verdict.get("decided") is True`.
    """
    reachable = {step.default for step in matrix.decision.chain} | {matrix.decision.fallback}
    return verdict.get("decision") in reachable


def check_stage1(results: Path, version: str, matrix: Matrix) -> str:
    """A line describing the accepted Stage 1 verdict; Stage1GateError otherwise.

    `matrix` says which decisions count as reached (`stage1_decided`)."""
    stage_path, verdict_path = results / "stage.json", results / "verdict.json"
    fix = (
        "run Stage 1 first (make validate-minikube), pass --stage1-results DIR, or "
        "--override-stage1 REASON"
    )
    try:
        stage = json.loads(stage_path.read_text(encoding="utf-8"))
        verdict = json.loads(verdict_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Stage1GateError(
            f"no Stage 1 results in {results} ({type(exc).__name__}); {fix}"
        ) from None
    if stage.get("stage") != "minikube":
        raise Stage1GateError(
            f"{stage_path} is a stage '{stage.get('stage')}' result, not minikube; {fix}"
        )
    theirs = (stage.get("driver") or {}).get("mcp_host_version")
    if theirs != version:
        raise Stage1GateError(
            f"Stage 1 in {results} validated mcp-host {theirs!r}, the dev cluster runs "
            f"{version!r}; {fix}"
        )
    decision = verdict.get("decision")
    if not stage1_decided(verdict, matrix):
        raise Stage1GateError(
            f"Stage 1 in {results} has no accepted verdict (decision {decision!r}); {fix}"
        )
    return f"Stage 1 accepted for this mcp-host version: decision {decision} ({results})"


@dataclass
class ClusterStageOutcome:
    result: StageResult
    version: str
    stage_notes: list[str] = field(default_factory=list)
    restored: str | None = None
    stage1_override: str | None = None  # the reason, when --override-stage1 let dev start


def run_cluster_stage(
    *,
    matrix: Matrix,
    stage: str,
    profile: Profile,
    target: Target,
    out_dir: Path,
    fixtures: FixtureSet,
    resume: bool,
    cancel: threading.Event,
    log: Callable[[str], None],
    progress: bool = True,
    stage1_results: Path | None = None,
    override_stage1: str | None = None,
    skip_preflight: bool = False,
    apply_timeout_s: float = 600.0,
    matrix_source: str = "<default>",
    resume_hint: str | None = None,
) -> ClusterStageOutcome:
    """Raises ClusterStageError (PreflightFailed, Stage1GateError, ConfigApplyError...)
    or the runner's ResultsDirError / StageAbort."""
    if stage == "minikube" and not skip_preflight:
        pre = run_preflight(profile, target, stage, matrix, fixtures)
        log(pre.render())
        if not pre.ok:
            raise PreflightFailed(pre)
    cluster = connect_profile(profile, target)
    core = client.CoreV1Api(cluster.api_client)
    version = mcp_host_version(profile, core)
    notes = [f"mcp-host version validated: `{version}`", f"cluster profile: `{profile.name}`"]
    if stage == "dev":
        if override_stage1:
            notes.append(f"**Stage 1 gate overridden**: {override_stage1}")
            log(f"Stage 1 gate OVERRIDDEN: {override_stage1}")
        else:
            line = check_stage1(stage1_results or DEFAULT_STAGE1_DIR, version, matrix)
            notes.append(line)
            log(line)
    applier = PolicyApplier(cluster, profile, timeout_s=apply_timeout_s, log=log)
    starter = make_starter(profile, target, cluster)
    driver = ClusterDriver(
        profile,
        core,
        applier,
        starter,
        PrometheusCollector.from_profile(profile.prometheus),
        fixtures,
        log=log,
    )
    guard = PolicyGuard(applier, log)
    try:
        with guard:
            result = run_stage(
                matrix,
                stage,
                driver,
                out_dir,
                resume=resume,
                concurrency=1,
                progress=progress,
                cancel=cancel,
                driver_identity={
                    "kind": "cluster",
                    "profile": profile.name,
                    "mcp_host_version": version,
                },
                matrix_source=matrix_source,
                resume_hint=resume_hint,
                order=partial(block_order, config_names=[c.name for c in matrix.configurations]),
            )
    finally:
        starter.close()
    override = override_stage1 if stage == "dev" and override_stage1 else None
    return ClusterStageOutcome(result, version, notes, guard.restored, override)
