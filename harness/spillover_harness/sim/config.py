"""The mcp-host's spillover configuration, read from its environment (docs/reference.md §1).

Each variable is read as the platform reads it, by the policy model's one reading
(`spillover_operator.domain.model.EnvField.read`: names, defaults, bounds, whitespace,
warn-and-default). An invalid value gives one warning and the default; a variable
unset, empty or blank is the default with no warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spillover_operator.domain.model import BUDGET, ENABLED, THRESHOLD


@dataclass(frozen=True)
class SpilloverConfig:
    enabled: bool = bool(ENABLED.default_value)
    threshold: int = int(THRESHOLD.default_value)
    budget: int = int(BUDGET.default_value)


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


def parse_spillover_env(
    env: Mapping[str, str], *, default_threshold: int | None = None
) -> tuple[SpilloverConfig, list[ConfigWarning]]:
    """The configuration an mcp-host with this environment runs with, and its warnings.
    `default_threshold`: a drifted default (the simulator's fault switch)."""
    enabled, threshold, budget = (f.read(env.get(f.var)) for f in (ENABLED, THRESHOLD, BUDGET))
    warnings: list[ConfigWarning] = []
    for reading in (enabled, threshold, budget):
        if reading.state == "invalid":
            default = reading.field.default
            if reading.field is THRESHOLD and default_threshold is not None:
                default = str(default_threshold)
            reason = f"{reading.problem}; allowed: {reading.field.allowed}"
            warnings.append(ConfigWarning(reading.field.var, str(reading.raw), default, reason))
    in_effect = int(threshold.value)
    if threshold.state != "set" and default_threshold is not None:
        in_effect = default_threshold
    return SpilloverConfig(bool(enabled.value), in_effect, int(budget.value)), warnings
