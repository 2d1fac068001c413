"""`spillover-harness run`: run a stage of the matrix, then evaluate and report.

The results directory is held (results_dir.hold_results_dir) from before the
first write to the last byte of the report: a second process is refused at once.
The command that continues the stage is built once, from the parsed arguments
(`resume_command`), and is what every message and stage.json show.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spillover_operator import exit_codes

from spillover_harness.cli.common import (
    FORMATTER,
    BadInput,
    Interrupted,
    add_cluster_args,
    add_matrix_arg,
    concurrency,
    dir_path,
    epilog,
    err,
    load_matrix_arg,
    positive_float,
    stage_beside,
    whole_number,
)
from spillover_harness.cli.outcome import judge, print_outcome, write_report
from spillover_harness.plan.matrix import REPETITIONS_MAX, Matrix
from spillover_harness.sim.faults import FAULT_SWITCHES, fault_help

STAGES = ("sim", "minikube", "dev")
CLUSTER = ("minikube", "dev")
DEFAULT_APPLY_TIMEOUT_S = 600.0

CODES = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.API,
    exit_codes.PREFLIGHT,
    exit_codes.INCONCLUSIVE,
    exit_codes.INCOMPLETE,
    exit_codes.LOCKED,
    exit_codes.INTERRUPTED,
)

CLUSTER_NEEDS_PROFILE = (
    "stage '{stage}' runs on a cluster and needs --profile (a file, or the shipped "
    "'minikube' / 'dev'); see docs/cluster-profile.md"
)


@dataclass(frozen=True)
class RunOption:
    """An option of `run`: which stages it applies to, and how it is given again."""

    flag: str
    dest: str
    stages: tuple[str, ...]
    kind: str = "value"  # "value" | "flag" | "repeat"


# Every option of `run` but --stage and --resume, in the order the resume command
# names them. An option given for a stage it does not apply to is refused.
RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("--profile", "profile", CLUSTER),
    RunOption("--kubeconfig", "kubeconfig", CLUSTER),
    RunOption("--context", "context", CLUSTER),
    RunOption("--kubectl", "kubectl", CLUSTER),
    RunOption("--stage1-results", "stage1_results", ("dev",)),
    RunOption("--override-stage1", "override_stage1", ("dev",)),
    RunOption("--override-stage1-false", "override_stage1_false", ("dev",), "flag"),
    RunOption("--apply-timeout", "apply_timeout", CLUSTER),
    RunOption("--matrix", "matrix", STAGES),
    RunOption("--out", "out", STAGES),
    RunOption("--concurrency", "concurrency", STAGES),
    RunOption("--fault", "fault", ("sim",), "repeat"),
    RunOption("--no-progress", "no_progress", STAGES, "flag"),
    RunOption("--until-stable", "until_stable", STAGES),
    RunOption("--max-repetitions", "max_repetitions", STAGES),
)


def _given(args: argparse.Namespace, option: RunOption) -> bool:
    value = getattr(args, option.dest)
    return value not in (None, False, [])


def resume_command(args: argparse.Namespace) -> str:
    """The command that continues this stage: the same options, plus --resume."""
    argv = ["spillover-harness", "run", "--stage", args.stage]
    for option in RUN_OPTIONS:
        if not _given(args, option):
            continue
        value: Any = getattr(args, option.dest)
        if option.kind == "flag":
            argv.append(option.flag)
        elif option.kind == "repeat":
            for item in value:
                argv += [option.flag, str(item)]
        else:
            argv += [option.flag, f"{value:g}" if isinstance(value, float) else str(value)]
    argv.append("--resume")
    return shlex.join(argv)


def check_options_apply(args: argparse.Namespace) -> None:
    """Refuse options that do nothing for the chosen stage (rather than ignore them)."""
    wrong = [o for o in RUN_OPTIONS if _given(args, o) and args.stage not in o.stages]
    if wrong:
        raise BadInput(
            "\n  ".join(
                f"{o.flag} is for --stage {', '.join(o.stages)} only; it does not apply to "
                f"--stage {args.stage}: drop it"
                for o in wrong
            )
        )
    if args.stage in CLUSTER and not args.profile:
        raise BadInput(CLUSTER_NEEDS_PROFILE.format(stage=args.stage))
    if (args.until_stable is None) != (args.max_repetitions is None):
        raise BadInput(
            "--until-stable S and --max-repetitions N go together: S the probability that a "
            "fresh stage decides the same, to reach; N the most repetitions a cell may reach"
        )


def check_adaptive(args: argparse.Namespace, matrix: Matrix) -> None:
    """--max-repetitions must leave room above the matrix's own repetitions."""
    if args.max_repetitions is None:
        return
    own = matrix.repetitions.for_stage(args.stage)
    if args.max_repetitions < own:
        raise BadInput(
            f"--max-repetitions {args.max_repetitions} is below the matrix's {own} "
            f"repetition(s) of stage {args.stage}: give at least {own} (more, to let "
            "--until-stable add runs)"
        )


def check_cap_covers_extension(args: argparse.Namespace, matrix: Matrix) -> None:
    """--max-repetitions must not be below what --until-stable already gave a cell of this
    stage (its stage.json): the cap could not be honoured, and would read as reached."""
    if args.max_repetitions is None or not matrix.extension:
        return
    most = max(matrix.extension.values())
    if args.max_repetitions < most:
        cells = ", ".join(f"{cell} ({n})" for cell, n in matrix.extension.items() if n == most)
        raise BadInput(
            f"--max-repetitions {args.max_repetitions} is below the {most} repetitions "
            f"--until-stable already gave {cells} in {args.out} (its stage.json): give at "
            f"least {most}"
        )


def add_parser(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        formatter_class=FORMATTER,
        help="run a stage of the matrix, then evaluate and write the report",
        description=(
            "Run every (configuration, recipe, input, repetition) of a stage, appending\n"
            "each run record to OUT/runs.jsonl as it finishes (flushed and fsynced),\n"
            "then evaluate the records and write OUT/report.md, OUT/verdict.json and\n"
            "the plots. Configurations are interleaved. Ctrl-C stops cleanly (exit 130);\n"
            "rerun the same command with --resume to finish the stage. A directory\n"
            "that already holds records is refused without --resume (records are\n"
            "never overwritten), --resume refuses a directory made by another matrix,\n"
            "stage or fault set (and says what differs), and a directory another\n"
            "spillover-harness process is writing is refused at once (exit 10).\n"
            "Every value of the matrix is checked before the first run. An option\n"
            "that does not apply to the chosen stage is refused."
        ),
        epilog=epilog(*CODES),
    )
    run.add_argument(
        "--stage",
        required=True,
        choices=STAGES,
        help="sim: the embedded simulator (no cluster); minikube, dev: cluster stages "
        "(need --profile)",
    )
    add_cluster_args(run)
    run.add_argument(
        "--stage1-results",
        type=dir_path,
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
        "--override-stage1-false",
        action="store_true",
        help="dev only: start although Stage 1 decided `false` (spillover off), which "
        "otherwise keeps Stage 2 closed; every other check of the gate stays. Recorded in "
        "stage.json (provenance.stage1_gate) and the report",
    )
    run.add_argument(
        "--apply-timeout",
        type=positive_float,
        default=None,
        metavar="S",
        help="cluster stages: how long to wait for the operator to apply a configuration "
        f"and the WRC to roll out (default {DEFAULT_APPLY_TIMEOUT_S:g})",
    )
    add_matrix_arg(run)
    run.add_argument(
        "--out", required=True, type=dir_path, metavar="DIR", help="results directory (created)"
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the stage recorded in --out: skip the runs already recorded",
    )
    run.add_argument(
        "--concurrency",
        type=concurrency,
        metavar="N",
        help="sim: runs at once (default: the matrix's `concurrency`); cluster stages: runs "
        "of one configuration at once (default 1; never two configurations at once, and the "
        "report notes that durations were measured under concurrency)",
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
        choices=sorted(f.name for f in FAULT_SWITCHES),
        default=[],
        help="sim only, repeatable: make the simulated mcp-host misbehave so the checks "
        "can be seen to work (the decision changes or a check fails; apply-decision refuses "
        "the verdict; `make faults` runs every switch). " + fault_help(),
    )
    run.add_argument(
        "--until-stable",
        type=_share,
        default=None,
        metavar="S",
        help="after the matrix's repetitions, add runs to the cells whose fresh runs most "
        "often move the decision, until a fresh stage of the design would decide the same "
        "with probability at least S (0 < S < 1, the verdict's reproducibility), or every "
        "such cell reaches --max-repetitions (docs/harness.md)",
    )
    run.add_argument(
        "--max-repetitions",
        type=whole_number("--max-repetitions", REPETITIONS_MAX),
        default=None,
        metavar="N",
        help="with --until-stable: the most repetitions a cell may reach (at least the "
        "matrix's for the stage)",
    )
    run.set_defaults(func=cmd_run)


def _share(text: str) -> float:
    try:
        value = float(text) if len(text) <= 20 else float("nan")
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"--until-stable takes a share between 0 and 1 (exclusive), e.g. 0.9; got {text[:20]!r}"
        )
    return value


# ---------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from spillover_harness.results.results_dir import hold_results_dir, with_stage_extension

    args.fault = sorted(set(args.fault))
    check_options_apply(args)
    matrix = load_matrix_arg(args.matrix)
    if args.stage in CLUSTER and matrix.simulated_only:
        raise BadInput(
            f"configurations {', '.join(matrix.simulated_only)} use strategy: handoff, which "
            f"only the simulator models (docs/simulator.md §8); --stage {args.stage} cannot "
            "run them: use a matrix without them"
        )
    check_adaptive(args, matrix)
    profile = _load_profile(args.profile, args.kubectl) if args.stage in CLUSTER else None
    resume_cmd = resume_command(args)
    with hold_results_dir(args.out, command=args.invoked):
        # A stage --until-stable extended is planned as it now is (stage.json).
        matrix = with_stage_extension(matrix, args.out)
        check_cap_covers_extension(args, matrix)
        if profile is None:
            return _run_sim(args, matrix, resume_cmd)
        return _run_cluster(args, matrix, profile, resume_cmd)


def _load_profile(name: str, kubectl: str | None) -> Any:
    from spillover_harness.profile import ProfileError, load_profile, with_kubectl

    try:
        return with_kubectl(load_profile(name), kubectl)
    except ProfileError as exc:
        raise BadInput(f"bad profile: {exc}") from None


def _matrix_source(args: argparse.Namespace) -> str:
    from spillover_harness.results.results_dir import DEFAULT_MATRIX_SOURCE

    return str(args.matrix) if args.matrix else DEFAULT_MATRIX_SOURCE


def _run_sim(args: argparse.Namespace, matrix: Matrix, resume_cmd: str) -> int:
    from spillover_harness.run.runner import StopRequest, stop_on_signals
    from spillover_harness.stages.sim_stage import SimStageSpec, sim_stage

    faults: list[str] = args.fault
    stage = sim_stage(
        matrix,
        SimStageSpec(
            faults=faults,
            matrix_source=_matrix_source(args),
            resume=args.resume,
            concurrency=args.concurrency,
            progress=not args.no_progress,
            resume_hint=resume_cmd,
        ),
    )
    if faults:
        err(
            f"faults injected into the simulator: {', '.join(faults)} (a test of the checks: "
            "its verdict is never applied)"
        )
    stop = StopRequest()
    with stop_on_signals(stop):
        result = stage.run(matrix, args.out, cancel=stop)

        def again(extended: Matrix) -> Any:
            return stage.run(extended, args.out, cancel=stop, resume=True)

        matrix, result = _until_stable(args, matrix, result, again)
    if not result.interrupted:
        lane = stage.write_lane(matrix, args.out)
        if lane is not None:
            err(f"concurrency lane: {lane}")
    return _finish(args, matrix, result, stop, resume_cmd)


def _run_cluster(args: argparse.Namespace, matrix: Matrix, profile: Any, resume_cmd: str) -> int:
    from spillover_harness.cluster.kubeconn import ClusterStageError, Target
    from spillover_harness.drivers.base import StageAbort
    from spillover_harness.fixtures import build_fixtures
    from spillover_harness.run.runner import StopRequest, stop_on_signals
    from spillover_harness.stages.cluster_stage import (
        ClusterStageOptions,
        PreflightFailed,
        run_cluster,
    )

    stop = StopRequest()
    try:
        with stop_on_signals(stop):
            options = ClusterStageOptions(
                matrix=matrix,
                stage=args.stage,
                profile=profile,
                target=Target(args.kubeconfig, args.context),
                out_dir=args.out,
                fixtures=build_fixtures(matrix.seed),
                resume=args.resume,
                progress=not args.no_progress,
                stage1_results=args.stage1_results,
                override_stage1=args.override_stage1,
                override_stage1_false=args.override_stage1_false,
                profile_source=args.profile,
                apply_timeout_s=args.apply_timeout or DEFAULT_APPLY_TIMEOUT_S,
                matrix_source=_matrix_source(args),
                resume_hint=resume_cmd,
                concurrency=args.concurrency or 1,
                adaptive=(
                    (lambda m, r, again: _until_stable(args, m, r, again))
                    if args.until_stable is not None
                    else None
                ),
            )
            outcome = run_cluster(options, cancel=stop, log=err)
            matrix = outcome.matrix or matrix
    except PreflightFailed:
        err("error: preflight failed; fix the items marked ✘ above, then run again")
        return exit_codes.PREFLIGHT
    except (ClusterStageError, StageAbort) as exc:
        err(f"error: stage {args.stage} stopped: {exc}")
        err(f"  the runs already recorded are kept; after the fix: {resume_cmd}")
        return exit_codes.API
    lines = [f"mcp-host version: {outcome.version}"]
    if outcome.stage1_override:
        lines.append(f"Stage 1 gate overridden: {outcome.stage1_override}")
    return _finish(
        args, matrix, outcome.result, stop, resume_cmd, lines=lines, notes=outcome.stage_notes
    )


def _until_stable(
    args: argparse.Namespace, matrix: Matrix, result: Any, again: Callable[[Matrix], Any]
) -> tuple[Matrix, Any]:
    """--until-stable: while the decision is unstable, record the next round in
    stage.json, then run it (`again`, the same stage resumed with the extended matrix)."""
    from spillover_harness.plan.adaptive import Round, extended, next_round
    from spillover_harness.results.results_dir import extend_stage

    if args.until_stable is None:
        return matrix, result
    while not result.interrupted and not result.missing:
        verdict = judge(result.records, matrix, allow_incomplete=False)
        step = next_round(
            matrix, args.stage, verdict, target=args.until_stable, cap=args.max_repetitions
        )
        if not isinstance(step, Round):
            err(f"until-stable: done: {step.why}")
            break
        matrix = extended(matrix, step)
        extend_stage(
            args.out,
            matrix,
            {**step.record(), "until_stable": args.until_stable, "cap": args.max_repetitions},
        )
        err(f"until-stable: {step.why}")
        result = again(matrix)
    return matrix, result


def _finish(
    args: argparse.Namespace,
    matrix: Matrix,
    result: Any,
    stop: Any,
    resume_cmd: str,
    *,
    lines: list[str] | None = None,
    notes: list[str] | None = None,
) -> int:
    """After the runs: the interruption message, or the verdict, the report, the outcome."""
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items())) or "none"
    if result.interrupted:
        why = stop.signal_name or "a stop request"
        err(
            f"interrupted by {why}: {len(result.records)} of {result.planned} runs are "
            f"recorded in {result.records_path} ({counts}); {result.missing} still to run."
        )
        if result.discarded:
            err(f"  {result.discarded} runs cut short were not recorded; they will run again.")
        err(f"  To finish the stage: {resume_cmd}")
        return exit_codes.INTERRUPTED
    if result.abandoned:
        err(
            f"warning: {len(result.abandoned)} runs never returned from the driver after their "
            f"timeout; they are recorded as harness_error"
        )
    try:
        verdict = judge(
            result.records,
            matrix,
            allow_incomplete=False,
            records_dir=result.records_path.parent,
        )
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted during the evaluation: the {len(result.records)} runs are recorded in "
            f"{result.records_path}; the report was not written. To write it: {resume_cmd}"
        ) from None
    report_md = write_report(
        verdict,
        result.records,
        matrix,
        args.out,
        records_path=result.records_path,
        stage=stage_beside(result.records_path),  # the stage.json this run wrote
        stage_notes=notes or [],
        rerun=resume_cmd,
    )
    return print_outcome(
        verdict,
        matrix,
        lines=[
            f"stage {args.stage}: {len(result.records)}/{result.planned} runs recorded "
            f"({result.recorded_now} this time, {result.wall_s:.1f}s; {counts})",
            *(lines or []),
            f"records: {result.records_path}",
        ],
        report_md=report_md,
    )
