"""The mcp-host's spillover configuration, read from its environment (docs/reference.md §1).

Same variables, defaults, bounds and warn-and-default handling as the platform:

| variable | default | valid |
|---|---|---|
| CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED | on (unset = on) | exactly `true` / `false` |
| CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD | 131072 | decimal integer 4096 .. 1048576 |
| CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES | 16777216 | decimal integer 1048576 .. 268435456 |

An invalid value gives one warning and the default. A variable set to the
empty string counts as unset (no warning), as `os.Getenv` cannot tell them apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# The platform's facts (names, defaults, bounds) have one home: the operator's constants.
from spillover_operator.domain.constants import (
    BUDGET_DEFAULT as DEFAULT_BUDGET,
)
from spillover_operator.domain.constants import (
    BUDGET_MAX,
    BUDGET_MIN,
    BUDGET_VAR,
    ENABLED_VAR,
    THRESHOLD_MAX,
    THRESHOLD_MIN,
    THRESHOLD_VAR,
)
from spillover_operator.domain.constants import (
    THRESHOLD_DEFAULT as DEFAULT_THRESHOLD,
)

DEFAULT_ENABLED = True

_DECIMAL = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class SpilloverConfig:
    enabled: bool = DEFAULT_ENABLED
    threshold: int = DEFAULT_THRESHOLD
    budget: int = DEFAULT_BUDGET


@dataclass(frozen=True)
class ConfigWarning:
    """One invalid variable: what was set and what is used instead (no secrets here)."""

    variable: str
    value: str
    default: str
    reason: str

    def message(self) -> str:
        return (
            f"invalid {self.variable}={self.value!r} ({self.reason}); "
            f"using the default {self.default}"
        )


def _int_in_range(
    name: str, raw: str, default: int, low: int, high: int, warnings: list[ConfigWarning]
) -> int:
    if not _DECIMAL.fullmatch(raw):
        warnings.append(ConfigWarning(name, raw, str(default), "not a decimal integer"))
        return default
    value = int(raw)
    if not low <= value <= high:
        warnings.append(ConfigWarning(name, raw, str(default), f"outside {low}..{high}"))
        return default
    return value


def parse_spillover_env(
    env: Mapping[str, str], *, default_threshold: int | None = None
) -> tuple[SpilloverConfig, list[ConfigWarning]]:
    """The configuration an mcp-host with this environment runs with, and its warnings.
    `default_threshold`: a drifted default (the simulator's fault switch)."""
    warnings: list[ConfigWarning] = []
    enabled = DEFAULT_ENABLED
    raw = env.get(ENABLED_VAR, "")
    if raw == "true":
        enabled = True
    elif raw == "false":
        enabled = False
    elif raw != "":
        warnings.append(ConfigWarning(ENABLED_VAR, raw, "true", "only 'true' or 'false' are valid"))
    default = DEFAULT_THRESHOLD if default_threshold is None else default_threshold
    threshold = default
    raw = env.get(THRESHOLD_VAR, "")
    if raw != "":
        threshold = _int_in_range(
            THRESHOLD_VAR, raw, default, THRESHOLD_MIN, THRESHOLD_MAX, warnings
        )
    budget = DEFAULT_BUDGET
    raw = env.get(BUDGET_VAR, "")
    if raw != "":
        budget = _int_in_range(BUDGET_VAR, raw, DEFAULT_BUDGET, BUDGET_MIN, BUDGET_MAX, warnings)
    return SpilloverConfig(enabled, threshold, budget), warnings
