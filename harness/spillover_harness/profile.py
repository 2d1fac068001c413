"""The cluster profile: how the harness reaches the platform in stages `minikube` and `dev`.

A YAML file says where things are (namespace, the WRC Deployment, the policy), how
a recipe run is started and followed (a custom resource, or an HTTP execute
endpoint), where every recorded field comes from (JSONPaths into the run's status
or response, regexes for the documented log lines), which pods to read logs from,
where Prometheus is, and where to look for `.spill` entries. Defaults come from
docs/reference.md §1; `docs/cluster-profile.md` lists every assumption behind them.

Validated like the matrix: a wrong key or type raises `ProfileError` naming the
file and the key.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

DEFAULT_PROFILES = ("minikube", "dev")

# Outcomes a platform phase may map to (harness_error is the harness's own).
PlatformOutcome = Literal["succeeded", "failed", "aborted", "timed_out"]

# Placeholders a run template may use.
# `env` is the configuration's environment (a mapping): only for a platform that takes it
# per run, like the simulator behind the local control plane; real platforms get it
# from the policy through the WRC.
RUN_PLACEHOLDERS = frozenset(
    {"recipe", "input", "run_id", "namespace", "seed", "repetition", "env"}
)
# Placeholders of a poll path (http mode): ours, and the id the platform answered with.
POLL_PLACEHOLDERS = frozenset({"run_id", "platform_run_id", "namespace"})
# Placeholders of the output directory to check for `.spill` entries.
DISK_PLACEHOLDERS = frozenset({"run_id", "platform_run_id", "namespace", "recipe", "input"})

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


# --------------------------------------------------------------------------- JSONPath


_JP_TOKEN = re.compile(
    r"""
    \.(?P<name>[A-Za-z_][A-Za-z0-9_-]*)       # .name
  | \.(?P<dotstar>\*)                          # .*
  | \[\s*(?P<index>-?\d+)\s*\]                 # [0], [-1]
  | \[\s*(?P<star>\*)\s*\]                     # [*]
  | \[\s*'(?P<sq>[^']*)'\s*\]                  # ['name']
  | \[\s*"(?P<dq>[^"]*)"\s*\]                  # ["name"]
    """,
    re.VERBOSE,
)

_Step = tuple[Literal["key", "index", "all"], str | int | None]


@dataclass(frozen=True)
class JsonPath:
    """A small JSONPath subset, enough to point into a run's status or response.

    `$`, `.name`, `['name']`, `[0]`, `[-1]`, `[*]`, `.*`. Kubernetes style
    (`{.status.phase}`) and a leading `.` without `$` are accepted too.
    `find` returns every match; `first` the first one or None.
    """

    text: str
    steps: tuple[_Step, ...]

    @classmethod
    def parse(cls, text: str) -> JsonPath:
        src = text.strip()
        if src.startswith("{") and src.endswith("}"):
            src = src[1:-1].strip()
        if src.startswith("$"):
            src = src[1:]
        elif not src.startswith((".", "[")):
            raise ValueError(f"a JSONPath starts with '$' or '.': {text!r}")
        steps: list[_Step] = []
        pos = 0
        while pos < len(src):
            m = _JP_TOKEN.match(src, pos)
            if m is None:
                raise ValueError(
                    f"unsupported JSONPath {text!r} at {src[pos:]!r} (supported: $, .name, "
                    "['name'], [0], [*], .*)"
                )
            if m.group("name") is not None:
                steps.append(("key", m.group("name")))
            elif m.group("sq") is not None:
                steps.append(("key", m.group("sq")))
            elif m.group("dq") is not None:
                steps.append(("key", m.group("dq")))
            elif m.group("index") is not None:
                steps.append(("index", int(m.group("index"))))
            else:
                steps.append(("all", None))
            pos = m.end()
        return cls(text=text, steps=tuple(steps))

    def find(self, document: object) -> list[object]:
        current: list[object] = [document]
        for kind, arg in self.steps:
            nxt: list[object] = []
            for node in current:
                if kind == "key":
                    if isinstance(node, Mapping) and arg in node:
                        nxt.append(node[arg])
                elif kind == "index":
                    assert isinstance(arg, int)
                    if isinstance(node, list) and -len(node) <= arg < len(node):
                        nxt.append(node[arg])
                elif isinstance(node, Mapping):
                    nxt.extend(node.values())
                elif isinstance(node, list):
                    nxt.extend(node)
            current = nxt
        return current

    def first(self, document: object) -> object | None:
        found = self.find(document)
        return found[0] if found else None


def _check_jsonpath(value: str) -> str:
    JsonPath.parse(value)
    return value


JsonPathStr = Annotated[str, AfterValidator(_check_jsonpath)]


def _placeholders(text: str) -> set[str]:
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"bad placeholder syntax in {text!r}: {exc}") from None
    names: set[str] = set()
    for _, field, spec, conv in parsed:
        if field is None:
            continue
        if field == "" or spec or conv:
            raise ValueError(
                f"placeholders are plain names like {{run_id}}, got {{{field}}} in {text!r}"
            )
        names.add(field)
    return names


def _check_placeholders(value: object, allowed: frozenset[str], where: str = "") -> None:
    """Every string in a template may use only the allowed placeholders."""
    if isinstance(value, str):
        unknown = sorted(_placeholders(value) - allowed)
        if unknown:
            at = f" at {where}" if where else ""
            raise ValueError(
                f"unknown placeholder {', '.join('{' + u + '}' for u in unknown)}{at} "
                f"(known: {', '.join('{' + a + '}' for a in sorted(allowed))})"
            )
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _check_placeholders(k, allowed, f"{where}.{k}" if where else str(k))
            _check_placeholders(v, allowed, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_placeholders(v, allowed, f"{where}.{i}" if where else str(i))


def render_template(template: object, values: Mapping[str, object]) -> object:
    """Fill a run template. A string that is exactly one placeholder (`"{seed}"`)
    becomes the value itself (keeping its type); other strings are formatted."""
    if isinstance(template, str):
        names = _placeholders(template)
        if len(names) == 1:
            (only,) = names
            if template == "{" + only + "}":
                return values[only]
        return template.format(**values)
    if isinstance(template, Mapping):
        return {
            str(render_template(k, values)): render_template(v, values) for k, v in template.items()
        }
    if isinstance(template, list):
        return [render_template(v, values) for v in template]
    return template


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


def _check_label_selector(value: str) -> str:
    if not value.strip():
        raise ValueError("a label selector cannot be empty (it would match every pod)")
    for term in _split_selector(value):
        if not _SELECTOR_TERM.match(term):
            raise ValueError(f"not a Kubernetes label selector term: {term.strip()!r}")
    return value


# PromQL label matchers, without the braces: name="v", name!="v", name=~"re", name!~"re".
_PROM_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def _check_prom_matchers(value: str) -> str:
    text = value.strip()
    if not text:
        return value
    pos = 0
    while True:
        m = _PROM_MATCHER.match(text, pos)
        if m is None:
            raise ValueError(
                f'not a list of PromQL label matchers (like job="mcp-host", '
                f'namespace="clerum"), without braces: {value!r}'
            )
        pos = m.end()
        if pos >= len(text):
            return value
        if text[pos] != ",":
            raise ValueError(f"matchers are separated by commas: {value!r}")
        pos += 1
        if text[pos:].strip() == "":
            return value


# --------------------------------------------------------------------------- models


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Wrc(_Strict):
    """The workflow-recipe controller Deployment that carries the spillover variables."""

    deployment: str = "workflow-recipe-controller"
    container: str | None = None  # None = the Deployment's first container

    @field_validator("deployment")
    @classmethod
    def _dns_name(cls, v: str) -> str:
        if not _DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"not a valid Deployment name: {v!r}")
        return v

    @field_validator("container")
    @classmethod
    def _dns_label(cls, v: str | None) -> str | None:
        if v is not None and not _DNS1123_LABEL.match(v):
            raise ValueError(f"not a valid container name: {v!r}")
        return v


class _RunBase(_Strict):
    poll_interval_s: float = Field(default=2.0, gt=0, le=300)


class CustomResourceRun(_RunBase):
    """Start a run by creating a custom resource from a template; follow its status.

    The harness sets `apiVersion`, `kind`, `metadata.name` (from `name_template`)
    and `metadata.namespace`; `template` is the rest of the object.
    """

    mode: Literal["custom-resource"]
    api_version: str = Field(pattern=r"^[a-z0-9.-]+/[a-z0-9]+$")
    kind: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$")
    plural: str = Field(pattern=r"^[a-z0-9]+$")
    name_template: str = "spill-{run_id}"
    template: dict[str, Any]

    @field_validator("name_template")
    @classmethod
    def _name_placeholders(cls, v: str) -> str:
        _check_placeholders(v, RUN_PLACEHOLDERS)
        return v

    @field_validator("template")
    @classmethod
    def _template(cls, v: dict[str, Any]) -> dict[str, Any]:
        for reserved in ("apiVersion", "kind"):
            if reserved in v:
                raise ValueError(f"'{reserved}' is set by the harness from the profile; remove it")
        meta = v.get("metadata")
        if isinstance(meta, Mapping) and ({"name", "namespace"} & set(meta)):
            raise ValueError(
                "metadata.name and metadata.namespace are set by the harness "
                "(name_template and namespace); remove them"
            )
        _check_placeholders(v, RUN_PLACEHOLDERS)
        return v

    @property
    def group(self) -> str:
        return self.api_version.split("/", 1)[0]

    @property
    def version(self) -> str:
        return self.api_version.split("/", 1)[1]


class HttpRun(_RunBase):
    """Start a run with an HTTP request to an execute endpoint of a Service, then poll.

    `access: port-forward` forwards a local port to the Service's pod;
    `access: service-proxy` goes through the API server's service proxy
    (`/api/v1/namespaces/<ns>/services/<scheme>:<service>:<port>/proxy/<path>`).
    """

    mode: Literal["http"]
    access: Literal["port-forward", "service-proxy"] = "port-forward"
    service: str
    port: int = Field(ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    execute_method: Literal["POST", "PUT"] = "POST"
    execute_path: str = Field(pattern=r"^/")
    body: dict[str, Any] = {}
    run_id_path: JsonPathStr | None = None  # JSONPath of the platform's run id in the response
    poll_path: str = Field(pattern=r"^/")
    logs_path: str | None = Field(default=None, pattern=r"^/")
    # POST this to ask the platform to stop a run (harness timeout or Ctrl-C); none: not asked
    cancel_path: str | None = Field(default=None, pattern=r"^/")

    @field_validator("service")
    @classmethod
    def _service_name(cls, v: str) -> str:
        if not _DNS1123_LABEL.match(v):
            raise ValueError(f"not a valid Service name: {v!r}")
        return v

    @field_validator("execute_path", "body")
    @classmethod
    def _run_placeholders(cls, v: Any) -> Any:
        _check_placeholders(v, RUN_PLACEHOLDERS)
        return v

    @field_validator("poll_path", "logs_path", "cancel_path")
    @classmethod
    def _poll_placeholders(cls, v: str | None) -> str | None:
        if v is not None:
            _check_placeholders(v, POLL_PLACEHOLDERS)
        return v

    def service_proxy_prefix(self, namespace: str) -> str:
        """The API-server path that proxies to this Service (for `access: service-proxy`)."""
        return (
            f"/api/v1/namespaces/{namespace}/services/"
            f"{self.scheme}:{self.service}:{self.port}/proxy"
        )


RunMode = Annotated[CustomResourceRun | HttpRun, Field(discriminator="mode")]


class OutcomeSource(_Strict):
    """Where the run's phase is, and what each platform phase means (record outcomes)."""

    path: JsonPathStr = "$.phase"
    phases: dict[str, PlatformOutcome] = {
        "Succeeded": "succeeded",
        "Completed": "succeeded",
        "Failed": "failed",
        "Aborted": "aborted",
        "Cancelled": "aborted",
        "Canceled": "aborted",
        "TimedOut": "timed_out",
    }
    in_progress: list[str] = ["", "Pending", "Queued", "Running"]

    @model_validator(mode="after")
    def _disjoint(self) -> OutcomeSource:
        both = sorted(set(self.phases) & set(self.in_progress))
        if both:
            raise ValueError(
                f"phase(s) {', '.join(repr(p) for p in both)} are both in 'phases' "
                "(finished) and 'in_progress'"
            )
        return self

    def outcome(self, phase: str) -> PlatformOutcome | None:
        """The record outcome of a finished phase; None while in progress or unknown."""
        return self.phases.get(phase)

    def classify(self, phase: str) -> PlatformOutcome | Literal["in_progress", "unknown"]:
        """`in_progress` (poll again), a record outcome, or `unknown` (the driver records
        `harness_error` with a note naming the phase)."""
        if phase in self.in_progress:
            return "in_progress"
        return self.phases.get(phase, "unknown")


class FieldSources(_Strict):
    """JSONPaths into the run's status: the poll response in http mode, the whole
    object in custom-resource mode (there, write `$.status...`). None = the field
    is not read from the status (the logs may still give it).

    The defaults follow the http contract the shipped profiles assume (the
    simulator's `GET /runs/{id}`, docs/simulator.md)."""

    outcome: OutcomeSource = OutcomeSource()
    iterations: JsonPathStr | None = "$.iterations"
    input_tokens: JsonPathStr | None = "$.tokensUsed.input"
    output_tokens: JsonPathStr | None = "$.tokensUsed.output"
    tools_called: JsonPathStr | None = "$.toolsCalled"
    duration_s: JsonPathStr | None = "$.durationSeconds"  # a number of seconds
    duration_ms: JsonPathStr | None = None  # a number of milliseconds
    # RFC 3339 timestamps, used when no duration is given
    started_at: JsonPathStr | None = None
    finished_at: JsonPathStr | None = None
    # the step's final output (review or summary) for the quality judges; when null
    # or absent, the harness reads `disk.output_files` in the run's output directory
    output_text: JsonPathStr | None = None

    def path(self, name: str) -> JsonPath | None:
        value = getattr(self, name)
        return None if value is None else JsonPath.parse(value)


def _compile(pattern: str, groups: tuple[str, ...]) -> str:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    missing = [g for g in groups if g not in compiled.groupindex]
    if missing:
        wanted = ", ".join(f"(?P<{g}>...)" for g in missing)
        raise ValueError(f"the pattern needs the named group(s) {wanted}")
    return pattern


# Default patterns: the documented messages (docs/reference.md §1-2), with the value either
# as a JSON field ("iteration":3), a logfmt pair (iteration=3) or a quoted value.
_NUM = r"""["']?\s*[:=]\s*["']?"""


class LogPatterns(_Strict):
    """Regexes (Python `re`, searched in each line) for the documented log lines."""

    llm_call_started: str = rf"LLM call started.*?\biteration{_NUM}(?P<iteration>\d+)"
    llm_response_input_tokens: str = (
        rf"LLM response received.*?\b(?:inputTokens|input_tokens|promptTokens){_NUM}"
        r"(?P<input_tokens>\d+)"
    )
    llm_response_output_tokens: str = (
        rf"LLM response received.*?\b(?:outputTokens|output_tokens|completionTokens){_NUM}"
        r"(?P<output_tokens>\d+)"
    )
    max_iterations: str = r"Step reached max iterations"
    body_bytes: str = rf"\bbodyBytes{_NUM}(?P<body_bytes>\d+)"
    # The `iteration` field counts from 1 (the first LLM call is iteration 1); with 0,
    # iterations used = max iteration + 1.
    iteration_base: Literal[0, 1] = 1

    @field_validator("llm_call_started")
    @classmethod
    def _iteration(cls, v: str) -> str:
        return _compile(v, ("iteration",))

    @field_validator("llm_response_input_tokens")
    @classmethod
    def _input(cls, v: str) -> str:
        return _compile(v, ("input_tokens",))

    @field_validator("llm_response_output_tokens")
    @classmethod
    def _output(cls, v: str) -> str:
        return _compile(v, ("output_tokens",))

    @field_validator("max_iterations")
    @classmethod
    def _max(cls, v: str) -> str:
        return _compile(v, ())

    @field_validator("body_bytes")
    @classmethod
    def _body(cls, v: str) -> str:
        return _compile(v, ("body_bytes",))


class PodSelector(_Strict):
    selector: Annotated[str, AfterValidator(_check_label_selector)]
    container: str | None = None  # None = the pod's first container


class Pods(_Strict):
    mcp_host: PodSelector = PodSelector(
        selector="app.kubernetes.io/name=mcp-host", container="mcp-host"
    )
    coordinator: PodSelector = PodSelector(
        selector="app.kubernetes.io/name=workflow-coordinator", container=None
    )
    # The platform creates an mcp-host pod per run: then the first run after a
    # configuration change also checks that pod's environment.
    mcp_host_per_run: bool = False


class PrometheusSource(_Strict):
    url: str = Field(default="http://127.0.0.1:9090", pattern=r"^https?://[^\s/]+(/\S*)?$")
    bearer_token_file: str | None = None
    scrape_interval_s: float = Field(default=15.0, gt=0, le=600)
    # PromQL label matchers (no braces) that pick the mcp-host's series, e.g.
    # namespace="clerum", container="mcp-host". Applied to the two counters, `up`
    # and `process_start_time_seconds`.
    selector: Annotated[str, AfterValidator(_check_prom_matchers)] = 'namespace="clerum"'
    query_timeout_s: float = Field(default=10.0, gt=0, le=300)
    verify_tls: bool = True


class DiskCheck(_Strict):
    """Where a run's output directory is, and the pod/container to exec into to list it."""

    output_dir: str = "/var/lib/clerum/runs/{run_id}"
    # A JSONPath into the run's status that names its output directory; when set and
    # present, it wins over `output_dir`.
    output_dir_path: JsonPathStr | None = None
    pod: PodSelector = PodSelector(selector="app.kubernetes.io/name=mcp-host", container="mcp-host")
    spill_name: str = ".spill"  # an entry whose name is or ends with this
    poll_interval_s: float = Field(default=2.0, gt=0, le=300)
    # The step's output files (relative to the output directory), read for the quality
    # judges when `fields.output_text` gives nothing; the first that exists is used.
    output_files: list[str] = ["review.md", "summary.md"]

    @field_validator("output_dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"the output directory must be an absolute path: {v!r}")
        _check_placeholders(v, DISK_PLACEHOLDERS)
        return v


class FixturesCheck(_Strict):
    """Where preflight finds the exported fixtures on the platform (`spillover-harness
    fixtures export`): a directory in a pod (files checked by SHA-256) and/or a
    ConfigMap (keys `<recipe>.<input>.sha256`). Neither set: preflight fails."""

    dir: str | None = None
    pod: PodSelector | None = None  # default: disk.pod
    configmap: str | None = None


class OperatorLocation(_Strict):
    """Where preflight looks for the running operator (its Deployment or pods)."""

    namespace: str = "spillover-system"
    selector: Annotated[str, AfterValidator(_check_label_selector)] = (
        "app.kubernetes.io/name=spillover-operator"
    )


class Profile(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    kube_context: str | None = None  # None = the current context
    namespace: str = "clerum"
    wrc: Wrc = Wrc()
    policy: str = "spillover"
    run: RunMode
    fields: FieldSources = FieldSources()
    logs: LogPatterns = LogPatterns()
    pods: Pods = Pods()
    prometheus: PrometheusSource = PrometheusSource()
    disk: DiskCheck = DiskCheck()
    fixtures: FixturesCheck = FixturesCheck()
    operator: OperatorLocation = OperatorLocation()
    # The mcp-host version Stage 1 records; null = the imageID of a running mcp-host pod.
    mcp_host_version: str | None = None
    # A kubectl binary for port-forward (run.access: port-forward).
    kubectl: str = "kubectl"

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not _DNS1123_LABEL.match(v):
            raise ValueError(f"not a valid namespace name: {v!r}")
        return v

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        if not _DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"not a valid SpilloverPolicy name: {v!r}")
        return v


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and the key."""


_RUN_TAGS = ("custom-resource", "http")


def _loc(err_loc: tuple[int | str, ...]) -> str:
    parts = list(err_loc)
    # The discriminated union puts the tag into the location: run.http.port -> run.port
    if len(parts) >= 2 and parts[0] == "run" and parts[1] in _RUN_TAGS:
        del parts[1]
    return ".".join(str(p) for p in parts) or "<top level>"


def parse_profile(data: object, *, source: str = "<profile>") -> Profile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: the profile must be a YAML mapping at the top level")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = _loc(err["loc"])
            kind = err["type"]
            if kind == "extra_forbidden":
                lines.append(f"{source}: unknown key '{loc}'")
            elif kind == "missing":
                lines.append(f"{source}: missing key '{loc}'")
            elif kind == "union_tag_invalid":
                lines.append(
                    f"{source}: key '{loc}.mode': unknown mode {err['ctx']['tag']!r} "
                    f"(known: {', '.join(_RUN_TAGS)})"
                )
            elif kind == "union_tag_not_found":
                lines.append(f"{source}: missing key '{loc}.mode' (one of: {', '.join(_RUN_TAGS)})")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                lines.append(f"{source}: key '{loc}': {msg} (got {err.get('input')!r})")
        raise ProfileError("\n".join(lines)) from None


def load_profile(path: Path | str) -> Profile:
    """Load a profile file. A bare name (`minikube`, `dev`) loads the shipped profile."""
    if isinstance(path, str) and path in DEFAULT_PROFILES:
        ref = resources.files("spillover_harness.profiles").joinpath(f"{path}.yaml")
        return parse_profile(_yaml(ref.read_text(encoding="utf-8"), str(ref)), source=str(ref))
    p = Path(path)
    if not p.exists():
        raise ProfileError(f"{p}: no such profile file (shipped: {', '.join(DEFAULT_PROFILES)})")
    return parse_profile(_yaml(p.read_text(encoding="utf-8"), str(p)), source=str(p))


def _yaml(text: str, source: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source}: not valid YAML: {exc}") from None
