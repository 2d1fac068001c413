"""`spillover-harness apply-decision`: set a SpilloverPolicy to a stage's decision, in
the cluster (through the client library) or in a policy manifest (`--gitops FILE`).
The mapping from decision to spec is `apply.decision` (docs/harness.md)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
from pathlib import Path
from typing import Any

from spillover_operator import exit_codes
from spillover_operator.domain.model import THRESHOLD

from spillover_harness.cli.common import (
    FORMATTER,
    BadInput,
    dir_path,
    epilog,
    err,
    file_path,
    load_matrix_arg,
    load_records,
)
from spillover_harness.cli.outcome import incomplete, judge
from spillover_harness.input_file import shown
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import faults_noted
from spillover_harness.results.results_dir import StageDir

CODES = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.NOT_FOUND,
    exit_codes.API,
    exit_codes.INCONCLUSIVE,
    exit_codes.INCOMPLETE,
    exit_codes.INTERRUPTED,
)

FIELD_MANAGER = "spillover-harness"
DEFAULT_POLICY = "spillover"  # as apply.decision.DEFAULT_POLICY (imported lazily there)

_REFUSAL_CODES = {
    "inconclusive": exit_codes.INCONCLUSIVE,
    "incomplete": exit_codes.INCOMPLETE,
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "apply-decision",
        formatter_class=FORMATTER,
        help="set a SpilloverPolicy to a stage's decision (cluster or --gitops manifest)",
        description=(
            "Read the decision in DIR/verdict.json and set the SpilloverPolicy to it:\n"
            "  false            spec.enabled=false (the kill switch)\n"
            f"  {THRESHOLD.default:<17}spec.enabled=true, spec.thresholdBytes removed "
            "(the default)\n"
            "  N (the chain's)  spec.enabled=true, spec.thresholdBytes=N\n"
            "(and spec.budgetBytes when the deciding configuration sets a budget).\n"
            "Through the client library, as one merge patch of the spec; the operator\n"
            "rolls it out (check with `spilloverctl status`). --gitops FILE edits the\n"
            "policy in a manifest of a Git checkout instead (only the changed lines),\n"
            "--dry-run prints the change and writes nothing. An inconclusive verdict\n"
            "(exit 8) or an incomplete stage (exit 9) is refused, a stage run with\n"
            "--fault always, and a simulated verdict (stage sim) unless --allow-simulated.\n"
            "DIR is the directory the stage wrote: its runs.jsonl is checked first, and a\n"
            "verdict.json without it (a report written elsewhere) is refused (exit 2)."
        ),
        epilog=epilog(*CODES, extra="See docs/harness.md, 'apply-decision'."),
    )
    p.add_argument(
        "--results",
        required=True,
        type=dir_path,
        metavar="DIR",
        help="a stage's results directory (verdict.json beside its runs.jsonl)",
    )
    p.add_argument("--policy", default=DEFAULT_POLICY, metavar="NAME", help="default: spillover")
    p.add_argument(
        "-n",
        "--namespace",
        default=None,
        metavar="NS",
        help="the policy's namespace (default: the context's, else clerum); with --gitops, "
        "the manifest's policy must be in it when both name one",
    )
    p.add_argument("--kubeconfig", default=None, metavar="FILE", help="default: $KUBECONFIG")
    p.add_argument("--context", default=None, metavar="NAME", help="kube context")
    p.add_argument(
        "--gitops",
        type=file_path,
        default=None,
        metavar="FILE",
        help="edit the SpilloverPolicy in this manifest (in a Git checkout) instead of the "
        "cluster; the rest of the file is kept as it is",
    )
    p.add_argument("--dry-run", action="store_true", help="print the change; write nothing")
    p.add_argument(
        "--allow-simulated",
        action="store_true",
        help="apply a verdict of the sim stage (the simulator's answer, not the platform's)",
    )
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="apply a stage judged with runs missing (evaluate --allow-incomplete)",
    )
    p.set_defaults(func=cmd_apply_decision)


def cmd_apply_decision(args: argparse.Namespace) -> int:
    from spillover_harness.apply.decision import (
        DecisionRefused,
        check_against_records,
        check_decision,
        read_decision,
        spec_patch,
    )

    if args.gitops is not None and (args.kubeconfig or args.context):
        raise BadInput("--gitops edits a file, not the cluster: drop --kubeconfig / --context")
    try:
        stage = read_decision(
            args.results,
            allow_incomplete=args.allow_incomplete,
            allow_simulated=args.allow_simulated,
        )
        records = _records_beside(args.results)
        matrix = _decision_matrix(args.results, stage.matrix)
        patch = spec_patch(stage.decision, matrix)  # the platform's bounds
        check_decision(stage.decision, matrix, stage.verdict_path)  # the matrix's chain
    except DecisionRefused as exc:
        err(f"error: {exc}")
        return _REFUSAL_CODES.get(exc.kind, exit_codes.BAD_INPUT)
    # fit the stage's matrix and stage.json, as evaluate checks
    stage_records = load_records(records, matrix)
    # the decision applied is the one its records give, never verdict.json's word alone
    recomputed = judge(stage_records, matrix, allow_incomplete=args.allow_incomplete)
    try:
        check_against_records(
            stage,
            recomputed=recomputed.decision,
            decided=recomputed.decided,
            incomplete=incomplete(recomputed),
            faults=faults_noted(stage_records),
            results=args.results,
        )
    except DecisionRefused as exc:
        err(f"error: {exc}")
        return _REFUSAL_CODES.get(exc.kind, exit_codes.BAD_INPUT)
    print(f"decision: {stage.decision} (stage {stage.stage}, matrix {stage.matrix})")
    if args.gitops is not None:
        return _apply_gitops(args, patch, simulated=stage.simulated)
    return _apply_cluster(args, patch)


def _records_beside(results: Path) -> Path:
    """The records the verdict was judged from (runs.jsonl beside it). A verdict
    without them (a report written into another directory, a verdict.json copied or
    edited) cannot be checked against them, so it is refused, not applied unchecked."""
    records = StageDir(results).records_file
    if not records.exists():  # a dangling link too
        raise BadInput(
            f"{shown(records)}: no such file: apply-decision applies a verdict only beside "
            "the records it was judged from (they are checked first); nothing is applied. "
            "Pass the results directory the stage wrote (run --out: runs.jsonl, stage.json "
            "and verdict.json together)"
        )
    return records


def _decision_matrix(results: Path, name: str) -> Matrix:
    """The matrix that made the stage (stored in stage.json): its chain says which
    decisions exist and its configurations which budget goes with one. Without a
    stored matrix, the packaged one when the verdict names it; else refused."""
    from spillover_harness.results.results_dir import ResultsDirError, StageDir, stored_matrix

    directory = StageDir(results)
    try:
        stage_file = directory.read_stage()
        stored = (
            stored_matrix(stage_file, source=str(directory.stage_file))
            if stage_file is not None
            else None
        )
    except ResultsDirError as exc:
        raise BadInput(f"{exc}; nothing is applied") from None
    if stored is not None:
        return stored
    default = load_matrix_arg(None)
    if name == default.name:
        return default
    raise BadInput(
        f"{shown(results)}: no stage.json with the matrix {name!r} beside verdict.json, so "
        "the decision cannot be checked against its chain; nothing is applied: pass the "
        "results directory the stage wrote"
    )


def _print_change(lines: list[str], where: str, *, dry_run: bool) -> None:
    if not lines:
        print(f"{where} already says this; nothing to change")
        return
    print(f"{'would change' if dry_run else 'changed'} {where}:")
    for line in lines:
        print(f"  spec.{line}")


def _apply_cluster(args: argparse.Namespace, patch: dict[str, Any]) -> int:
    from spillover_operator.client import (
        ClientError,
        NotFound,
        connect,
        get_policy,
        patch_policy,
    )

    from spillover_harness.apply.decision import describe_change

    try:
        conn = connect(args.kubeconfig, args.context, args.namespace, field_manager=FIELD_MANAGER)
        policy = get_policy(conn, args.policy)
        spec = policy.get("spec") or {}
        lines = describe_change(spec, patch)
        where = f"SpilloverPolicy {conn.namespace}/{args.policy}"
        if lines and not args.dry_run:
            patch_policy(conn, args.policy, {"spec": patch})
    except NotFound as exc:
        err(f"error: {exc.message}")
        return exit_codes.NOT_FOUND
    except ClientError as exc:
        err(f"error: {exc.message}")
        return exit_codes.API
    _print_change(lines, where, dry_run=args.dry_run)
    if lines and not args.dry_run:
        print(
            f"the operator rolls it out; check with: spilloverctl -n {conn.namespace} "
            f"status {args.policy}"
        )
    return exit_codes.OK


def _apply_gitops(args: argparse.Namespace, patch: dict[str, Any], *, simulated: bool) -> int:
    from spillover_harness.apply.decision import describe_change
    from spillover_harness.apply.gitops import ManifestError, edit_manifest

    try:
        edit = edit_manifest(
            args.gitops, args.policy, args.namespace, patch, write=not args.dry_run
        )
    except ManifestError as exc:
        raise BadInput(str(exc)) from None
    lines = describe_change(edit.before, patch)
    _print_change(lines, f"{args.gitops} ({args.policy})", dry_run=args.dry_run)
    if lines and not args.dry_run:
        top = _git_toplevel(args.gitops)
        if top is None:
            err(f"note: {args.gitops} is not in a Git checkout; commit it where it belongs")
        else:
            rel = args.gitops.resolve().relative_to(top)
            message = shlex.quote(commit_message(simulated=simulated))
            print(
                f"commit it: git -C {shlex.quote(str(top))} commit -m {message} -- "
                f"{shlex.quote(str(rel))}"
            )
    return exit_codes.OK


def commit_message(*, simulated: bool) -> str:
    """The suggested commit message: a simulated verdict was not validated on the
    platform, and the message must not say it was."""
    if simulated:
        return (
            "spillover: set the simulator's decision (not validated on the platform; "
            "applied with --allow-simulated)"
        )
    return "spillover: apply the validated decision"


def _git_toplevel(path: Path) -> Path | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(path.resolve().parent), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(out.stdout.strip()).resolve() if out.returncode == 0 else None
