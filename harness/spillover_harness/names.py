"""Names a user chooses (a matrix's, its configurations', recipes' and inputs') travel
into run ids, records, report tables and terminals: a control character (NUL, a
newline that starts a forged Markdown table row), a format character such as the
right-to-left override U+202E (which makes `evil` read as `live`) or a line separator
would let a name rewrite what a reader sees, so such names are refused where they are
read."""

from __future__ import annotations

import unicodedata

__all__ = ["name_problem", "unsafe_chars"]

# Cc: controls (NUL, newline, ESC); Cf: format (U+202E and the other bidi controls,
# zero-width joiners); Zl/Zp: line and paragraph separators; Cs: lone surrogates.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def unsafe_chars(text: str) -> list[str]:
    """The characters of `text` a name may not hold, as `U+202E` (each once, in order)."""
    seen: list[str] = []
    for char in text:
        if unicodedata.category(char) in _UNSAFE_CATEGORIES:
            code = f"U+{ord(char):04X}"
            if code not in seen:
                seen.append(code)
    return seen


def name_problem(text: str) -> str | None:
    """Why `text` cannot be a name, or None: the message names the characters and the fix."""
    bad = unsafe_chars(text)
    if not bad:
        return None
    return (
        f"holds control or format characters ({', '.join(bad[:5])}): a name may hold "
        "letters, digits, spaces and punctuation only; rename it"
    )
