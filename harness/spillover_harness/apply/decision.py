"""From a stage's verdict.json to the change of a SpilloverPolicy's spec. Pure.

The decision maps to a JSON merge patch of `spec` (docs/harness.md, "apply-decision"):

| decision | spec change |
|---|---|
| `false` | `enabled: false` (the kill switch; the rest of the spec kept) |
| the platform default (`131072`) | `enabled: true`, `thresholdBytes` removed |
| any other threshold N of the matrix's chain | `enabled: true`, `thresholdBytes: N` |

When the configuration that decided sets a budget in the matrix, `budgetBytes` is set
to it too; otherwise the budget is left as it is. A verdict that is not a decision
(`inconclusive`), or that was taken with runs missing, is refused.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spillover_operator.domain.model import BUDGET, ENABLED, ENV_FIELDS, THRESHOLD
from spillover_operator.domain.quoting import shorten

from spillover_harness.plan.matrix import DECISION_OFF, Matrix
from spillover_harness.results.results_dir import (
    ReadBackError,
    ResultFileInvalid,
    ResultFileMissing,
    ResultFileUnreadable,
    StageDir,
)

__all__ = [
    "DEFAULT_POLICY",
    "DecisionRefused",
    "StageDecision",
    "apply_command",
    "apply_patch",
    "check_against_records",
    "check_decision",
    "describe_change",
    "read_decision",
    "spec_patch",
]


DEFAULT_POLICY = "spillover"


def apply_command(results: Path) -> str:
    """The command that applies the decision of the stage in `results` (the report's).

    Only for a stage of the platform: a simulated verdict's report names no command
    (what it would take is a cluster stage), so no bypass flag is ever suggested."""
    argv = ["spillover-harness", "apply-decision", "--results", str(results)]
    argv += ["--policy", DEFAULT_POLICY, "-n", "NAMESPACE"]
    return shlex.join(argv).replace("NAMESPACE", "<namespace>")


class DecisionRefused(Exception):
    """The verdict cannot be applied; `kind` says why: inconclusive | incomplete |
    simulated | faulted | unreadable."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class StageDecision:
    """What a results directory decided, read from its verdict.json."""

    decision: str
    stage: str | None
    matrix: str
    verdict_path: Path
    # The simulator's answer (stage sim, or a cluster stage on a simulated platform),
    # applied knowingly with allow_simulated: never called "validated".
    simulated: bool = False


def read_decision(
    results: Path, *, allow_incomplete: bool = False, allow_simulated: bool = False
) -> StageDecision:
    """The decision of the stage in `results` (its verdict.json), or DecisionRefused."""
    directory = StageDir(results)
    path = directory.verdict_file
    try:
        verdict = directory.read_verdict_header()
    except ResultFileMissing:
        raise DecisionRefused(
            "unreadable",
            f"{path}: no verdict; run the stage first (spillover-harness run ... --out "
            f"{results}) or pass the results directory that holds verdict.json",
        ) from None
    except ResultFileUnreadable as exc:
        raise DecisionRefused(
            "unreadable", f"{path}: cannot read the verdict: {exc.detail}"
        ) from None
    except ResultFileInvalid as exc:
        raise DecisionRefused(
            "unreadable",
            f"{path}: not a verdict ({exc.detail}), not what the harness writes; nothing "
            f"is applied. Write it again from its records: spillover-harness report --records "
            f"{directory.records_file} --out {results}",
        ) from None
    decision: str = verdict.decision
    try:
        stage_file = directory.read_stage()
    except ReadBackError as exc:
        raise DecisionRefused("unreadable", str(exc)) from None
    faults = stage_file.driver.faults if stage_file is not None else ()
    resume = (stage_file.resume_command or "") if stage_file is not None else ""
    if not faults and " --fault " in f" {resume} ":
        faults = ("named by its resume_command, though driver.faults was emptied",)
    if faults:
        raise DecisionRefused(
            "faulted",
            f"{path}: this stage ran with simulator faults injected ({', '.join(faults)}): it "
            "tests the harness's checks and is never a decision to apply; run the stage "
            "without --fault",
        )
    incomplete = verdict.incomplete
    if incomplete is not None and not (allow_incomplete and incomplete.judged):
        raise DecisionRefused(
            "incomplete",
            f"{path}: the stage is incomplete ({incomplete.missing or 'some'} runs missing); "
            "nothing is "
            "applied. Finish it with `spillover-harness run ... --resume`"
            + (
                "; a stage judged anyway (--allow-incomplete) can be applied with "
                "--allow-incomplete"
                if incomplete.judged
                else ""
            ),
        )
    if verdict.decided is not True:
        raise DecisionRefused(
            "inconclusive",
            f"{path}: the decision is {decision!r}, not a decision; nothing is applied. "
            "Run the runs the report lists, then evaluate again",
        )
    stage: str | None = verdict.stage
    stage_says = stage_file.stage if stage_file is not None else None
    if "sim" in (stage, stage_says) and not allow_simulated:
        raise DecisionRefused(
            "simulated",
            f"{path}: this verdict comes from the simulator (stage sim), not from the "
            "platform; apply a cluster stage's verdict, or pass --allow-simulated to apply "
            "it knowingly",
        )
    if stage_says is not None and stage != stage_says:
        raise DecisionRefused(
            "unreadable",
            f"{path}: the verdict names stage {stage!r}, but {directory.stage_file} says the "
            f"directory holds stage {stage_says!r}: the verdict was edited or comes from "
            f"another directory; write it again (spillover-harness report --records "
            f"{directory.records_file} --out {results})",
        )
    if stage_file is not None and stage_file.simulated_platform and not allow_simulated:
        raise DecisionRefused(
            "simulated",
            f"{path}: this verdict comes from a simulated platform (stage {stage}, profile "
            f"{stage_file.driver.profile!r}: the simulator served as the mcp-host), not from "
            "the platform; apply a verdict of the platform's own Minikube or dev stage, or "
            "pass --allow-simulated to apply it knowingly",
        )
    simulated = stage == "sim" or (stage_file is not None and stage_file.simulated_platform)
    return StageDecision(decision, stage, verdict.matrix_name or "", path, simulated)


def check_against_records(
    stage: StageDecision,
    *,
    recomputed: str,
    decided: bool,
    incomplete: bool,
    faults: Sequence[str],
    results: Path,
) -> None:
    """Refuse a verdict.json or stage.json that its records contradict: the decision
    the evaluator takes from the records (`recomputed`) must be the one applied, and
    records made with simulator faults (`records.faults_noted`) are never applied,
    whatever stage.json says of its faults."""
    path = stage.verdict_path
    again = (
        f"write it again from its records: spillover-harness report --records "
        f"{results / 'runs.jsonl'} --out {results}"
    )
    if faults:
        raise DecisionRefused(
            "faulted",
            f"{path}: the records were made with simulator faults injected "
            f"({', '.join(faults)}), though {results / 'stage.json'} names none (it was "
            "edited): such a stage tests the harness's checks and is never a decision to "
            "apply; run the stage without --fault",
        )
    if incomplete:
        raise DecisionRefused(
            "incomplete",
            f"{path}: the records lack runs of the matrix, though the verdict says the stage "
            f"is complete (it was edited); nothing is applied. Finish the stage with "
            f"`spillover-harness run ... --resume`, then {again}",
        )
    if not decided:
        raise DecisionRefused(
            "inconclusive",
            f"{path}: the verdict says {stage.decision}, but its records decide nothing "
            f"({recomputed}); nothing is applied. Run the runs the report lists, then {again}",
        )
    if recomputed != stage.decision:
        raise DecisionRefused(
            "unreadable",
            f"{path}: the verdict says {stage.decision}, but its records decide "
            f"{recomputed}: the verdict was edited or is stale; nothing is applied: {again}",
        )


def _budget_of(decision: str, matrix: Matrix | None) -> int | None:
    """The budget the deciding configuration ran with, when the matrix sets one."""
    if matrix is None:
        return None
    for step in matrix.decision.chain:
        if step.default == decision:
            reading = BUDGET.read(matrix.configuration(step.config).env.get(BUDGET.var))
            if reading.state == "invalid":  # a stored matrix is checked; kept as a guard
                raise DecisionRefused(
                    "unreadable",
                    f"budget {shorten(reading.raw)} of configuration '{step.config}' is "
                    f"{reading.problem}: budgetBytes takes {BUDGET.allowed}",
                )
            return int(reading.value) if reading.state == "set" else None
    return None


def check_decision(decision: str, matrix: Matrix, path: Path | str) -> None:
    """Refuse a decision the matrix that made the stage cannot reach (an edited
    verdict.json): only its chain's defaults and its fallback are decisions."""
    if decision not in matrix.decision_values:
        raise DecisionRefused(
            "unreadable",
            f"{path}: the decision {shorten(decision)} is not one the matrix "
            f"'{matrix.name}' can reach ({', '.join(matrix.decision_values)}): the verdict "
            "was edited or comes from another matrix; apply a verdict the stage wrote",
        )


def spec_patch(decision: str, matrix: Matrix | None = None) -> dict[str, Any]:
    """The JSON merge patch of `spec` that applies `decision` (see the module doc);
    DecisionRefused for a value the platform does not take (its CRD's bounds)."""
    if decision == DECISION_OFF:
        return {ENABLED.key: False}
    if not decision.isdigit() or len(decision) > 12:
        raise DecisionRefused(
            "unreadable", f"decision {shorten(decision)} is not a threshold or false"
        )
    reading = THRESHOLD.read(decision)
    if reading.state != "set":
        raise DecisionRefused(
            "unreadable",
            f"decision {decision} is outside the bytes a SpilloverPolicy's thresholdBytes "
            f"takes ({THRESHOLD.low}..{THRESHOLD.high}); nothing is applied: the verdict was "
            "edited, apply one the stage wrote",
        )
    threshold = int(reading.value)
    patch: dict[str, Any] = {
        ENABLED.key: True,
        THRESHOLD.key: None if threshold == THRESHOLD.default_value else threshold,
    }
    budget = _budget_of(decision, matrix)
    if budget is not None:
        patch[BUDGET.key] = budget
    return patch


def apply_patch(spec: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`spec` after the merge patch (None removes a key)."""
    out = dict(spec)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


_SHOWN = tuple(f.key for f in ENV_FIELDS)  # the spec fields a decision sets


def _show(spec: Mapping[str, Any], key: str) -> str:
    if key not in spec:
        return "unset"
    value = spec[key]
    return json.dumps(value)


def describe_change(spec: Mapping[str, Any], patch: Mapping[str, Any]) -> list[str]:
    """One line per field the patch changes: `thresholdBytes: 32768 -> unset`; empty when
    the policy already says what the decision says."""
    after = apply_patch(spec, patch)
    return [
        f"{key}: {_show(spec, key)} -> {_show(after, key)}"
        for key in _SHOWN
        if _show(spec, key) != _show(after, key)
    ]
