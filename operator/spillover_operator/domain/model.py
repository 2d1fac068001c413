"""The SpilloverPolicy model: every fact about the policy, written once.

A spec field that sets an mcp-host variable is one `EnvField`: its spec key (also its
key in `status.effective`), the variable, its kind, its bounds, the mcp-host default,
the spilloverctl flag that changes it, and how the mcp-host reads the variable's raw
value (`EnvField.read`, `read_env`: the value in effect, the one reading every caller
uses: recipe pods, status, the simulator, the matrix, the cluster stage,
apply-decision). The validated spec is `PolicySpec`. The condition reasons the operator
writes are the `REASON_*` names below, grouped into the ones
waiting cannot fix (`REFUSED_REASONS`) and the ones that mean "not yet"
(`PENDING_REASONS`). Everything else reads these: `policy.parse_spec` (bounds, field
names), `envplan` (what to write, what an envFrom shadows), `status` (status.effective),
`assess` (messages), `reconcile` and the waits (reasons), spilloverctl (`set` flags,
`status` line, `--direct`, `render`), the harness's configuration checks
(`cluster/configs.py`) and `apply-decision`, and the CRD test
(tests/operator/domain/test_model.py checks manifests/crd against this module).

Why plain dataclasses and not pydantic: `spilloverctl kill` imports this module, and
pydantic costs about 165 ms of start-up on that path (measured; the kill switch's
latency is benchmarked). The rules stay in one place either way.

How to add a spec field that sets an mcp-host variable (say `spec.flushBytes` ->
`CLERUM_WORKFLOW_TOOL_SPILLOVER_FLUSH_BYTES`, 4096..1048576, default 65536):

1. Here, and only here in the code: add the variable name (`FLUSH_VAR`), its bounds and
   default (`FLUSH_MIN`, `FLUSH_MAX`, `FLUSH_DEFAULT`), an `EnvField` (`FLUSH`, kind
   "bytes", flag "flush") appended to `ENV_FIELDS`, and the attribute
   `flush_bytes: int | None = None` at the end of `PolicySpec` (the `attr` of the
   EnvField). Parsing, rendering the env, status.effective, the shadow notes, the
   status line, `spilloverctl set --flush/--unset-flush`, the reading of the raw value
   (`EnvField.read`), the harness's configuration checks and mapping, the simulator's
   configuration and the expected env all follow from `ENV_FIELDS`.
2. The CRD (manifests/crd/spilloverpolicies.yaml): add the property under
   `spec.properties` and under `status.properties.effective`. Run
   `.venv/bin/pytest tests/operator/domain/test_model.py -q`: it fails naming the field and
   prints the exact schema (type, minimum, maximum) the model wants.
3. Tests: a parse test (bounds refused with the field named) in
   tests/operator/domain/test_policy.py and a render test in tests/operator/domain/test_envplan.py.
   The mcp-host must know the variable too: docs/reference.md §1 lists the variables.

A field that sets no variable (like `onDelete`) is parsed in `policy.parse_spec`, kept
on `PolicySpec` and written by `policy.spec_to_json`; add it to `SPEC_KEYS` and the CRD.

Condition reasons: add a `REASON_*` here, and to `REFUSED_REASONS` when waiting cannot
fix it (spilloverctl --wait then stops at once with exit 5) or `PENDING_REASONS` when it
means "not done yet".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

# ---- the variables, their bounds and the mcp-host defaults (docs/reference.md §1) ----

ENABLED_VAR: Final = "CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED"
THRESHOLD_VAR: Final = "CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD"
BUDGET_VAR: Final = "CLERUM_WORKFLOW_TOOL_SPILLOVER_BUDGET_BYTES"
# The mcp-host's allow-list of variables it passes to recipe steps; the operator adds
# every spillover variable to it (status.effective.passthrough).
PASSTHROUGH_VAR: Final = "MCP_HOST_ENV_PASSTHROUGH"
PASSTHROUGH_STATUS_KEY: Final = "passthrough"

THRESHOLD_MIN: Final = 4096
THRESHOLD_MAX: Final = 1048576
BUDGET_MIN: Final = 1048576
BUDGET_MAX: Final = 268435456
THRESHOLD_DEFAULT: Final = 131072
BUDGET_DEFAULT: Final = 16777216

Kind = Literal["switch", "bytes"]


@dataclass(frozen=True)
class EnvField:
    """A spec field the operator writes as one mcp-host variable.

    `key` is the camelCase spec key and the key in status.effective; `attr` the
    `PolicySpec` attribute; a "switch" is a boolean written as true/false and always
    set, "bytes" an integer within `bounds` that is absent when unset (the mcp-host
    default applies); `default` is that default as the variable's text; `flag` names
    spilloverctl's `set --<flag>` / `--unset-<flag>` (None: no flag).
    """

    key: str
    attr: str
    var: str
    kind: Kind
    default: str
    bounds: tuple[int, int] | None = None
    flag: str | None = None

    @property
    def low(self) -> int:
        assert self.bounds is not None, f"{self.key} has no bounds"
        return self.bounds[0]

    @property
    def high(self) -> int:
        assert self.bounds is not None, f"{self.key} has no bounds"
        return self.bounds[1]

    def to_env(self, value: bool | int | None) -> str | None:
        """The variable's text for a spec value (None: the variable is absent)."""
        if value is None:
            return None
        if self.kind == "switch":
            return "true" if value else "false"
        return str(value)

    @property
    def default_value(self) -> bool | int:
        """The mcp-host default as a value (`True`, `131072`...)."""
        return self.default == "true" if self.kind == "switch" else int(self.default)

    @property
    def allowed(self) -> str:
        """What the mcp-host takes as set, for messages and help texts."""
        if self.kind == "switch":
            return 'exactly "true" or "false"'
        return f"a decimal integer from {self.low} to {self.high} (bytes)"

    def read(self, raw: str | None) -> Reading:
        """What the mcp-host runs with when the variable is `raw` (None: unset).

        The one reading of the variable, for the operator, spilloverctl, the simulator
        and the harness (docs/reference.md §1.3): surrounding whitespace is ignored (a
        stray space never defeats the kill switch); nothing left (unset, empty, blank)
        is unset, the default with no warning; a switch takes exactly `true` or `false`,
        a size ASCII decimal digits within `bounds`; anything else is invalid: the mcp-host
        warns and runs with the default."""
        text = None if raw is None else raw.strip()
        if not text:
            return Reading(self, raw, "unset", self.default_value)
        if self.kind == "switch":
            if text in ("true", "false"):
                return Reading(self, raw, "set", text == "true")
            return Reading(self, raw, "invalid", self.default_value, "neither true nor false")
        if not (text.isascii() and text.isdigit()):
            return Reading(self, raw, "invalid", self.default_value, "not a decimal integer")
        if not self.low <= int(text) <= self.high:
            return Reading(self, raw, "invalid", self.default_value, "out of range")
        return Reading(self, raw, "set", int(text))


ReadState = Literal["unset", "set", "invalid"]


@dataclass(frozen=True)
class Reading:
    """One raw value of a variable as the mcp-host reads it (`EnvField.read`).

    `state`: "set" (taken), "unset" (the default, no warning) or "invalid" (the
    default, with a warning saying `problem`, e.g. "out of range", which
    `field.allowed` completes); `value` is what runs either way."""

    field: EnvField
    raw: str | None
    state: ReadState
    value: bool | int
    problem: str | None = None

    @property
    def text(self) -> str:
        """The value in effect as the variable's canonical text (`true`, `32768`)."""
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        return str(self.value)


ENABLED: Final = EnvField("enabled", "enabled", ENABLED_VAR, "switch", "true")
THRESHOLD: Final = EnvField(
    "thresholdBytes",
    "threshold_bytes",
    THRESHOLD_VAR,
    "bytes",
    str(THRESHOLD_DEFAULT),
    (THRESHOLD_MIN, THRESHOLD_MAX),
    "threshold",
)
BUDGET: Final = EnvField(
    "budgetBytes",
    "budget_bytes",
    BUDGET_VAR,
    "bytes",
    str(BUDGET_DEFAULT),
    (BUDGET_MIN, BUDGET_MAX),
    "budget",
)

# In the order the variables are written and shown.
ENV_FIELDS: Final[tuple[EnvField, ...]] = (ENABLED, THRESHOLD, BUDGET)
SPILLOVER_VARS: Final[tuple[str, ...]] = tuple(f.var for f in ENV_FIELDS)
FIELD_OF_VAR: Final[dict[str, EnvField]] = {f.var: f for f in ENV_FIELDS}
FIELD_OF_KEY: Final[dict[str, EnvField]] = {f.key: f for f in ENV_FIELDS}
# The mcp-host default of each variable, as text.
DEFAULTS: Final[dict[str, str]] = {f.var: f.default for f in ENV_FIELDS}


def read_env(var: str, raw: str | None) -> Reading:
    """`EnvField.read` of the variable named `var` (KeyError: not a spillover variable)."""
    return FIELD_OF_VAR[var].read(raw)


# status.effective's key for each variable (the passthrough list included).
STATUS_KEYS: Final[dict[str, str]] = {
    **{f.var: f.key for f in ENV_FIELDS},
    PASSTHROUGH_VAR: PASSTHROUGH_STATUS_KEY,
}

# Every key a spec may carry.
SPEC_KEYS: Final[tuple[str, ...]] = (
    *(f.key for f in ENV_FIELDS),
    "target",
    "onDelete",
    "recipePods",
)
TARGET_KEYS: Final = ("deployment", "container")
RECIPE_POD_KEYS: Final = ("selector", "refresh", "container")

OnDelete = Literal["Retain", "Remove"]
ON_DELETE_VALUES: Final[tuple[OnDelete, ...]] = ("Retain", "Remove")
Refresh = Literal["Never", "OnKillSwitch", "Always"]
REFRESH_VALUES: Final[tuple[Refresh, ...]] = ("Never", "OnKillSwitch", "Always")

# The recipe mcp-host pods when spec.recipePods.selector is unset: the harness profiles'
# mcp-host selector (harness/spillover_harness/profiles/*.yaml).
DEFAULT_RECIPE_SELECTOR: Final[dict[str, Any]] = {
    "matchLabels": {"app.kubernetes.io/name": "mcp-host"}
}
# The container read in a recipe pod when spec.recipePods.container is unset: this one
# when the pod has it, else the pod's first container.
DEFAULT_RECIPE_CONTAINER: Final = "mcp-host"


# ---- the validated spec --------------------------------------------------------------


@dataclass(frozen=True)
class RecipePodsSpec:
    """spec.recipePods: which pods run recipe steps (mcp-host) and whether the operator
    restarts the ones still running old values."""

    selector: dict[str, Any]
    refresh: Refresh = "Never"
    container: str | None = None
    given: bool = False  # spec.recipePods was written (spec_to_json keeps it)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"selector": self.selector, "refresh": self.refresh}
        if self.container is not None:
            body["container"] = self.container
        return body


def default_recipe_pods() -> RecipePodsSpec:
    return RecipePodsSpec(selector=dict(DEFAULT_RECIPE_SELECTOR))


@dataclass(frozen=True)
class PolicySpec:
    """A validated SpilloverPolicy spec (`policy.parse_spec` makes one). `None` for a
    "bytes" field: the variable is absent (the mcp-host default applies)."""

    enabled: bool
    threshold_bytes: int | None
    budget_bytes: int | None
    deployment: str
    container: str | None
    on_delete: OnDelete
    recipe_pods: RecipePodsSpec = field(default_factory=default_recipe_pods)

    def value(self, env_field: EnvField) -> bool | int | None:
        """The spec's value of `env_field`."""
        value: bool | int | None = getattr(self, env_field.attr)
        return value


# ---- condition reasons ---------------------------------------------------------------

COND_READY: Final = "Ready"
COND_APPLIED: Final = "Applied"
# Whether every recipe mcp-host pod runs the policy's values (`recipe_pods.recipe_condition`).
COND_RECIPE_PODS: Final = "RecipePodsCurrent"

REASON_APPLIED: Final = "Applied"  # the env was written (Applied=True, and an Event)
REASON_DRIFT_CORRECTED: Final = "DriftCorrected"  # an Event: someone changed the env
REASON_ROLLOUT_COMPLETE: Final = "RolloutComplete"
REASON_ROLLOUT_IN_PROGRESS: Final = "RolloutInProgress"
REASON_REMOVED: Final = "Removed"  # an Event: onDelete=Remove took the variables out
REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_CONFLICT: Final = "Conflict"  # another policy targets the same Deployment
REASON_TARGET_NOT_FOUND: Final = "TargetNotFound"
REASON_TARGET_NOT_SUPPORTED: Final = "TargetNotSupported"
# spec.target.deployment is outside the operator's allow-list.
REASON_TARGET_NOT_ALLOWED: Final = "TargetNotAllowed"
REASON_APPLY_FAILED: Final = "ApplyFailed"

# The RecipePodsCurrent condition (`recipe_pods.recipe_condition`).
REASON_ALL_CURRENT: Final = "AllCurrent"
REASON_STALE: Final = "Stale"
# Restarted, and the new pods still run old values: waiting cannot fix it.
REASON_STALE_AFTER_REFRESH: Final = "StaleAfterRefresh"
# spec.recipePods.container names a container some matched pod does not have: its
# values cannot be read (the condition names the container and the pods' containers).
REASON_CONTAINER_NOT_FOUND: Final = "ContainerNotFound"
REASON_UNKNOWN: Final = "Unknown"
REASON_NO_PODS: Final = "NoPods"

# Event reasons that are not condition reasons: the recipe pods' state after a change
# (aggregated per owner), the refresh's steps and refusals, and leadership.
EVENT_RECIPE_PODS: Final = "RecipePods"
EVENT_RECIPE_PODS_REFRESH: Final = "RecipePodsRefresh"
EVENT_RECIPE_PODS_REFRESH_FORBIDDEN: Final = "RecipePodsRefreshForbidden"
EVENT_RECIPE_PODS_REFRESH_FAILED: Final = "RecipePodsRefreshFailed"
EVENT_LEADER_ELECTED: Final = "LeaderElected"

# Ready=False reasons that waiting cannot fix: the operator refused the policy and
# touches nothing until someone changes something.
REFUSED_REASONS: Final[tuple[str, ...]] = (
    REASON_INVALID_SPEC,
    REASON_CONFLICT,
    REASON_TARGET_NOT_SUPPORTED,
    REASON_TARGET_NOT_ALLOWED,
)
# Ready=False reasons that mean "not done yet" rather than "wrong".
PENDING_REASONS: Final[tuple[str, ...]] = (REASON_ROLLOUT_IN_PROGRESS,)
