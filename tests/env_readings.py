"""One table: a raw value of a spillover variable -> what the mcp-host runs with.

Every reader of the three variables is run against it (tests/operator/domain/test_env_reading.py
for the operator, tests/harness/test_env_reading_agreement.py for the simulator, the
matrix, the cluster stage's mapping and the recipe pods' comparison), so no two parts of
the project can read a value differently (docs/reference.md §1.3).

`state`: "set" (taken), "unset" (the default, no warning), "invalid" (the default, a
warning); `runs` is the value in effect as the variable's text.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR


class Row(NamedTuple):
    var: str
    raw: str | None
    state: Literal["set", "unset", "invalid"]
    runs: str

    def id(self) -> str:
        return f"{self.var.rsplit('_', 1)[-1]}={self.raw!r}"


READINGS: tuple[Row, ...] = (
    Row(ENABLED_VAR, None, "unset", "true"),
    Row(ENABLED_VAR, "", "unset", "true"),
    Row(ENABLED_VAR, "  ", "unset", "true"),
    Row(ENABLED_VAR, "true", "set", "true"),
    Row(ENABLED_VAR, "false", "set", "false"),
    # surrounding whitespace is ignored: a stray space never defeats the kill switch
    Row(ENABLED_VAR, " false ", "set", "false"),
    Row(ENABLED_VAR, "false\n", "set", "false"),
    Row(ENABLED_VAR, "\tfalse", "set", "false"),
    Row(ENABLED_VAR, " true", "set", "true"),
    Row(ENABLED_VAR, "FALSE", "invalid", "true"),
    Row(ENABLED_VAR, "False", "invalid", "true"),
    Row(ENABLED_VAR, "0", "invalid", "true"),
    Row(ENABLED_VAR, "off", "invalid", "true"),
    Row(ENABLED_VAR, "f alse", "invalid", "true"),
    Row(THRESHOLD_VAR, None, "unset", "131072"),
    Row(THRESHOLD_VAR, "", "unset", "131072"),
    Row(THRESHOLD_VAR, "32768", "set", "32768"),
    Row(THRESHOLD_VAR, " 4096", "set", "4096"),
    Row(THRESHOLD_VAR, "32768 ", "set", "32768"),
    Row(THRESHOLD_VAR, "032768", "set", "32768"),
    Row(THRESHOLD_VAR, "4096", "set", "4096"),
    Row(THRESHOLD_VAR, "1048576", "set", "1048576"),
    Row(THRESHOLD_VAR, "131072", "set", "131072"),
    Row(THRESHOLD_VAR, "4095", "invalid", "131072"),
    Row(THRESHOLD_VAR, "1048577", "invalid", "131072"),
    Row(THRESHOLD_VAR, "32k", "invalid", "131072"),
    Row(THRESHOLD_VAR, "32 768", "invalid", "131072"),
    Row(THRESHOLD_VAR, "-5", "invalid", "131072"),
    Row(THRESHOLD_VAR, "+4096", "invalid", "131072"),
    Row(THRESHOLD_VAR, "1e5", "invalid", "131072"),
    Row(THRESHOLD_VAR, "0x8000", "invalid", "131072"),
    Row(THRESHOLD_VAR, "٣٢٧٦٨", "invalid", "131072"),  # digits, but not ASCII ones
    Row(BUDGET_VAR, None, "unset", "16777216"),
    Row(BUDGET_VAR, "1048576", "set", "1048576"),
    Row(BUDGET_VAR, " 268435456 ", "set", "268435456"),
    Row(BUDGET_VAR, "1048575", "invalid", "16777216"),
    Row(BUDGET_VAR, "268435457", "invalid", "16777216"),
    Row(BUDGET_VAR, "16MiB", "invalid", "16777216"),
    Row(BUDGET_VAR, "1", "invalid", "16777216"),
)
