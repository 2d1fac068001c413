"""The validation matrix: configurations x recipes x inputs x repetitions, plus
the acceptance parameters and the decision chain (docs/reference.md §2).

Loaded from YAML into typed, validated objects; every mistake names the file
and the key so a reviewer can fix it without reading this code.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# The platform's variable names have one home, the operator's constants; re-exported here.
from spillover_operator.constants import BUDGET_VAR as BUDGET_VAR
from spillover_operator.constants import ENABLED_VAR as ENABLED_VAR
from spillover_operator.constants import SPILLOVER_VARS as SPILLOVER_VARS
from spillover_operator.constants import THRESHOLD_VAR as THRESHOLD_VAR

DEFAULT_MATRIX_RESOURCE = "spillover-default.yaml"

SizeClass = Literal["small", "medium", "large"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Configuration(_Strict):
    """One spillover configuration: the environment the mcp-host gets."""

    name: str = Field(min_length=1)
    env: dict[str, str] = {}
    description: str = ""

    @model_validator(mode="after")
    def _only_spillover_vars(self) -> Configuration:
        unknown = sorted(set(self.env) - set(SPILLOVER_VARS))
        if unknown:
            raise ValueError(
                f"configuration '{self.name}': env may only set {', '.join(SPILLOVER_VARS)}; "
                f"unknown: {', '.join(unknown)}"
            )
        return self


class InputSpec(_Strict):
    name: str = Field(min_length=1)
    size_class: SizeClass
    description: str = ""


class Recipe(_Strict):
    name: str = Field(min_length=1)
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
    sim: int = Field(ge=1)
    minikube: int = Field(ge=1)
    dev: int = Field(ge=1)

    def for_stage(self, stage: str) -> int:
        value: int = getattr(self, stage)
        return value


class Acceptance(_Strict):
    baseline: str = Field(min_length=1)
    token_tolerance: float = Field(ge=0, le=1)
    quality_recipes: list[str] = []


class DecisionStep(_Strict):
    config: str
    default: str


class Decision(_Strict):
    chain: list[DecisionStep] = Field(min_length=1)
    fallback: str


class Matrix(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    configurations: list[Configuration] = Field(min_length=2)
    recipes: list[Recipe] = Field(min_length=1)
    repetitions: Repetitions
    run_timeout_s: float = Field(gt=0)
    concurrency: int = Field(ge=1, le=64)
    acceptance: Acceptance
    decision: Decision

    @model_validator(mode="after")
    def _cross_references(self) -> Matrix:
        names = [c.name for c in self.configurations]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate configuration names: {', '.join(dupes)}")
        recipe_names = [r.name for r in self.recipes]
        if len(set(recipe_names)) != len(recipe_names):
            raise ValueError("duplicate recipe names")
        if self.acceptance.baseline not in names:
            raise ValueError(
                f"acceptance.baseline '{self.acceptance.baseline}' is not a configuration "
                f"(known: {', '.join(names)})"
            )
        for i, step in enumerate(self.decision.chain):
            if step.config not in names:
                raise ValueError(
                    f"decision.chain.{i}.config '{step.config}' is not a configuration "
                    f"(known: {', '.join(names)})"
                )
            if step.config == self.acceptance.baseline:
                raise ValueError(
                    f"decision.chain.{i}.config '{step.config}' is the baseline; "
                    "a configuration is judged against the baseline, not itself"
                )
        for name in self.acceptance.quality_recipes:
            if name not in recipe_names:
                raise ValueError(
                    f"acceptance.quality_recipes: '{name}' is not a recipe "
                    f"(known: {', '.join(recipe_names)})"
                )
        return self

    # -- lookups used by the runner and the evaluator --------------------------------

    def configuration(self, name: str) -> Configuration:
        for c in self.configurations:
            if c.name == name:
                return c
        raise KeyError(name)

    def cells(self) -> list[tuple[Recipe, InputSpec]]:
        return [(r, i) for r in self.recipes for i in r.inputs]

    def size_class(self, recipe: str, input_name: str) -> str | None:
        for r in self.recipes:
            if r.name == recipe:
                for i in r.inputs:
                    if i.name == input_name:
                        return i.size_class
        return None


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
                got = "" if isinstance(value, dict | list) else f" (got {value!r})"
                if isinstance(value, bool) and err["type"] != "bool_type":
                    got += _YAML_BOOL_HINT
                where = f"key '{loc}': " if loc else ""
                lines.append(f"{source}: {where}{msg}{got}")
        raise MatrixError("\n".join(lines)) from None


_YAML_BOOL_HINT = '; YAML reads a bare off/on/no/yes/true/false as a boolean: quote it, e.g. "off"'


def load_matrix(path: Path | None = None) -> Matrix:
    """Load a matrix file; with no path, the default matrix shipped with the harness."""
    if path is None:
        ref = resources.files("spillover_harness.matrices").joinpath(DEFAULT_MATRIX_RESOURCE)
        return parse_matrix(yaml.safe_load(ref.read_text(encoding="utf-8")), source=str(ref))
    if not path.exists():
        raise MatrixError(f"{path}: no such matrix file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path}: cannot read the matrix file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MatrixError(f"{path}: not valid YAML: {exc}") from None
    return parse_matrix(data, source=str(path))
