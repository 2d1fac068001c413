"""Field validators of the profile: names, label selectors, PromQL matchers, regexes
and JSONPaths. Each raises ValueError with a message that says what is wrong; the
loader turns it into a `ProfileError` naming the file and the key."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator
from spillover_operator.domain.quoting import shorten

from spillover_harness.profile.jsonpath import JsonPath

__all__ = [
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "JsonPathStr",
    "LabelSelector",
    "PromMatchers",
    "check_jsonpath",
    "check_label_selector",
    "check_prom_matchers",
    "compile_pattern",
]

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def check_jsonpath(value: str) -> str:
    JsonPath.parse(value)
    return value


JsonPathStr = Annotated[str, AfterValidator(check_jsonpath)]


# --------------------------------------------------------------------------- label selectors

_LABEL_PREFIX = r"(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
_LABEL_KEY = _LABEL_PREFIX + r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SELECTOR_TERM = re.compile(
    rf"^\s*(?:!?\s*{_LABEL_KEY}"
    rf"|{_LABEL_KEY}\s*(?:==|=|!=)\s*{_LABEL_VALUE}"
    rf"|{_LABEL_KEY}\s+(?:in|notin)\s*\(\s*{_LABEL_VALUE}(?:\s*,\s*{_LABEL_VALUE})*\s*\))\s*$"
)


def _split_selector(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return terms


def check_label_selector(value: str) -> str:
    """A Kubernetes label selector (equality or set terms), never empty."""
    if not value.strip():
        raise ValueError("a label selector cannot be empty (it would match every pod)")
    for term in _split_selector(value):
        if not _SELECTOR_TERM.match(term):
            raise ValueError(f"not a Kubernetes label selector term: {shorten(term.strip())}")
    return value


# PromQL label matchers, without the braces: name="v", name!="v", name=~"re", name!~"re".
_PROM_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*')


def split_prom_matchers(value: str) -> list[tuple[str, str, str]]:
    """(label, operator, value still quoted) of each PromQL label matcher in `value`
    (without braces; empty: none); ValueError saying what is wrong."""
    text = value.strip()
    found: list[tuple[str, str, str]] = []
    if not text:
        return found
    pos = 0
    while True:
        m = _PROM_MATCHER.match(text, pos)
        if m is None:
            raise ValueError(
                f'not a list of PromQL label matchers (like job="mcp-host", '
                f'namespace="clerum"), without braces: {shorten(value)}'
            )
        found.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
        if pos >= len(text):
            return found
        if text[pos] != ",":
            raise ValueError(f"matchers are separated by commas: {shorten(value)}")
        pos += 1
        if text[pos:].strip() == "":
            return found


def check_prom_matchers(value: str) -> str:
    """PromQL label matchers without braces; empty means no extra matchers."""
    split_prom_matchers(value)
    return value


LabelSelector = Annotated[str, AfterValidator(check_label_selector)]
PromMatchers = Annotated[str, AfterValidator(check_prom_matchers)]


def compile_pattern(pattern: str, groups: tuple[str, ...]) -> str:
    """A regex (kept as text) that compiles and has these named groups."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    missing = [g for g in groups if g not in compiled.groupindex]
    if missing:
        wanted = ", ".join(f"(?P<{g}>...)" for g in missing)
        raise ValueError(f"the pattern needs the named group(s) {wanted}")
    return pattern
