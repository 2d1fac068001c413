"""The one strict reader of the YAML and JSON the project is given. Pure.

Plain `yaml.safe_load` and `json.loads` accept what a person almost never means and
what the code after them cannot take:

- a key written twice (both formats keep the last value without a word: a policy with
  `enabled: false` then `enabled: true` would render ON);
- a mapping key that is not a string (YAML `1:` or `true:`; every field name here is one);
- `yes`, `no`, `on` and `off` unquoted (booleans in YAML 1.1, strings in YAML 1.2:
  `enabled: off` means one thing to kubectl and another to a YAML 1.2 tool);
- `.inf` / `.nan` (YAML) and `Infinity` / `NaN` (JSON): no count, size or timeout is
  infinite;
- integers beyond 64 bits (a 5000-digit integer makes `int()` raise; none is meant);
- nesting deeper than `MAX_DEPTH` (100000 levels exhaust the parser's recursion);
- a document larger than `MAX_TEXT_CHARS`.

Each is a `StrictLoadError` naming the source, the line where it is known, what is
wrong and the fix, in one line; a value it quotes is cut by `shorten` so a 1 MB
scalar is not echoed back. `spilloverctl render`, the harness's matrices, profiles,
records, verdict.json, stage.json and `--gitops` manifests all read through here.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import yaml

from spillover_operator.domain.quoting import cut, shorten

__all__ = [
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_TEXT_CHARS",
    "StrictLoadError",
    "load_json",
    "load_yaml",
    "load_yaml_all",
]

MAX_DEPTH: Final = 64  # nesting levels; the deepest file the project writes has 6
MAX_INT: Final = 2**63 - 1  # Kubernetes' int64 and every counter here fit
MAX_TEXT_CHARS: Final = 16 * 1024 * 1024  # one document or one record line

_MAX_INT_CHARS = 32  # a YAML integer scalar longer than this is refused before int()


class StrictLoadError(ValueError):
    """The text is not YAML/JSON this project accepts; the message is one line."""


def _too_long(text: str, source: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise StrictLoadError(
            f"{source}: {len(text)} characters, more than the {MAX_TEXT_CHARS} accepted; "
            "pass the file the tool wrote, or split it"
        )


# ---------------------------------------------------------------------------------------
# YAML


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader refusing duplicate and non-string keys, non-finite floats, huge
    integers and deep nesting (see the module doc)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise StrictLoadError(
                    f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep; "
                    "flatten it (no file of this project nests that deep)"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged keys may be overridden, that is its point
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise StrictLoadError(
                    f"line {line}: the key {cut(str(key_node.value), 40)} reads as a "
                    f"{type(key).__name__}, not a string; quote it "
                    f'(e.g. "{cut(str(key_node.value), 40)}")'
                )
            if key in first_line:
                raise StrictLoadError(
                    f"line {line}: duplicate key {shorten(key)} (first at line "
                    f"{first_line[key]}); YAML would silently keep only the last value: "
                    "keep one"
                )
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        line = node.start_mark.line + 1
        if len(node.value) > _MAX_INT_CHARS:
            raise StrictLoadError(
                f"line {line}: the integer {cut(node.value)} is too large; allowed: "
                f"at most {MAX_INT}"
            )
        value: int = super().construct_yaml_int(node)
        if abs(value) > MAX_INT:
            raise StrictLoadError(
                f"line {line}: the integer {shorten(value)} is too large; allowed: at most "
                f"{MAX_INT}"
            )
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value: float = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise StrictLoadError(
                f"line {node.start_mark.line + 1}: {cut(node.value)} is not a finite "
                "number; write a finite value (no .inf or .nan)"
            )
        return value

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool:
        if node.style is None and node.value.lower() not in ("true", "false"):
            # yes/no/on/off: booleans in YAML 1.1 (PyYAML, kubectl), strings in YAML 1.2.
            word = cut(node.value, 10)
            raise StrictLoadError(
                f"line {node.start_mark.line + 1}: {word} reads as a boolean only in YAML "
                f'1.1; write true or false, or quote it ("{word}") for the string'
            )
        value: bool = super().construct_yaml_bool(node)
        return value


_StrictYamlLoader.add_constructor(
    "tag:yaml.org,2002:bool",
    _StrictYamlLoader.construct_yaml_bool,
)
_StrictYamlLoader.add_constructor(
    "tag:yaml.org,2002:int",
    _StrictYamlLoader.construct_yaml_int,
)
_StrictYamlLoader.add_constructor(
    "tag:yaml.org,2002:float",
    _StrictYamlLoader.construct_yaml_float,
)


def _yaml_problem(exc: yaml.YAMLError, source: str) -> StrictLoadError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        return StrictLoadError(
            f"{source}: not valid YAML{where}: {cut(problem, 200)}; check "
            "the indentation and quoting around that spot"
        )
    return StrictLoadError(f"{source}: not valid YAML: {cut(str(exc), 200)}")


def load_yaml_all(text: str, source: str) -> list[Any]:
    """Every document of a YAML stream, empty ones dropped; StrictLoadError (one line,
    naming `source`) for anything the module doc lists or a syntax error."""
    _too_long(text, source)
    loader = _StrictYamlLoader(text)
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            doc = loader.get_data()
            if doc is not None:
                docs.append(doc)
        return docs
    except StrictLoadError as exc:
        raise StrictLoadError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, source) from None
    except RecursionError:  # MAX_DEPTH is far below the limit; kept as the last guard
        raise StrictLoadError(f"{source}: nested too deep; flatten it") from None
    finally:
        loader.dispose()


def load_yaml(text: str, source: str) -> Any:
    """The one YAML document of `text` (None when empty); StrictLoadError as
    `load_yaml_all`, and when the text holds several documents."""
    docs = load_yaml_all(text, source)
    if len(docs) > 1:
        raise StrictLoadError(
            f"{source}: holds {len(docs)} YAML documents; keep exactly one in the file"
        )
    return docs[0] if docs else None


# ---------------------------------------------------------------------------------------
# JSON

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _json_depth(text: str) -> int:
    """How deep `text` nests, strings left out (checked before json.loads recurses)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise StrictLoadError(
                f"duplicate key {shorten(key)}; JSON readers disagree on which value wins: keep one"
            )
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_CHARS or abs(value := int(text)) > MAX_INT:
        raise StrictLoadError(f"the integer {cut(text)} is too large; allowed: at most {MAX_INT}")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictLoadError(f"the number {cut(text)} is not finite (too large)")
    return value


def _constant(text: str) -> Any:
    raise StrictLoadError(f"{text} is not a number JSON allows; write a finite value")


def load_json(text: str, source: str) -> Any:
    """One JSON value; StrictLoadError (one line, naming `source`) for a syntax error
    or anything the module doc lists."""
    _too_long(text, source)
    if _json_depth(text) > MAX_DEPTH:
        raise StrictLoadError(
            f"{source}: nested more than {MAX_DEPTH} levels deep; this is not a file the tool wrote"
        )
    try:
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
        )
    except StrictLoadError as exc:
        raise StrictLoadError(f"{source}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise StrictLoadError(
            f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise StrictLoadError(f"{source}: not valid JSON: {cut(str(exc), 200)}") from None
