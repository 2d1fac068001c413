"""The validation matrix: configurations x recipes x inputs x repetitions, plus
the acceptance parameters and the decision chain (docs/reference.md §2).

Loaded from YAML into typed, validated objects; every mistake names the file
and the key so a reviewer can fix it without reading this code. Everything is
checked before a single run is spent: the shape, the cross-references, every
value of the three variables against what the mcp-host accepts (a value the
platform would warn about and replace by its default would silently run
another configuration), the baseline being the kill switch, the recipes and
inputs the fixtures provide, the decision values, and duplicate YAML keys (YAML
would keep the last one without a word).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

# The platform's variables, and how the mcp-host reads each, have one home: the
# operator's policy model.
from spillover_operator.domain.model import (
    ENABLED,
    FIELD_OF_VAR,
    SPILLOVER_VARS,
    THRESHOLD,
)
from spillover_operator.domain.quoting import shorten
from spillover_operator.domain.strict_load import StrictLoadError, load_yaml

from spillover_harness.input_file import InputFileError, read_text_file
from spillover_harness.names import name_problem
from spillover_harness.plan.memory_model import MemoryModel
from spillover_harness.plan.sim_model import PARAMETERS as SIM_MODEL_PARAMETERS
from spillover_harness.plan.sim_model import SimModel

DEFAULT_MATRIX_RESOURCE = "spillover-default.yaml"

# The recipes and inputs the fixtures generate (`fixtures.build_fixtures`), with the
# size class of each: a matrix naming anything else would spend every one of its runs
# on an input that does not exist. tests/harness/plan/test_matrix.py keeps this table
# and the fixtures in step.
KNOWN_INPUTS: Final[Mapping[str, Mapping[str, str]]] = {
    "code-review": {
        "small": "small",
        "medium": "medium",
        "large": "large",
        "budget": "large",
        "budget-16MiB": "large",
    },
    "summarize": {"document": "medium", "document-140k": "medium"},
}

# The decision when no configuration of the chain passes: spillover off.
DECISION_OFF: Final = "false"

_DECIMAL = re.compile(r"[0-9]+")

# Bounds that keep a matrix's cost finite before anything is planned: a name goes into
# run ids and folder names, repetitions and runs into lists of runs.
NAME_MAX: Final = 64
REPETITIONS_MAX: Final = 10_000
RUNS_MAX: Final = 100_000
RUN_TIMEOUT_MAX_S: Final = 24 * 3600.0
SEED_MAX: Final = 2**32 - 1
CONCURRENCY_MAX: Final = 64

SizeClass = Literal["small", "medium", "large"]


def _safe_name(value: str) -> str:
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# A name of the matrix, a configuration, a recipe or an input: it goes into run ids,
# records and the report, so no control or format character (names.py).
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX), AfterValidator(_safe_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class HandoffSpec(_Strict):
    """The handoff cache's settings (docs/simulator.md §8): the simulator only."""

    threshold_tokens: int = Field(ge=1, le=10_000_000)
    max_entries: int = Field(default=8, ge=1, le=10_000)
    preview_chars: int = Field(default=2000, ge=0, le=1_000_000)


Strategy = Literal["spillover", "handoff"]


class Configuration(_Strict):
    """One configuration: the environment the mcp-host gets, and which design intercepts
    the tool results (`strategy`: spillover, the default, or the handoff cache)."""

    name: Name
    env: dict[str, str] = {}
    description: str = ""
    strategy: Strategy = "spillover"
    handoff: HandoffSpec | None = None

    @field_validator("env")
    @classmethod
    def _as_the_mcp_host_reads_it(cls, env: dict[str, str]) -> dict[str, str]:
        """A value the mcp-host takes is kept as the text it runs with (`" 32768"` ->
        `"32768"`), so the simulator, the records, the chain and the policy see one
        spelling; any other value is kept as written, for `platform_problems` to name."""
        out: dict[str, str] = {}
        for var, raw in env.items():
            env_field = FIELD_OF_VAR.get(var)
            reading = env_field.read(raw) if env_field is not None else None
            out[var] = reading.text if reading is not None and reading.state == "set" else raw
        return out

    @model_validator(mode="after")
    def _only_spillover_vars(self) -> Configuration:
        unknown = sorted(set(self.env) - set(SPILLOVER_VARS))
        if unknown:
            raise ValueError(
                f"configuration '{self.name}': env may only set {', '.join(SPILLOVER_VARS)}; "
                f"unknown: {', '.join(unknown)}"
            )
        if self.strategy == "handoff" and self.handoff is None:
            raise ValueError(
                f"configuration '{self.name}': strategy handoff needs its settings: "
                "handoff: {threshold_tokens: N} (optional: max_entries, preview_chars)"
            )
        if self.strategy != "handoff" and self.handoff is not None:
            raise ValueError(
                f"configuration '{self.name}': handoff settings are for strategy: handoff; "
                "set strategy: handoff or drop them"
            )
        if self.strategy == "handoff" and self.env:
            raise ValueError(
                f"configuration '{self.name}': a handoff configuration takes no spillover "
                f"env (the cache replaces spillover); drop env: {', '.join(sorted(self.env))}"
            )
        return self


class InputSpec(_Strict):
    name: Name
    size_class: SizeClass
    description: str = ""


class Recipe(_Strict):
    name: Name
    inputs: list[InputSpec] = Field(min_length=1)
    description: str = ""

    @model_validator(mode="after")
    def _unique_inputs(self) -> Recipe:
        names = [i.name for i in self.inputs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"recipe '{self.name}': duplicate input names: {', '.join(dupes)}")
        return self


class Repetitions(_Strict):
    sim: int = Field(ge=1, le=REPETITIONS_MAX)
    minikube: int = Field(ge=1, le=REPETITIONS_MAX)
    dev: int = Field(ge=1, le=REPETITIONS_MAX)

    def for_stage(self, stage: str) -> int:
        value: int = getattr(self, stage)
        return value


# The criteria an acceptance rule other than the literal one may be chosen for.
RULE_CRITERIA: Final = ("success_rate", "summary_quality", "input_tokens")


class Rule(_Strict):
    """How one criterion judges a cell (docs/reference.md §5.4): `literal` (the
    reference's rule, the default) or `non_inferiority` (passes only when the data show,
    at `confidence`, that the configuration is no worse than the baseline by more than
    `margin`)."""

    rule: Literal["literal", "non_inferiority"] = "literal"
    margin: float = Field(default=0.10, gt=0, lt=1)
    confidence: float = Field(default=0.95, ge=0.5, le=0.999)


class Acceptance(_Strict):
    baseline: str = Field(min_length=1)
    token_tolerance: float = Field(ge=0, le=1)
    quality_recipes: list[str] = []
    # Opt-in rules per criterion (absent: literal); see Rule.
    rules: dict[str, Rule] = Field(default={}, max_length=len(RULE_CRITERIA))

    @field_validator("rules")
    @classmethod
    def _known(cls, value: dict[str, Rule]) -> dict[str, Rule]:
        unknown = sorted(set(value) - set(RULE_CRITERIA))
        if unknown:
            raise ValueError(
                f"acceptance.rules: {', '.join(unknown)}: no such rule can be chosen; the "
                f"criteria that take one are {', '.join(RULE_CRITERIA)}"
            )
        return value

    def rule_for(self, criterion: str) -> Rule | None:
        """The opt-in rule of `criterion`, None when it is judged literally."""
        rule = self.rules.get(criterion)
        return rule if rule is not None and rule.rule != "literal" else None


class DecisionStep(_Strict):
    config: str
    default: str


class Decision(_Strict):
    chain: list[DecisionStep] = Field(min_length=1)
    fallback: str


class MemoryCell(_Strict):
    """The cell the concurrency lane runs: one recipe's input."""

    recipe: str = Field(min_length=1)
    input: str = Field(min_length=1)


class MemorySettings(_Strict):
    """The mcp-host memory section of the report, and the concurrency lane
    (docs/harness.md, "Memory"): when a configuration's peak working set reaches
    `warn_fraction` of its limit, the report warns. `concurrency` lists the numbers of
    executions of one recipe run at once per configuration (the lane; empty: no lane)
    on `lane` (default: the matrix's first large input, else its first cell), on the
    stages of `lane_stages` (default: every stage; `[]` opts out everywhere). The
    simulator's mcp-host has `sim_baseline_bytes` and `sim_limit_bytes`; a cluster
    stage reads the real ones."""

    warn_fraction: float = Field(default=0.8, gt=0, le=1)
    concurrency: list[int] = Field(default=[], max_length=8)
    lane: MemoryCell | None = None
    lane_stages: list[Literal["sim", "minikube", "dev"]] = Field(
        default=["sim", "minikube", "dev"], max_length=3
    )
    sim_baseline_bytes: int = Field(default=160 * 1024 * 1024, ge=0, le=1 << 40)
    sim_limit_bytes: int = Field(default=2048 * 1024 * 1024, ge=1024 * 1024, le=1 << 40)

    @field_validator("concurrency")
    @classmethod
    def _counts(cls, value: list[int]) -> list[int]:
        bad = [n for n in value if not 1 <= n <= 64]
        if bad:
            raise ValueError(f"each number of executions at once must be 1..64 (got {bad})")
        if len(set(value)) != len(value):
            raise ValueError(f"numbers of executions at once listed twice: {value}")
        return sorted(value)


class Matrix(_Strict):
    name: Name
    description: str = ""
    seed: int = Field(default=0, ge=0, le=SEED_MAX)
    configurations: list[Configuration] = Field(min_length=2)
    recipes: list[Recipe] = Field(min_length=1)
    repetitions: Repetitions
    run_timeout_s: float = Field(gt=0, le=RUN_TIMEOUT_MAX_S, allow_inf_nan=False)
    concurrency: int = Field(ge=1, le=CONCURRENCY_MAX)
    acceptance: Acceptance
    decision: Decision
    # The simulator's model of the agent (docs/simulator.md §1.5); None: its defaults.
    sim_model: dict[str, int | float] | None = None
    # The mcp-host memory section and the concurrency lane (MemorySettings).
    memory: MemorySettings = MemorySettings()
    # Repetitions a stage added to some cells after its own (run --until-stable):
    # "recipe/input" -> the cell's repetitions in all. The harness writes it into the
    # matrix stored in stage.json; it is not part of the matrix's identity (results_dir).
    extension: dict[str, int] = Field(default={}, max_length=1000)

    def repetitions_for(self, stage: str, recipe: str, input_name: str) -> int:
        """The repetitions of one cell in `stage`: the matrix's, or more where extended."""
        own = self.repetitions.for_stage(stage)
        return max(own, self.extension.get(f"{recipe}/{input_name}", 0))

    @model_validator(mode="after")
    def _checked(self) -> Matrix:
        """Every cross-reference and platform value, all problems listed at once."""
        problems = cross_reference_problems(self)
        problems += size_problems(self)
        problems += platform_problems(self, skip_unknown=bool(problems))
        problems += sim_model_problems(self.sim_model)
        cells = {f"{r.name}/{i.name}" for r, i in self.cells()}
        for key, reps in self.extension.items():
            if key not in cells:
                problems.append(f"extension: {key!r} is not a recipe/input cell of this matrix")
            elif not 1 <= reps <= REPETITIONS_MAX:
                problems.append(f"extension: {key}: {reps} repetitions (1..{REPETITIONS_MAX})")
        lane = self.memory.lane
        if lane is not None and self.size_class(lane.recipe, lane.input) is None:
            problems.append(f"memory.lane {lane.recipe}/{lane.input} is not a cell of this matrix")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # -- lookups used by the runner and the evaluator --------------------------------

    def configuration(self, name: str) -> Configuration:
        for c in self.configurations:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def simulated_only(self) -> list[str]:
        """Configurations only the simulator can run (strategy handoff)."""
        return [c.name for c in self.configurations if c.strategy == "handoff"]

    def cells(self) -> list[tuple[Recipe, InputSpec]]:
        return [(r, i) for r in self.recipes for i in r.inputs]

    def size_class(self, recipe: str, input_name: str) -> str | None:
        for r in self.recipes:
            if r.name == recipe:
                for i in r.inputs:
                    if i.name == input_name:
                        return i.size_class
        return None

    def simulator_model(self) -> SimModel:
        """The simulator's model for this matrix: the defaults with `sim_model:` applied."""
        model = SimModel()
        for name, value in (self.sim_model or {}).items():
            model = model.with_value(name, value)
        return model

    def simulator_memory(self) -> MemoryModel:
        """The simulated mcp-host's memory for this matrix (`memory.sim_*`)."""
        return MemoryModel(
            baseline_bytes=self.memory.sim_baseline_bytes,
            limit_bytes=self.memory.sim_limit_bytes,
        )

    def runs_lane(self, stage: str) -> bool:
        """Whether `stage` runs the concurrency lane: some N listed and the stage opted in."""
        return bool(self.memory.concurrency) and stage in self.memory.lane_stages

    def memory_lane_cell(self) -> tuple[str, str]:
        """The (recipe, input) the concurrency lane runs (`memory.lane`, else the first
        large input, else the first cell)."""
        if self.memory.lane is not None:
            return self.memory.lane.recipe, self.memory.lane.input
        cells = self.cells()
        large = [(r, i) for r, i in cells if i.size_class == "large"]
        recipe, spec = (large or cells)[0]
        return recipe.name, spec.name

    @property
    def decision_values(self) -> tuple[str, ...]:
        """Every decision this matrix can reach: the chain's defaults, then the fallback."""
        return (*(step.default for step in self.decision.chain), self.decision.fallback)


def runs_per_stage(matrix: Matrix, stage: str) -> int:
    """How many runs the matrix plans for `stage` (its extension included)."""
    return len(matrix.configurations) * sum(
        matrix.repetitions_for(stage, r.name, i.name) for r, i in matrix.cells()
    )


def size_problems(matrix: Matrix) -> list[str]:
    """A stage of more than RUNS_MAX runs: refused before anything plans (or allocates)
    them."""
    problems = []
    for stage in ("sim", "minikube", "dev"):
        runs = runs_per_stage(matrix, stage)
        if runs > RUNS_MAX:
            problems.append(
                f"key 'repetitions.{stage}': {runs} runs for stage {stage} "
                f"({len(matrix.configurations)} configurations x {len(matrix.cells())} "
                f"recipe/inputs x {matrix.repetitions.for_stage(stage)} repetitions); allowed: "
                f"at most {RUNS_MAX} runs per stage: lower the repetitions"
            )
    return problems


def cross_reference_problems(matrix: Matrix) -> list[str]:
    """Names that must be unique or must name something else in the matrix."""
    problems: list[str] = []
    names = [c.name for c in matrix.configurations]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"duplicate configuration names: {', '.join(dupes)}")
    recipe_names = [r.name for r in matrix.recipes]
    dupes = sorted({n for n in recipe_names if recipe_names.count(n) > 1})
    if dupes:
        problems.append(f"duplicate recipe names: {', '.join(dupes)}")
    if matrix.acceptance.baseline not in names:
        problems.append(
            f"acceptance.baseline '{matrix.acceptance.baseline}' is not a configuration "
            f"(known: {', '.join(names)})"
        )
    for i, step in enumerate(matrix.decision.chain):
        if step.config not in names:
            problems.append(
                f"decision.chain.{i}.config '{step.config}' is not a configuration "
                f"(known: {', '.join(names)})"
            )
        elif step.config == matrix.acceptance.baseline:
            problems.append(
                f"decision.chain.{i}.config '{step.config}' is the baseline; "
                "a configuration is judged against the baseline, not itself"
            )
    for name in matrix.acceptance.quality_recipes:
        if name not in recipe_names:
            problems.append(
                f"acceptance.quality_recipes: '{name}' is not a recipe "
                f"(known: {', '.join(recipe_names)})"
            )
    return problems


def sim_model_problems(spec: Mapping[str, int | float] | None) -> list[str]:
    """Every `sim_model:` key that is unknown, of the wrong type or out of its bounds."""
    if spec is None:
        return []
    known = {p.name: p for p in SIM_MODEL_PARAMETERS}
    problems: list[str] = []
    for name, value in spec.items():
        p = known.get(name)
        if p is None:
            problems.append(
                f"key 'sim_model.{name}': unknown simulator model parameter; allowed: "
                f"{', '.join(known)} (docs/simulator.md §1.5)"
            )
            continue
        kind = "an integer" if p.integer else "a number"
        allowed = f"{kind} from {p.low:g} to {p.high:g} ({p.unit})"
        if isinstance(value, bool) or (p.integer and not isinstance(value, int)):
            problems.append(f"key 'sim_model.{name}': {value!r} is not {kind}; allowed: {allowed}")
        elif not p.low <= value <= p.high:
            problems.append(
                f"key 'sim_model.{name}': {value!r} is out of range; allowed: {allowed}"
            )
    return problems


# -- the platform's values (docs/reference.md §1) ----------------------------------------


def env_value_problem(var: str, raw: str) -> str | None:
    """Why the mcp-host would not take `var=raw` as set (it would warn and use its
    default), or None (`EnvField.read`). A value that is empty or blank counts as unset
    on the platform: in a matrix it is refused, since leaving the key out says the same
    thing unambiguously."""
    env_field = FIELD_OF_VAR.get(var)
    if env_field is None:
        return f"unknown variable; allowed: {', '.join(SPILLOVER_VARS)}"
    reading = env_field.read(raw)
    if reading.state == "unset":
        return "an empty value (the platform reads it as unset); leave the key out instead"
    if reading.state == "invalid":
        return f"{raw!r} is {reading.problem}; allowed: {env_field.allowed}"
    return None


def effective_threshold(config: Configuration) -> int | None:
    """The threshold the mcp-host runs `config` with; None when spillover is off."""
    if ENABLED.read(config.env.get(ENABLED.var)).value is False:
        return None
    return int(THRESHOLD.read(config.env.get(THRESHOLD.var)).value)


def platform_problems(matrix: Matrix, *, skip_unknown: bool = False) -> list[str]:
    """Every value of `matrix` the platform or the harness cannot use, one line each,
    naming the key and what is allowed. Empty when the matrix can run.

    `skip_unknown`: the cross-references are broken (reported by
    `cross_reference_problems`), so checks that follow a name are left out."""
    problems: list[str] = []
    names = [c.name for c in matrix.configurations]
    bad_env: set[str] = set()
    for i, config in enumerate(matrix.configurations):
        for var, raw in config.env.items():
            why = env_value_problem(var, raw)
            if why is not None:
                bad_env.add(config.name)
                problems.append(
                    f"key 'configurations.{i}.env.{var}' (configuration '{config.name}'): {why}"
                )
    base = matrix.acceptance.baseline
    if base in names and names.count(base) == 1:
        i = names.index(base)
        baseline = matrix.configurations[i]
        if (
            ENABLED.read(baseline.env.get(ENABLED.var)).value is not False
            or baseline.strategy != "spillover"
        ):
            problems.append(
                f"key 'configurations.{i}.env' (the baseline '{base}', acceptance.baseline): "
                f"the baseline is spillover turned off; allowed: an env that sets "
                f'{ENABLED.var}: "false" (got {dict(baseline.env)})'
            )
    for i, recipe in enumerate(matrix.recipes):
        known = KNOWN_INPUTS.get(recipe.name)
        if known is None:
            problems.append(
                f"key 'recipes.{i}.name': unknown recipe {recipe.name!r}; allowed: "
                f"{', '.join(KNOWN_INPUTS)} (the recipes the fixtures provide)"
            )
            continue
        for j, spec in enumerate(recipe.inputs):
            if spec.name not in known:
                problems.append(
                    f"key 'recipes.{i}.inputs.{j}.name': unknown input {spec.name!r} of recipe "
                    f"'{recipe.name}'; allowed: {', '.join(known)}"
                )
            elif spec.size_class != known[spec.name]:
                problems.append(
                    f"key 'recipes.{i}.inputs.{j}.size_class': input '{recipe.name}/{spec.name}' "
                    f"is a {known[spec.name]} input (its fixture); allowed: {known[spec.name]} "
                    f"(got {spec.size_class!r})"
                )
    for i, step in enumerate(matrix.decision.chain):
        if skip_unknown or step.config not in names or step.config == base:
            continue  # reported by cross_reference_problems
        if matrix.configuration(step.config).strategy == "handoff":
            problems.append(
                f"key 'decision.chain.{i}.config': configuration '{step.config}' is a handoff "
                "configuration: the policy cannot deploy it, so it is compared, not decided; "
                "allowed: a spillover configuration"
            )
            continue
        if step.config in bad_env:
            continue  # its env is reported above
        threshold = effective_threshold(matrix.configuration(step.config))
        if threshold is None:
            problems.append(
                f"key 'decision.chain.{i}.config': configuration '{step.config}' sets "
                f'{ENABLED.var}: "false", so it cannot decide a threshold; allowed: a '
                f"configuration with spillover on"
            )
        elif step.default != str(threshold):
            problems.append(
                f"key 'decision.chain.{i}.default': {step.default!r} is not the threshold "
                f"configuration '{step.config}' runs with; allowed: \"{threshold}\""
            )
    fallback = matrix.decision.fallback
    if fallback != DECISION_OFF and (
        not _DECIMAL.fullmatch(fallback) or THRESHOLD.read(fallback).state != "set"
    ):
        problems.append(
            f"key 'decision.fallback': {fallback!r}; allowed: \"{DECISION_OFF}\" (spillover "
            f"off) or {THRESHOLD.allowed}"
        )
    return problems


class MatrixError(ValueError):
    """A matrix file that cannot be used; the message names the file and the key."""


def parse_matrix(data: object, *, source: str = "<matrix>") -> Matrix:
    if not isinstance(data, dict):
        raise MatrixError(f"{source}: the matrix must be a YAML mapping at the top level")
    try:
        return Matrix.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            value = err.get("input")
            if err["type"] == "extra_forbidden":
                lines.append(f"{source}: unknown key '{loc}'")
            elif err["type"] == "missing":
                lines.append(f"{source}: missing key '{loc}'")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                # A cross-reference check runs on a whole mapping: its message
                # already names the key, and echoing the mapping helps nobody.
                got = "" if isinstance(value, dict | list) else f" (got {shorten(value)})"
                if isinstance(value, bool) and err["type"] != "bool_type":
                    got += _YAML_BOOL_HINT
                where = f"key '{loc}': " if loc else ""
                # a whole-matrix check reports each problem on its own line
                lines.extend(f"{source}: {where}{part}{got}" for part in msg.split("\n"))
        raise MatrixError("\n".join(lines)) from None


_YAML_BOOL_HINT = '; YAML reads a bare off/on/no/yes/true/false as a boolean: quote it, e.g. "off"'


def _parse_yaml(text: str, source: str) -> Matrix:
    try:
        data = load_yaml(text, source)  # duplicate keys, .inf, huge integers refused
    except StrictLoadError as exc:
        raise MatrixError(str(exc)) from None
    return parse_matrix(data, source=source)


def shipped_matrix(name: str) -> Path:
    """The path of a matrix shipped with the harness (`faults.yaml`, `memory-budget.yaml`):
    the defaults of a command that must not depend on the directory it is run from."""
    return Path(str(resources.files("spillover_harness.plan.matrices").joinpath(name)))


def load_matrix(path: Path | None = None) -> Matrix:
    """Load a matrix file; with no path, the default matrix shipped with the harness."""
    if path is None:
        ref = resources.files("spillover_harness.plan.matrices").joinpath(DEFAULT_MATRIX_RESOURCE)
        return _parse_yaml(ref.read_text(encoding="utf-8"), str(ref))
    try:
        text = read_text_file(path, what="matrix")
    except InputFileError as exc:
        raise MatrixError(str(exc)) from None
    try:
        data = load_yaml(text, str(path))
    except StrictLoadError as exc:
        raise MatrixError(str(exc)) from None
    if isinstance(data, dict) and "extension" in data:
        raise MatrixError(
            f"{path}: unknown key 'extension': the repetitions `run --until-stable` adds are "
            "recorded in a stage's stage.json, not set in a matrix; to run more repetitions, "
            "raise `repetitions`"
        )
    return parse_matrix(data, source=str(path))
