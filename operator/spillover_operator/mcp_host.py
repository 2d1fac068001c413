"""How the mcp-host reads its three spillover variables.

One meaning for everything that compares values: the operator (is a recipe pod
current?), the status report, and the harness (does this pod run the configuration
the record claims?). The mcp-host uses a variable's default when it is unset, and
also when its value is invalid (it logs a warning): `ENABLED` takes `true` or
`false`, the two sizes a whole number of bytes within their range. So
`THRESHOLD=131072` and no THRESHOLD at all run the same, and a mistyped threshold runs
at 128 KiB, not at the value that was meant.
"""

from __future__ import annotations

from typing import Final

from spillover_operator.constants import (
    BUDGET_DEFAULT,
    BUDGET_MAX,
    BUDGET_MIN,
    BUDGET_VAR,
    ENABLED_VAR,
    THRESHOLD_DEFAULT,
    THRESHOLD_MAX,
    THRESHOLD_MIN,
    THRESHOLD_VAR,
)

DEFAULTS: Final[dict[str, str]] = {
    ENABLED_VAR: "true",
    THRESHOLD_VAR: str(THRESHOLD_DEFAULT),
    BUDGET_VAR: str(BUDGET_DEFAULT),
}
BOUNDS: Final[dict[str, tuple[int, int]]] = {
    THRESHOLD_VAR: (THRESHOLD_MIN, THRESHOLD_MAX),
    BUDGET_VAR: (BUDGET_MIN, BUDGET_MAX),
}


def value_in_effect(var: str, raw: str | None) -> str:
    """The value the mcp-host runs with when `var` is `raw` (None: unset)."""
    if raw is None:
        return DEFAULTS[var]
    text = raw.strip()
    if var == ENABLED_VAR:
        return text if text in ("true", "false") else DEFAULTS[var]
    low, high = BOUNDS[var]
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        return DEFAULTS[var]
    return str(int(text))
