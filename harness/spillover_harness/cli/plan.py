"""`spillover-harness plan`: before a cluster is spent, how often the acceptance rule
would fail a configuration as good as the baseline at a stage's repetitions, and how
many repetitions keep that under a target (plan/false_fail.py)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from spillover_operator import exit_codes

from spillover_harness.cli.common import (
    FORMATTER,
    BadInput,
    add_matrix_arg,
    epilog,
    load_matrix_arg,
    load_records,
    whole_number,
)
from spillover_harness.plan.false_fail import MAX_REPETITIONS
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import STAGES

CODES = (exit_codes.OK, exit_codes.INTERNAL, exit_codes.BAD_INPUT, exit_codes.INTERRUPTED)

DEFAULTS = {
    "success_rate": 0.9,
    "limit_rate": 0.0,
    "quality_rate": 0.95,
    "token_spread": 0.10,
    "large_drop": 0.20,
}


# flag, metavar, range, help: the assumptions `plan` takes (each in DEFAULTS).
_ASSUMPTIONS = (
    ("--success-rate", "P", 0.0, 1.0, "assumed success rate in every cell"),
    ("--limit-rate", "P", 0.0, 1.0, "assumed iteration-limit hit rate"),
    ("--quality-rate", "P", 0.0, 1.0, "assumed quality_ok rate"),
    ("--token-spread", "CV", 0.0, 5.0, "assumed spread of input tokens (coefficient of variation)"),
    (
        "--large-drop",
        "D",
        0.0,
        0.99,
        "how much lower a good configuration's median is on large inputs (with --from: "
        "measured unless given)",
    ),
)


def _unit(flag: str, low: float, high: float, *, open_low: bool = False) -> Any:
    """An argparse type: a finite number in [low, high] ((low, high] when open_low)."""

    def parse(text: str) -> float:
        try:
            value = float(text) if len(text) <= 40 else math.nan
        except ValueError:
            value = math.nan
        inside = (low < value if open_low else low <= value) and value <= high
        if not (math.isfinite(value) and inside):
            bracket = "(" if open_low else "["
            raise argparse.ArgumentTypeError(
                f"{flag} takes a number in {bracket}{low:g}, {high:g}], got {text[:40]!r}"
            )
        return value

    return parse


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        formatter_class=FORMATTER,
        help="before a cluster is spent: how often the rule fails a configuration as good "
        "as off, and the repetitions that keep it rare",
        description=(
            "For the matrix and a stage, print the probability that the acceptance rule\n"
            "fails a configuration as good as the baseline (the same success, limit-hit\n"
            "and quality rates, the same token spread; on large inputs a median lower by\n"
            "--large-drop), per criterion and for the decision chain, and the repetitions\n"
            "per cell from which on it stays under --target. The rates are assumed\n"
            "(--success-rate ...) or measured in an earlier stage's results (--from DIR,\n"
            "the baseline's runs, of the same matrix). Runs nothing; no cluster."
        ),
        epilog=epilog(*CODES, extra='See docs/reference.md, "How sure the verdict is".'),
    )
    add_matrix_arg(p)
    p.add_argument("--stage", choices=STAGES, default="dev", help="whose repetitions (default dev)")
    p.add_argument(
        "--repetitions",
        type=whole_number("--repetitions", MAX_REPETITIONS),
        default=None,
        metavar="N",
        help="per configuration and cell (default: the matrix's for --stage)",
    )
    p.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="take the rates from an earlier stage's results (runs.jsonl and stage.json "
        "of the same matrix) instead of assuming them",
    )
    for flag, kind, low, high, what in _ASSUMPTIONS:
        key = flag.removeprefix("--").replace("-", "_")
        p.add_argument(
            flag,
            type=_unit(flag, low, high, open_low=low > 0 or kind == "CV"),
            default=None,
            metavar=kind,
            help=f"{what} (default {DEFAULTS[key]})",
        )
    p.add_argument(
        "--target",
        type=_unit("--target", 0, 0.99, open_low=True),
        default=0.1,
        metavar="P",
        help="the false-fail probability to stay under (default 0.1)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from spillover_harness.plan.false_fail import Assumptions, plan

    matrix = load_matrix_arg(args.matrix)
    repetitions = args.repetitions or matrix.repetitions.for_stage(args.stage)
    if args.from_dir is not None:
        given = [
            f"--{k.replace('_', '-')}"
            for k in ("success_rate", "limit_rate", "quality_rate", "token_spread")
            if getattr(args, k) is not None
        ]
        if given:
            raise BadInput(f"{', '.join(given)} and --from both give the rates: use one of them")
        assumptions = measured(matrix, args.from_dir, args.large_drop)
    else:
        value = {k: getattr(args, k) for k in DEFAULTS}
        value = {k: DEFAULTS[k] if v is None else v for k, v in value.items()}
        assumptions = Assumptions.uniform(
            matrix,
            success=value["success_rate"],
            limit=value["limit_rate"],
            quality=value["quality_rate"],
            token_spread=value["token_spread"],
            large_drop=value["large_drop"],
            source="assumed (--success-rate, --limit-rate, --quality-rate, --token-spread)",
        )
    result = plan(matrix, args.stage, repetitions, args.target, assumptions)
    result.notes.extend(unexercised_inputs(matrix))
    for note in result.notes:
        print(f"warning: {note}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(render(result))
    return exit_codes.OK


def unexercised_inputs(matrix: Matrix) -> list[str]:
    """A line per (configuration, input) the input cannot exercise: its largest file, read
    whole as one tool result, stays below the configuration's threshold, so spillover
    stores nothing there and the configuration's passes on it say only that nothing
    changed (docs/harness.md, "Inputs that exercise a configuration")."""
    from spillover_harness.fixtures import build_fixtures
    from spillover_harness.plan.matrix import effective_threshold

    fixtures = build_fixtures(matrix.seed)
    out: list[str] = []
    for config in matrix.configurations:
        threshold = effective_threshold(config)
        if config.name == matrix.acceptance.baseline or threshold is None:
            continue
        short: list[str] = []
        for recipe, spec in matrix.cells():
            files = fixtures.get(recipe.name, spec.name).files
            largest = max((len(c.encode()) if isinstance(c, str) else len(c)
                           for c in files.values()), default=0)  # fmt: skip
            if largest < threshold:
                short.append(f"{recipe.name}/{spec.name} (largest file {largest / 1024:.0f} KiB)")
        if short:
            out.append(
                f"{config.name} (threshold {threshold // 1024} KiB) cannot be exercised by "
                f"{', '.join(short)}: no result there reaches the threshold, so its passes "
                "there will say only that nothing changed; add an input with a larger file "
                "to the matrix (docs/harness.md)"
            )
    return out


def measured(matrix: Matrix, directory: Path, large_drop: float | None) -> Any:
    """The baseline's rates per cell in an earlier stage of the same matrix."""
    from statistics import mean, median, pstdev

    from spillover_harness.plan.false_fail import Assumptions
    from spillover_harness.results.results_dir import (
        ResultsDirError,
        StageDir,
        matrix_hash,
        stored_matrix,
    )

    if not directory.is_dir():
        raise BadInput(f"--from {directory}: not a results directory (run --out DIR writes one)")
    try:
        stage_file = StageDir(directory).read_stage()
    except ResultsDirError as exc:
        raise BadInput(f"--from {directory}: {exc}") from None
    if stage_file is None:
        raise BadInput(f"--from {directory}: no stage.json: not the results of `run`")
    if stage_file.matrix_hash != matrix_hash(matrix):
        raise BadInput(
            f"--from {directory}: its stage ran matrix {stage_file.matrix_name!r}, "
            f"another matrix than the one planned ({matrix.name!r}, or the same name with "
            "other contents): rates of other cells or configurations do not carry over. "
            "Plan with that stage's matrix (--matrix), or give rates (--success-rate ...)"
        )
    try:  # a stage `run --until-stable` extended holds more repetitions than the matrix
        ran = stored_matrix(stage_file, source=str(directory / "stage.json")) or matrix
    except ResultsDirError as exc:
        raise BadInput(f"--from {directory}: {exc}") from None
    records = load_records(StageDir(directory).records_file, ran)
    base = matrix.acceptance.baseline
    first = matrix.decision.chain[0].config
    success: dict[tuple[str, str], float] = {}
    limit: dict[tuple[str, str], float] = {}
    quality: dict[tuple[str, str], float] = {}
    spread: dict[tuple[str, str], float] = {}
    counts: dict[str, dict[tuple[str, str], tuple[int, int]]] = {
        "success": {},
        "limit": {},
        "quality": {},
    }
    drops: list[float] = []
    for recipe, inp in ((r.name, i.name) for r, i in matrix.cells()):
        runs = [
            r for r in records
            if (r.config, r.recipe, r.input) == (base, recipe, inp) and r.outcome != "harness_error"
        ]  # fmt: skip
        if not runs:
            raise BadInput(
                f"--from {directory}: no valid run of {base} in {recipe}/{inp}, so its rates "
                "cannot be measured; finish that stage (run --resume) or give rates"
            )
        # each rate as measured, k of n: `plan` averages over its posterior (5/5 is not 1);
        # the figure shown is the posterior mean
        good = sum(r.outcome == "succeeded" for r in runs)
        counts["success"][(recipe, inp)] = (good, len(runs))
        success[(recipe, inp)] = (good + 0.5) / (len(runs) + 1)
        hits = [r.hit_iteration_limit for r in runs if r.hit_iteration_limit is not None]
        if hits:
            counts["limit"][(recipe, inp)] = (sum(hits), len(hits))
        limit[(recipe, inp)] = (sum(hits) + 0.5) / (len(hits) + 1) if hits else 0.0
        known = [r.quality_ok for r in runs if r.quality_ok is not None]
        if known:
            counts["quality"][(recipe, inp)] = (sum(known), len(known))
        quality[(recipe, inp)] = (sum(known) + 0.5) / (len(known) + 1) if known else 1.0
        tokens = [r.input_tokens for r in runs if r.input_tokens is not None]
        spread[(recipe, inp)] = (
            max(pstdev(tokens) / mean(tokens), 0.01) if len(tokens) > 1 and mean(tokens) else 0.1
        )
        if matrix.size_class(recipe, inp) == "large" and tokens:
            ours = [
                r.input_tokens for r in records
                if (r.config, r.recipe, r.input) == (first, recipe, inp)
                and r.input_tokens is not None
            ]  # fmt: skip
            if ours:
                drops.append(max(0.0, min(0.99, 1 - median(ours) / median(tokens))))
    drop = (
        large_drop if large_drop is not None else (mean(drops) if drops else DEFAULTS["large_drop"])
    )
    return Assumptions(
        success=success,
        limit=limit,
        quality=quality,
        token_spread=spread,
        large_drop=drop,
        source=(
            f"measured in {directory} ({base}'s runs; large drop: {first}'s); each rate "
            "averaged over its posterior, Beta(k + 1/2, n - k + 1/2): 5/5 is not a rate of 1"
        ),
        measured=counts,
    )


def render(result: Any) -> str:
    from spillover_harness.plan.false_fail import KEYS

    def reps(n: int | None) -> str:
        return f"{n}" if n is not None else "none up to 1000"

    lines = [
        f"plan: stage {result.stage}, {result.repetitions} repetition(s) per configuration and "
        f"cell; target false fail <= {result.target:g}",
        f"rates: {result.assumptions.source}",
        "model: a configuration as good as the baseline (same rates and token spread; "
        f"large inputs {result.assumptions.large_drop:.0%} lower)",
        "",
        f"{'criterion':<16} {'false fail':>10}  {'repetitions for target':<24} method",
    ]

    def figure(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    for key in KEYS:
        c = result.criteria[key]
        lines.append(
            f"{key:<16} {figure(c.false_fail):>10}  {reps(c.repetitions_for_target):<24} {c.method}"
        )
        if c.note:
            lines.append(f"{'':<16} {'':>10}  note: {c.note}")
    lines.append(
        f"{'chain':<16} {figure(result.chain_false_fail):>10}  "
        f"{reps(result.chain_repetitions_for_target):<24} "
        f"P({result.chain_config} fails anything: the decision is not its default)"
    )
    return "\n".join(lines)
