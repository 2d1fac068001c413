"""`spillover-harness sensitivity`: vary each parameter of the simulator's model and
report which ones flip the simulated decision, and at what value
(studies/sensitivity.py)."""

from __future__ import annotations

import argparse
import math
import shlex
from typing import Any

from spillover_operator import exit_codes
from spillover_operator.domain.quoting import shorten

from spillover_harness.cli.common import (
    FORMATTER,
    STUDY_CODES,
    BadInput,
    Interrupted,
    add_study_args,
    epilog,
    err,
    load_matrix_arg,
    study_resume_argv,
)
from spillover_harness.plan.sim_model import PARAMETERS

CODES = STUDY_CODES


def name_list(text: str) -> list[str]:
    """`NAME,...`: at least one name, each once (an empty list would study everything,
    which leaving the option out already says)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(
            f"no parameter named in {shorten(text)}; give NAME,... (known: "
            f"{', '.join(p.name for p in PARAMETERS)}) or leave --parameters out to study all"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise argparse.ArgumentTypeError(
            f"{', '.join(twice)} named more than once; name each parameter once"
        )
    return names


def values_by_name(given: list[tuple[str, list[float]]]) -> dict[str, list[float]]:
    """The `--values` options as NAME -> values; BadInput when one NAME is given twice
    (the later would silently replace the earlier)."""
    names = [name for name, _ in given]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        name = twice[0]
        raise BadInput(
            f"--values {name}=... is given {names.count(name)} times; give each parameter's "
            f"values in one option, e.g. --values {name}=V1,V2,V3"
        )
    return dict(given)


def values_arg(text: str) -> tuple[str, list[float]]:
    """`NAME=v1,v2,...`."""
    name, sep, rest = text.partition("=")
    try:
        values = [float(v) for v in rest.split(",") if v.strip() and len(v) <= 40]
    except ValueError:
        values = []
    if (
        not sep
        or not name.strip()
        or not values
        or len(values) != len([v for v in rest.split(",") if v.strip()])
    ):
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE,VALUE,... (e.g. max_iterations=10,15,50), got {shorten(text)}"
        )
    bad = [f"{v:g}" for v in values if not math.isfinite(v)]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{name.strip()}={', '.join(bad)}: not a finite number; give finite values "
            "within the parameter's bounds (docs/simulator.md §1.5)"
        )
    return name.strip(), values


def add_parser(sub: Any) -> None:
    ranges = "\n".join(
        f"  {p.name}: {', '.join(f'{v:g}' for v in p.sweep)} ({p.unit})" for p in PARAMETERS
    )
    p = sub.add_parser(
        "sensitivity",
        formatter_class=FORMATTER,
        help="which parameters of the simulator's model flip the decision, and at what value",
        description=(
            "Run the matrix on the simulator with its own model (the reference), then\n"
            "once per tested value of each model parameter (one changed at a time),\n"
            "judge each like `run` and report which parameters flip the decision and at\n"
            "which value: OUT/sensitivity.md (a table), OUT/plots/tornado.png,\n"
            "OUT/sensitivity.json. Each value's stage is kept under OUT/points/ (durable;\n"
            "Ctrl-C stops, the same command with --resume continues).\n\n"
            "Tested values by default (docs/simulator.md §1.5, §7):\n" + ranges
        ),
        epilog=epilog(*CODES, extra="See docs/simulator.md §7."),
    )
    p.add_argument(
        "--parameters",
        type=name_list,
        default=[],
        metavar="NAME,...",
        help="only these parameters, each named once (default: leave it out for all)",
    )
    p.add_argument(
        "--values",
        type=values_arg,
        action="append",
        default=[],
        metavar="NAME=V,V,...",
        help="repeatable, once per NAME: test these values of NAME instead of its documented range",
    )
    add_study_args(p, what="study")
    p.set_defaults(func=cmd_sensitivity)


def resume_command(args: argparse.Namespace) -> str:
    argv = ["spillover-harness", "sensitivity"]
    if args.parameters:
        argv += ["--parameters", ",".join(args.parameters)]
    for name, values in args.values:
        argv += ["--values", f"{name}=" + ",".join(f"{v:g}" for v in values)]
    argv += study_resume_argv(args)
    return shlex.join([*argv, "--resume"])


def cmd_sensitivity(args: argparse.Namespace) -> int:
    from spillover_harness.results.results_dir import hold_results_dir
    from spillover_harness.run.runner import StopRequest, stop_on_signals
    from spillover_harness.studies.sensitivity import (
        REFERENCE,
        SensitivityPoint,
        assemble,
        plan_points,
        point_dir,
        point_matrix,
        run_point,
    )
    from spillover_harness.studies.sensitivity_report import write_sensitivity_report

    base = load_matrix_arg(args.matrix)
    try:
        plan = plan_points(base, args.parameters, values_by_name(args.values))
    except (KeyError, ValueError) as exc:
        raise BadInput(str(exc).strip("\"'")) from None
    again = resume_command(args)
    total = 1 + sum(len(values) for _, values in plan)
    stop = StopRequest()
    points: dict[tuple[str, float], SensitivityPoint] = {}
    with hold_results_dir(args.out, command=args.invoked), stop_on_signals(stop):
        todo: list[tuple[str, float | None]] = [(REFERENCE, None)]
        todo += [(p.name, v) for p, values in plan for v in values]
        reference: SensitivityPoint | None = None
        for done, (name, value) in enumerate(todo, 1):
            matrix = base if value is None else point_matrix(base, name, value)
            label = REFERENCE if value is None else f"{name}={value:g}"
            point = run_point(
                matrix,
                point_dir(args.out, name, value),
                name,
                0.0 if value is None else value,
                resume=args.resume,
                concurrency=args.concurrency,
                resume_hint=again,
                cancel=stop,
            )
            if point is None:
                err(f"interrupted at {label} ({done - 1} of {total} done). To continue: {again}")
                return exit_codes.INTERRUPTED
            err(f"[sensitivity] {done}/{total} {label}: decision {point.decision}")
            if value is None:
                reference = point
            else:
                points[(name, value)] = point
        assert reference is not None
        try:
            result = assemble(reference, plan, points, base)
            paths = write_sensitivity_report(result, base, args.out, command=args.invoked)
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted while writing the report; every stage is recorded. To write "
                f"it: {again}"
            ) from None
    print(f"decision with the matrix's model: {reference.decision}")
    for study in result.ranked():
        below, above = study.flip_below(), study.flip_above()
        where = [f"flips at {p.value:g} -> {p.decision} (below)" for p in (below,) if p]
        where += [f"flips at {p.value:g} -> {p.decision} (above)" for p in (above,) if p]
        print(f"  {study.parameter.name}: " + ("; ".join(where) if where else "no flip"))
    print(f"report: {paths.report_md}")
    return exit_codes.OK
