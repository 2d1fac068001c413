"""Label selectors of recipe pods, checked as Kubernetes checks them and rendered
structurally.

A `metav1.LabelSelector` from a policy becomes a `Selector` of `Requirement`s, each
validated on construction (the key a qualified name, every value a label value, the
operator and its values consistent, the sizes bounded as the CRD bounds them). The
string the list API takes is rendered only from those parts, so no value can add a
requirement of its own (a value `mcp-host,tier!=x` is refused, not rendered).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Operator = Literal["Equals", "In", "NotIn", "Exists", "DoesNotExist"]
# The operators of matchExpressions ("Equals" is a matchLabels entry).
OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist")

# As apimachinery's validation (IsQualifiedName, IsValidLabelValue).
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(rf"^{_NAME}$")
_PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE_RE = re.compile(rf"^({_NAME})?$")
NAME_MAX = 63
PREFIX_MAX = 253
VALUE_MAX = 63
# The CRD's bounds (manifests/crd/spilloverpolicies.yaml): a policy stays small enough
# that its status can always be written and its finalizer removed.
MAX_MATCH_LABELS = 16
MAX_EXPRESSIONS = 16
MAX_VALUES = 16


class SelectorError(ValueError):
    """A label selector Kubernetes (or the CRD) would refuse; the message names the part
    and what a valid one looks like."""


def key_problem(key: Any) -> str | None:
    """Why `key` is not a label key (`[prefix/]name`), or None."""
    if not isinstance(key, str) or not key:
        return "a label key must be a non-empty string"
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"label key {key!r}: the prefix before '/' is empty"
    if slash and (len(prefix) > PREFIX_MAX or not _PREFIX_RE.match(prefix)):
        return (
            f"label key {key!r}: the prefix {prefix!r} must be a DNS subdomain (lowercase "
            f"letters, digits, '-' and '.', at most {PREFIX_MAX} characters)"
        )
    if len(name) > NAME_MAX or not _NAME_RE.match(name):
        return (
            f"label key {key!r}: the name {name!r} must be at most {NAME_MAX} characters of "
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def value_problem(value: Any) -> str | None:
    """Why `value` is not a label value, or None."""
    if not isinstance(value, str):
        return f"label value {value!r} must be a string"
    if len(value) > VALUE_MAX or not _VALUE_RE.match(value):
        return (
            f"label value {value!r} must be empty or at most {VALUE_MAX} characters of "
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


@dataclass(frozen=True)
class Requirement:
    """One requirement of a selector (`Equals`: a matchLabels entry, one value)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problem = key_problem(self.key)
        if problem is not None:
            raise SelectorError(problem)
        if self.operator == "Equals" and len(self.values) != 1:
            raise SelectorError("a matchLabels entry has exactly one value")
        if self.operator not in (*OPERATORS, "Equals"):
            raise SelectorError(f"operator {self.operator!r} is not one of {', '.join(OPERATORS)}")
        if self.operator in ("In", "NotIn") and not self.values:
            raise SelectorError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise SelectorError(f"operator {self.operator} takes no values")
        if len(self.values) > MAX_VALUES:
            raise SelectorError(f"{len(self.values)} values, at most {MAX_VALUES}")
        for value in self.values:
            problem = value_problem(value)
            if problem is not None:
                raise SelectorError(problem)

    def render(self) -> str:
        """This requirement in the list API's syntax (from validated parts only)."""
        if self.operator == "Equals":
            return f"{self.key}={self.values[0]}"
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        word = "in" if self.operator == "In" else "notin"
        return f"{self.key} {word} ({','.join(self.values)})"


@dataclass(frozen=True)
class Selector:
    """A validated label selector: every requirement must hold (an empty one matches
    every object, as in Kubernetes)."""

    requirements: tuple[Requirement, ...]

    def render(self) -> str:
        return ",".join(r.render() for r in self.requirements)


def parse_selector(raw: Mapping[str, Any], *, path: str = "selector") -> Selector:
    """A `metav1.LabelSelector` (`matchLabels`, `matchExpressions`) as a `Selector`;
    SelectorError naming the field (`path`.matchLabels[key], ...) otherwise."""
    labels = raw.get("matchLabels") or {}
    exprs = raw.get("matchExpressions") or []
    if not isinstance(labels, Mapping):
        raise SelectorError(f"{path}.matchLabels: must map label keys to values")
    if not isinstance(exprs, list):
        raise SelectorError(f"{path}.matchExpressions: must be a list")
    if len(labels) > MAX_MATCH_LABELS:
        raise SelectorError(f"{path}.matchLabels: {len(labels)} labels, at most {MAX_MATCH_LABELS}")
    if len(exprs) > MAX_EXPRESSIONS:
        raise SelectorError(
            f"{path}.matchExpressions: {len(exprs)} expressions, at most {MAX_EXPRESSIONS}"
        )
    requirements: list[Requirement] = []
    for key, value in sorted(labels.items(), key=lambda kv: str(kv[0])):
        try:
            requirements.append(Requirement(key, "Equals", (value,)))
        except SelectorError as exc:
            raise SelectorError(f"{path}.matchLabels[{key!r}]: {exc}") from None
    for number, expr in enumerate(exprs):
        where = f"{path}.matchExpressions[{number}]"
        if not isinstance(expr, Mapping):
            raise SelectorError(f"{where}: must be a mapping with key, operator and values")
        values = expr.get("values") or []
        op = expr.get("operator")
        if op not in OPERATORS:
            raise SelectorError(f"{where}.operator: {op!r} is not one of {', '.join(OPERATORS)}")
        if not isinstance(values, list):
            raise SelectorError(f"{where}.values: must be a list of label values")
        key = expr.get("key")
        if not isinstance(key, str):
            raise SelectorError(f"{where}: {key_problem(key)}")
        try:
            requirements.append(Requirement(key, op, tuple(values)))
        except SelectorError as exc:
            raise SelectorError(f"{where}: {exc}") from None
    return Selector(tuple(requirements))
