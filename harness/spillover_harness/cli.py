"""`spillover-harness`: run the spillover validation matrix and decide the default.

Subcommands: `run`, `evaluate`, `report`, `fixtures export`. The exit codes are
part of the interface (scripts may trust them) and are listed in EXIT_CODES.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from spillover_harness.matrix import Matrix, MatrixError, load_matrix
from spillover_harness.records import RecordError, RunRecord, read_records

if TYPE_CHECKING:
    from spillover_harness.evaluate import Verdict

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_INCONCLUSIVE = 3
EXIT_PREFLIGHT = 4
EXIT_CLUSTER = 5
EXIT_INTERRUPTED = 130

DECISIONS = ("131072", "32768", "false")

EXIT_CODES = f"""\
exit codes (run, evaluate, report):
  {EXIT_OK}    a decision was reached: 131072, 32768 or false (read it from the
       output or verdict.json; `false` is a decision, not an error)
  {EXIT_INCONCLUSIVE}    the verdict is inconclusive (missing data or too few valid runs;
       the report says which runs are needed)
  {EXIT_BAD_INPUT}    bad input: usage, matrix, profile, records file, results directory
       refused
  {EXIT_PREFLIGHT}    preflight failed (run --stage minikube, preflight): the checklist
       names each failure and its fix
  {EXIT_CLUSTER}    cluster stage stopped before or between runs: the cluster could not be
       reached, a configuration could not be applied or verified through the
       operator (no run was spent on it), or Stage 1 was not accepted for this
       mcp-host version (dev); the policy was restored
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C / SIGTERM): finished runs are kept, rerun the
       same command with --resume
  {EXIT_INTERNAL}    internal error (a bug in the harness; the traceback is printed)
`fixtures export` exits {EXIT_OK} on success, {EXIT_BAD_INPUT} on bad input."""

FAULTS = {
    "spill-to-disk": "write spilled results under <run output dir>/.spill",
    "log-results": "log tool-result content",
}

CLUSTER_NEEDS_PROFILE = (
    "stage '{stage}' runs on a cluster and needs --profile (a file, or the shipped "
    "'minikube' / 'dev'); see docs/cluster-profile.md"
)


class BadInput(Exception):
    """A user mistake: printed as `error: ...` with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


_FMT = argparse.RawDescriptionHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="spillover-harness",
        formatter_class=_FMT,
        description=(
            "Validation harness for workflow step spillover: runs the matrix of\n"
            "configurations (off, 128KiB, 32KiB) x recipes x inputs x repetitions,\n"
            "judges each configuration against `off` and decides the default\n"
            "(131072, 32768 or false). `run --stage sim` needs no cluster."
        ),
        epilog=EXIT_CODES + "\n\nSee docs/harness.md for the results directory and resume.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run",
        formatter_class=_FMT,
        help="run a stage of the matrix, then evaluate and write the report",
        description=(
            "Run every (configuration, recipe, input, repetition) of a stage, appending\n"
            "each run record to OUT/runs.jsonl as it finishes (flushed and fsynced),\n"
            "then evaluate the records and write OUT/report.md, OUT/verdict.json and\n"
            "the plots. Configurations are interleaved. Ctrl-C stops cleanly (exit 130);\n"
            "rerun the same command with --resume to finish the stage. A directory\n"
            "that already holds records is refused without --resume (records are\n"
            "never overwritten), and --resume refuses a directory made by another\n"
            "matrix, stage or fault set."
        ),
        epilog=EXIT_CODES,
    )
    run.add_argument(
        "--stage",
        required=True,
        choices=("sim", "minikube", "dev"),
        help="sim: the embedded simulator (no cluster); minikube, dev: cluster stages "
        "(need --profile)",
    )
    _add_cluster_args(run)
    run.add_argument(
        "--stage1-results",
        type=Path,
        default=None,
        metavar="DIR",
        help="dev only: the Stage 1 (minikube) results directory whose accepted verdict "
        "for the same mcp-host version lets Stage 2 start (default: results/minikube)",
    )
    run.add_argument(
        "--override-stage1",
        metavar="REASON",
        default=None,
        help="dev only: start without an accepted Stage 1 verdict; REASON is printed "
        "and written into the report",
    )
    run.add_argument(
        "--apply-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="cluster stages: how long to wait for the operator to apply a configuration "
        "and the WRC to roll out (default 600)",
    )
    _add_matrix_arg(run)
    run.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="results directory (created)"
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the stage recorded in --out: skip the runs already recorded",
    )
    run.add_argument(
        "--concurrency",
        type=_positive_int,
        metavar="N",
        help="runs at once (default: the matrix's `concurrency`)",
    )
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar; print a plain line every few runs instead (the default "
        "when stderr is not a terminal)",
    )
    run.add_argument(
        "--fault",
        action="append",
        choices=sorted(FAULTS),
        default=[],
        help="sim only, repeatable: make the simulated mcp-host misbehave so the leak "
        "checks can be seen to work (criterion no_leak must fail). "
        + "; ".join(f"{k}: {v}" for k, v in FAULTS.items()),
    )
    run.set_defaults(func=cmd_run)

    ev = sub.add_parser(
        "evaluate",
        formatter_class=_FMT,
        help="print the verdict of a records file",
        description=(
            "Judge the records of a runs.jsonl file against the matrix's acceptance\n"
            "criteria and print the verdict. --format json prints exactly one JSON\n"
            'object: `decision` ("131072", "32768", "false" or "inconclusive") and\n'
            "`configs`, keyed by configuration, each with `verdict` and `criteria`\n"
            "(success_rate, iteration_limit, input_tokens, summary_quality, no_leak),\n"
            "each with `status` and its evidence. A bad line is named (file:line)."
        ),
        epilog=EXIT_CODES,
    )
    _add_records_arg(ev)
    _add_matrix_arg(ev)
    ev.add_argument(
        "--format",
        choices=("md", "json"),
        default="md",
        help="md: the report's Markdown (default); json: one JSON object",
    )
    ev.set_defaults(func=cmd_evaluate)

    rep = sub.add_parser(
        "report",
        formatter_class=_FMT,
        help="write report.md, verdict.json and plots for a records file",
        description=(
            "Evaluate a runs.jsonl file and write DIR/report.md (ready to paste into a\n"
            "pull request), DIR/verdict.json and the PNG plots."
        ),
        epilog=EXIT_CODES,
    )
    _add_records_arg(rep)
    _add_matrix_arg(rep)
    rep.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory")
    rep.set_defaults(func=cmd_report)

    pf = sub.add_parser(
        "preflight",
        formatter_class=_FMT,
        help="check a cluster is ready for a stage (a checklist with the fix of each failure)",
        description=(
            "Check, and print as a checklist: the kube context (for minikube: the\n"
            "context named by MINIKUBE_PROFILE), the SpilloverPolicy CRD, the operator\n"
            "running, the policy Ready, the WRC Deployment and its passthrough list,\n"
            "the recipes' endpoint, Prometheus scraping the mcp-host, the fixtures loaded."
        ),
        epilog=f"exit codes: {EXIT_OK} every check passed, {EXIT_PREFLIGHT} a check failed, "
        f"{EXIT_BAD_INPUT} bad input",
    )
    pf.add_argument("--stage", required=True, choices=("minikube", "dev"))
    _add_cluster_args(pf)
    _add_matrix_arg(pf)
    pf.set_defaults(func=cmd_preflight)

    fx = sub.add_parser(
        "fixtures",
        formatter_class=_FMT,
        help="the generated inputs of the recipes",
        description="Work with the deterministic fixtures (the recipes' inputs).",
    )
    fx_sub = fx.add_subparsers(dest="fixtures_command", metavar="ACTION", required=True)
    exp = fx_sub.add_parser(
        "export",
        formatter_class=_FMT,
        help="write the fixtures as files",
        description=(
            "Write the fixtures (code-review changes, the summarize document) as files\n"
            "under DIR, so the same inputs can be loaded into the real recipes. The\n"
            "same seed always gives the same files."
        ),
    )
    exp.add_argument("dir", type=Path, metavar="DIR", help="output directory (created)")
    exp.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="fixture seed (default: the default matrix's seed, i.e. the simulator's inputs)",
    )
    exp.set_defaults(func=cmd_fixtures_export)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def _add_matrix_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        metavar="FILE",
        help="matrix YAML (default: the packaged spillover-default.yaml)",
    )


def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="cluster profile YAML, or the shipped 'minikube' / 'dev' (docs/cluster-profile.md)",
    )
    p.add_argument("--kubeconfig", default=None, metavar="FILE", help="default: $KUBECONFIG")
    p.add_argument(
        "--context",
        default=None,
        metavar="NAME",
        help="kube context (default: the profile's kube_context); for minikube, the "
        "Minikube profile name",
    )


def _add_records_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", required=True, type=Path, metavar="FILE", help="a runs.jsonl file")


# ---------------------------------------------------------------------------------------
# helpers


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _load_matrix(path: Path | None) -> Matrix:
    try:
        return load_matrix(path)
    except MatrixError as exc:
        raise BadInput(f"bad matrix: {exc}") from None


def _load_records(path: Path) -> list[RunRecord]:
    if path.is_dir():
        raise BadInput(f"{path}: is a directory; pass its runs.jsonl")
    try:
        return read_records(path)
    except RecordError as exc:
        raise BadInput(f"bad records file: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the records file: {exc}") from None


def decision_exit_code(decision: str) -> int:
    return EXIT_OK if decision in DECISIONS else EXIT_INCONCLUSIVE


def decision_line(verdict: Verdict, matrix: Matrix) -> str:
    """`decision: 32768 (128KiB failed: input_tokens; 32KiB passed)`: one short line.

    The configurations are walked in the order of the decision chain, up to the
    one that decided; the full reasons and evidence are in the report.
    """
    parts: list[str] = []
    for step in matrix.decision.chain:
        cv = verdict.configs.get(step.config)
        if cv is None:
            continue
        if cv.verdict == "pass":
            parts.append(f"{cv.name} passed")
            break
        bad = [key for key, crit in cv.criteria.items() if crit.status == cv.verdict]
        word = "failed" if cv.verdict == "fail" else "inconclusive"
        parts.append(f"{cv.name} {word}" + (f": {', '.join(bad)}" if bad else ""))
        if cv.verdict != "fail":
            break  # an inconclusive configuration stops the chain
    return f"decision: {verdict.decision}" + (f" ({'; '.join(parts)})" if parts else "")


def _check_records_match_matrix(records: Sequence[RunRecord], matrix: Matrix) -> None:
    """Records of configurations or cells the matrix does not know mean the wrong matrix."""
    configs = {c.name for c in matrix.configurations}
    unknown_configs = sorted({r.config for r in records} - configs)
    unknown_cells = sorted(
        {f"{r.recipe}/{r.input}" for r in records if matrix.size_class(r.recipe, r.input) is None}
    )
    problems = []
    if unknown_configs:
        problems.append(f"configurations not in the matrix: {', '.join(unknown_configs)}")
    if unknown_cells:
        problems.append(f"recipe/input not in the matrix: {', '.join(unknown_cells)}")
    if problems:
        raise BadInput(
            f"the records do not fit matrix '{matrix.name}' ({'; '.join(problems)}); "
            f"pass the matrix they were made with (--matrix FILE)"
        )
    stages = sorted({r.stage for r in records})
    if len(stages) > 1:
        raise BadInput(
            f"the records mix stages ({', '.join(stages)}); evaluate one stage at a time"
        )


def _evaluate(records: list[RunRecord], matrix: Matrix) -> Verdict:
    from spillover_harness.evaluate import evaluate

    return evaluate(records, matrix)


def _write_report(
    verdict: Verdict,
    records: list[RunRecord],
    matrix: Matrix,
    out_dir: Path,
    *,
    stage_notes: Sequence[str] = (),
) -> Path:
    from spillover_harness.report import write_report

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{out_dir}: cannot create the output directory: {exc}") from None
    paths = write_report(verdict, records, matrix, out_dir, stage_notes=stage_notes)
    return Path(paths.report_md)


def _shell_command(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in ["spillover-harness", *argv])


# ---------------------------------------------------------------------------------------
# commands


def cmd_run(args: argparse.Namespace) -> int:
    from spillover_harness.runner import ResultsDirError, StopRequest, run_stage, stop_on_signals

    if args.stage != "sim":
        return _cmd_run_cluster(args)
    matrix = _load_matrix(args.matrix)
    faults = sorted(set(args.fault))

    from spillover_harness.drivers.sim import SimDriver, SimFaults
    from spillover_harness.fixtures import build_fixtures

    driver = SimDriver(
        faults=SimFaults(
            write_spill_to_disk="spill-to-disk" in faults,
            log_tool_results="log-results" in faults,
        ),
        fixtures=build_fixtures(matrix.seed),
    )
    resume_argv = [
        "run",
        "--stage",
        args.stage,
        *(["--matrix", str(args.matrix)] if args.matrix else []),
        "--out",
        str(args.out),
        *[x for f in faults for x in ("--fault", f)],
        "--resume",
    ]
    resume_cmd = _shell_command(resume_argv)
    if faults:
        _err(f"faults injected into the simulator: {', '.join(faults)}")
    stop = StopRequest()
    try:
        with stop_on_signals(stop):
            result = run_stage(
                matrix,
                args.stage,
                driver,
                args.out,
                resume=args.resume,
                concurrency=args.concurrency,
                progress=not args.no_progress,
                cancel=stop,
                driver_identity={"kind": "sim", "faults": faults},
                matrix_source=str(args.matrix) if args.matrix else "<default>",
                resume_hint=resume_cmd,
            )
    except ResultsDirError as exc:
        raise BadInput(str(exc)) from None

    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items())) or "none"
    if result.interrupted:
        why = stop.signal_name or "a stop request"
        _err(
            f"interrupted by {why}: {len(result.records)} of {result.planned} runs are "
            f"recorded in {result.records_path} ({counts}); "
            f"{result.missing} still to run."
        )
        if result.discarded:
            _err(f"  {result.discarded} runs cut short were not recorded; they will run again.")
        _err(f"  To finish the stage: {resume_cmd}")
        return EXIT_INTERRUPTED
    if result.abandoned:
        _err(
            f"warning: {len(result.abandoned)} runs never returned from the driver after their "
            f"timeout; they are recorded as harness_error"
        )

    verdict = _evaluate(result.records, matrix)
    report_md = _write_report(verdict, result.records, matrix, args.out)
    print(
        f"stage {args.stage}: {len(result.records)}/{result.planned} runs recorded "
        f"({result.recorded_now} this time, {result.wall_s:.1f}s; {counts})"
    )
    print(f"records: {result.records_path}")
    print(decision_line(verdict, matrix))
    print(f"report: {report_md}")
    return decision_exit_code(verdict.decision)


def _load_profile(args: argparse.Namespace) -> Any:
    from spillover_harness.profile import ProfileError, load_profile

    if not args.profile:
        raise BadInput(CLUSTER_NEEDS_PROFILE.format(stage=args.stage))
    try:
        return load_profile(args.profile)
    except ProfileError as exc:
        raise BadInput(f"bad profile: {exc}") from None


def cmd_preflight(args: argparse.Namespace) -> int:
    from spillover_harness.cluster.kubeconn import Target
    from spillover_harness.cluster.preflight import run_preflight
    from spillover_harness.fixtures import build_fixtures

    profile = _load_profile(args)
    matrix = _load_matrix(args.matrix)
    target = Target(args.kubeconfig, args.context)
    result = run_preflight(profile, target, args.stage, matrix, build_fixtures(matrix.seed))
    print(result.render())
    return EXIT_OK if result.ok else EXIT_PREFLIGHT


def _cmd_run_cluster(args: argparse.Namespace) -> int:
    from spillover_harness.cluster.kubeconn import ClusterStageError, Target
    from spillover_harness.cluster.stage import PreflightFailed, run_cluster_stage
    from spillover_harness.fixtures import build_fixtures
    from spillover_harness.runner import ResultsDirError, StageAbort, StopRequest, stop_on_signals

    if args.fault:
        raise BadInput("--fault is for --stage sim only (the simulated mcp-host)")
    if args.concurrency not in (None, 1):
        raise BadInput(
            "cluster stages run one run at a time (one configuration on the cluster, counters "
            "per mcp-host process): drop --concurrency"
        )
    if args.stage == "minikube" and (args.override_stage1 or args.stage1_results):
        raise BadInput("--stage1-results / --override-stage1 are for --stage dev")
    profile = _load_profile(args)
    matrix = _load_matrix(args.matrix)
    target = Target(args.kubeconfig, args.context)
    resume_argv = [
        "run",
        "--stage",
        args.stage,
        "--profile",
        str(args.profile),
        *(["--kubeconfig", args.kubeconfig] if args.kubeconfig else []),
        *(["--context", args.context] if args.context else []),
        *(["--matrix", str(args.matrix)] if args.matrix else []),
        "--out",
        str(args.out),
        "--resume",
    ]
    resume_cmd = _shell_command(resume_argv)
    stop = StopRequest()
    try:
        with stop_on_signals(stop):
            outcome = run_cluster_stage(
                matrix=matrix,
                stage=args.stage,
                profile=profile,
                target=target,
                out_dir=args.out,
                fixtures=build_fixtures(matrix.seed),
                resume=args.resume,
                cancel=stop,
                log=_err,
                progress=not args.no_progress,
                stage1_results=args.stage1_results,
                override_stage1=args.override_stage1,
                apply_timeout_s=args.apply_timeout,
                matrix_source=str(args.matrix) if args.matrix else "<default>",
                resume_hint=resume_cmd,
            )
    except PreflightFailed:
        _err("error: preflight failed; fix the items marked ✘ above, then run again")
        return EXIT_PREFLIGHT
    except ResultsDirError as exc:
        raise BadInput(str(exc)) from None
    except (ClusterStageError, StageAbort) as exc:
        _err(f"error: stage {args.stage} stopped: {exc}")
        _err(f"  the runs already recorded are kept; after the fix: {resume_cmd}")
        return EXIT_CLUSTER
    result = outcome.result
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items())) or "none"
    if result.interrupted:
        why = stop.signal_name or "a stop request"
        _err(
            f"interrupted by {why}: {len(result.records)} of {result.planned} runs are "
            f"recorded in {result.records_path} ({counts}); {result.missing} still to run."
        )
        _err(f"  To finish the stage: {resume_cmd}")
        return EXIT_INTERRUPTED
    verdict = _evaluate(result.records, matrix)
    report_md = _write_report(
        verdict, result.records, matrix, args.out, stage_notes=outcome.stage_notes
    )
    print(
        f"stage {args.stage}: {len(result.records)}/{result.planned} runs recorded "
        f"({result.recorded_now} this time, {result.wall_s:.1f}s; {counts})"
    )
    print(f"mcp-host version: {outcome.version}")
    if outcome.stage1_override:
        print(f"Stage 1 gate overridden: {outcome.stage1_override}")
    print(f"records: {result.records_path}")
    print(decision_line(verdict, matrix))
    print(f"report: {report_md}")
    return decision_exit_code(verdict.decision)


def cmd_evaluate(args: argparse.Namespace) -> int:
    matrix = _load_matrix(args.matrix)
    records = _load_records(args.records)
    _check_records_match_matrix(records, matrix)
    verdict = _evaluate(records, matrix)
    if args.format == "json":
        print(json.dumps(verdict.to_json(), indent=2, sort_keys=False))
    else:
        from spillover_harness.report import render_markdown

        print(render_markdown(verdict, records, matrix), end="")
    return decision_exit_code(verdict.decision)


def cmd_report(args: argparse.Namespace) -> int:
    matrix = _load_matrix(args.matrix)
    records = _load_records(args.records)
    _check_records_match_matrix(records, matrix)
    verdict = _evaluate(records, matrix)
    report_md = _write_report(verdict, records, matrix, args.out)
    print(decision_line(verdict, matrix))
    print(f"report: {report_md}")
    return decision_exit_code(verdict.decision)


def cmd_fixtures_export(args: argparse.Namespace) -> int:
    from spillover_harness.fixtures import build_fixtures, default_fixture_seed, export_fixtures

    seed = args.seed if args.seed is not None else default_fixture_seed()
    out: Path = args.dir
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = export_fixtures(build_fixtures(seed), out)
    except OSError as exc:
        raise BadInput(f"{out}: cannot write the fixtures: {exc}") from None
    print(f"wrote {len(paths)} fixture files under {out} (seed {seed})")
    return EXIT_OK


# ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Any = args.func
    try:
        code: int = func(args)
        return code
    except BadInput as exc:
        _err(f"error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # outside the run loop (which handles SIGINT itself)
        _err("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `... | head`: not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit-time flush does not fail again
        return EXIT_OK
    except Exception:
        _err("internal error (a bug in spillover-harness; please report it):")
        traceback.print_exc()
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
