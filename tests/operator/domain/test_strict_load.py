"""The one strict reader of the project's YAML and JSON (spillover_operator.domain.strict_load):
what plain yaml.safe_load / json.loads accept silently, or crash on, is refused in one
line naming the source."""

from __future__ import annotations

import pytest
from spillover_operator.domain.quoting import cut, shorten
from spillover_operator.domain.strict_load import (
    MAX_INT,
    StrictLoadError,
    load_json,
    load_yaml,
    load_yaml_all,
)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param("a: 1\na: 2\n", "line 2: duplicate key 'a' (first at line 1)", id="dup"),
        pytest.param("1: x\n", "reads as a int, not a string", id="int-key"),
        pytest.param("true: x\n", "reads as a bool", id="bool-key"),
        pytest.param("t: .inf\n", ".inf is not a finite number", id="inf"),
        pytest.param("t: -.inf\n", "not a finite number", id="minus-inf"),
        pytest.param("t: .nan\n", "not a finite number", id="nan"),
        pytest.param("n: " + "9" * 5000 + "\n", "is too large", id="5000-digits"),
        pytest.param(f"n: {MAX_INT + 1}\n", "is too large", id="int64-plus-one"),
        pytest.param("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than",
                     id="deep-flow"),
        pytest.param("a: [1\n", "not valid YAML (line 2", id="syntax"),
        pytest.param("a: 1\n---\nb: 2\n", "holds 2 YAML documents", id="two-documents"),
        pytest.param("enabled: off\n", "off reads as a boolean only in YAML 1.1", id="off"),
        pytest.param("a: [Yes]\n", "Yes reads as a boolean only in YAML 1.1", id="Yes"),
        pytest.param("a: ON\n", "write true or false", id="ON"),
        pytest.param("a: no\n", 'quote it ("no")', id="no"),
    ],
)  # fmt: skip
def test_yaml_refusals(text: str, needle: str) -> None:
    with pytest.raises(StrictLoadError) as info:
        load_yaml(text, "f.yaml")
    message = str(info.value)
    assert message.startswith("f.yaml: ") and needle in message
    assert "\n" not in message and len(message) < 400


def test_yaml_deep_block_nesting() -> None:
    text = "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n"
    with pytest.raises(StrictLoadError, match="nested more than"):
        load_yaml(text, "f.yaml")


def test_yaml_what_is_accepted() -> None:
    assert load_yaml("", "f") is None
    assert load_yaml(f"n: {MAX_INT}\nf: 1.5\ns: 'x'\n", "f") == {"n": MAX_INT, "f": 1.5, "s": "x"}
    merged = load_yaml("a: &x {b: 1}\nc:\n  <<: *x\n  b: 2\n", "f")
    assert merged["c"] == {"b": 2}  # a merge key may be overridden: that is its point
    assert load_yaml_all("a: 1\n---\n---\nb: 2\n", "f") == [{"a": 1}, {"b": 2}]
    # true/false in any case are booleans everywhere; a quoted off is a string
    assert load_yaml("a: True\nb: FALSE\nc: 'off'\nd: y\n", "f") == {
        "a": True,
        "b": False,
        "c": "off",
        "d": "y",
    }


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param('{"a": 1, "a": 2}', "duplicate key 'a'", id="dup"),
        pytest.param('{"a": NaN}', "NaN is not a number JSON allows", id="nan"),
        pytest.param('{"a": -Infinity}', "-Infinity is not a number", id="minus-inf"),
        pytest.param('{"a": 1e400}', "1e400 is not finite", id="1e400"),
        pytest.param('{"a": ' + "9" * 5000 + "}", "is too large", id="5000-digits"),
        pytest.param("[" * 100_000 + "]" * 100_000, "nested more than", id="deep"),
        pytest.param('{"a": 1', "not valid JSON: Expecting", id="syntax"),
    ],
)  # fmt: skip
def test_json_refusals(text: str, needle: str) -> None:
    with pytest.raises(StrictLoadError) as info:
        load_json(text, "f.json")
    message = str(info.value)
    assert message.startswith("f.json: ") and needle in message
    assert "\n" not in message and len(message) < 400


def test_json_what_is_accepted() -> None:
    assert load_json('{"a": "[[[[{{", "b": [1, 2.5, null]}', "f") == {
        "a": "[[[[{{",
        "b": [1, 2.5, None],
    }


def test_long_values_are_cut() -> None:
    assert cut("abc") == "abc"
    long = shorten("y" * 1_000_000)
    assert len(long) < 120 and long.endswith("… (1000002 characters)")
