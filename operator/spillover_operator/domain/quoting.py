"""How a message quotes a value it refuses: cut to about `SHORT` characters, never the
whole of a huge one (a 1 MB scalar is not echoed back).

Apart from `strict_load` (which needs PyYAML) so that a module quoting values,
`policy` on `spilloverctl kill`'s path, does not load YAML."""

from __future__ import annotations

from typing import Any, Final

SHORT: Final = 80


def cut(text: str, limit: int = SHORT) -> str:
    """`text` cut to about `limit` characters with an ellipsis and its full length."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text)} characters)"


def shorten(value: Any, limit: int = SHORT) -> str:
    """`repr(value)` cut by `cut`: what a message quotes of a value it refuses (never
    the whole of a huge one)."""
    return cut(repr(value), limit)


def escaped(text: str) -> str:
    """`text` on one line, every character a terminal could act on escaped as Python's
    repr escapes it: a newline as `\\n`, ESC as `\\x1b`, any other non-printable
    character (C0 and C1 controls, Unicode format characters such as U+202E, line and
    paragraph separators) as `\\xNN`/`\\uNNNN`, and a backslash as `\\\\`, so a
    character shown escaped is never the same text typed. What status lines and Events
    show of text someone else wrote (a change record)."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in text)
