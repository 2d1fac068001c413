"""The profile's schema (pydantic, strict, frozen): every key, its type and default.

Defaults come from docs/reference.md §1; docs/cluster-profile.md lists every
assumption behind them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from spillover_operator.domain.quoting import shorten

from spillover_harness.profile.jsonpath import JsonPath
from spillover_harness.profile.template import (
    DISK_PLACEHOLDERS,
    POLL_PLACEHOLDERS,
    RUN_PLACEHOLDERS,
    check_placeholders,
)
from spillover_harness.profile.validators import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    JsonPathStr,
    LabelSelector,
    PromMatchers,
    compile_pattern,
)

__all__ = [
    "CustomResourceRun",
    "DiskCheck",
    "FieldSources",
    "FixturesCheck",
    "HttpRun",
    "LogPatterns",
    "MemoryQueries",
    "OperatorLocation",
    "OutcomeSource",
    "PlatformCommand",
    "PlatformOutcome",
    "PodSelector",
    "Pods",
    "Profile",
    "PrometheusSource",
    "RunMode",
    "Stage1Lane",
    "VersionSource",
    "Wrc",
]

# Outcomes a platform phase may map to (harness_error is the harness's own).
PlatformOutcome = Literal["succeeded", "failed", "aborted", "timed_out"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Wrc(_Strict):
    """The workflow-recipe controller Deployment that carries the spillover variables."""

    deployment: str = "workflow-recipe-controller"
    container: str | None = None  # None = the Deployment's first container

    @field_validator("deployment")
    @classmethod
    def _dns_name(cls, v: str) -> str:
        if len(v) > 253 or not DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"not a valid Deployment name: {shorten(v)}")
        return v

    @field_validator("container")
    @classmethod
    def _dns_label(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 63 or not DNS1123_LABEL.match(v)):
            raise ValueError(f"not a valid container name: {shorten(v)}")
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
        check_placeholders(v, RUN_PLACEHOLDERS)
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
        check_placeholders(v, RUN_PLACEHOLDERS)
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
        if len(v) > 63 or not DNS1123_LABEL.match(v):
            raise ValueError(f"not a valid Service name: {shorten(v)}")
        return v

    @field_validator("execute_path", "body")
    @classmethod
    def _run_placeholders(cls, v: Any) -> Any:
        check_placeholders(v, RUN_PLACEHOLDERS)
        return v

    @field_validator("poll_path", "logs_path", "cancel_path")
    @classmethod
    def _poll_placeholders(cls, v: str | None) -> str | None:
        if v is not None:
            check_placeholders(v, POLL_PLACEHOLDERS)
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
    # the name of the mcp-host pod that served the run, when the platform says it
    mcp_host_pod: JsonPathStr | None = None
    # the step's final output (review or summary) for the quality judges; when null
    # or absent, the harness reads `disk.output_files` in the run's output directory
    output_text: JsonPathStr | None = None

    def path(self, name: str) -> JsonPath | None:
        value = getattr(self, name)
        return None if value is None else JsonPath.parse(value)


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
    # Lines that count one stored result / one read-back each (the mcp-host's messages).
    # None: the logs do not carry them, and the Prometheus counters give the counts
    # (only for a run no other run of the recipe overlapped: docs/harness.md).
    spill_persisted: str | None = r"spillover result persisted"
    spill_read: str | None = r"spillover read\b"
    # The warning the mcp-host logs once per step execution when the step's budget is
    # full (the record's `budget_inline`: 1 when seen; 0 only when the input could not
    # fill the budget, else null: collectors/logs.budget_reached). None: the logs are
    # not read for it. The platform's message is not documented: the default
    # matches the simulator's "spillover budget reached" (check it on one real run).
    budget_inline: str | None = r"spillover budget reached"
    # The run id a line carries (group `run_id`): lines of other runs are told apart
    # from unattributed ones, and another run in our window means an overlap.
    run_id: str = (
        r"""\b(?:runId|run_id)["']?\s*[:=]\s*["']?(?P<run_id>[A-Za-z0-9][A-Za-z0-9._-]*)"""
    )
    # The `iteration` field counts from 1 (the first LLM call is iteration 1); with 0,
    # iterations used = max iteration + 1.
    iteration_base: Literal[0, 1] = 1

    @field_validator("llm_call_started")
    @classmethod
    def _iteration(cls, v: str) -> str:
        return compile_pattern(v, ("iteration",))

    @field_validator("llm_response_input_tokens")
    @classmethod
    def _input(cls, v: str) -> str:
        return compile_pattern(v, ("input_tokens",))

    @field_validator("llm_response_output_tokens")
    @classmethod
    def _output(cls, v: str) -> str:
        return compile_pattern(v, ("output_tokens",))

    @field_validator("max_iterations")
    @classmethod
    def _max(cls, v: str) -> str:
        return compile_pattern(v, ())

    @field_validator("body_bytes")
    @classmethod
    def _body(cls, v: str) -> str:
        return compile_pattern(v, ("body_bytes",))

    @field_validator("spill_persisted", "spill_read", "budget_inline")
    @classmethod
    def _spill(cls, v: str | None) -> str | None:
        return None if v is None else compile_pattern(v, ())

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str) -> str:
        return compile_pattern(v, ("run_id",))


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class PodSelector(_Strict):
    selector: LabelSelector
    container: str | None = None  # None = the pod's first container


class Pods(_Strict):
    mcp_host: PodSelector = PodSelector(
        selector="app.kubernetes.io/name=mcp-host", container="mcp-host"
    )
    coordinator: PodSelector = PodSelector(
        selector="app.kubernetes.io/name=workflow-coordinator", container=None
    )
    # A label whose value is the recipe's name on its mcp-host pods: the pods of a
    # recipe are then `mcp_host.selector` + `<recipe_label>=<recipe>`. None: every pod
    # the selector matches serves every recipe.
    recipe_label: str | None = None
    # How long the stage waits for every mcp-host pod of a recipe to carry the
    # configuration (the operator's refresh, the WRC's rollout) before it stops.
    current_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    # Kept so that older profiles load: the pods are always checked now (before each
    # configuration's first run and after every run), whatever this says.
    mcp_host_per_run: bool = False

    @field_validator("recipe_label")
    @classmethod
    def _label_key(cls, v: str | None) -> str | None:
        if v is not None and not _LABEL_KEY.match(v):
            raise ValueError(f"not a valid label key: {shorten(v)}")
        return v

    def mcp_host_selector(self, recipe: str) -> str:
        """The selector of the mcp-host pods that serve `recipe`."""
        if self.recipe_label is None:
            return self.mcp_host.selector
        return f"{self.mcp_host.selector},{self.recipe_label}={recipe}"


class PrometheusSource(_Strict):
    url: str = Field(default="http://127.0.0.1:9090", pattern=r"^https?://[^\s/]+(/\S*)?$")
    bearer_token_file: str | None = None
    scrape_interval_s: float = Field(default=15.0, gt=0, le=600)
    # PromQL label matchers (no braces) that pick the mcp-host's series, e.g.
    # namespace="clerum", container="mcp-host". Applied to the two counters, `up`
    # and `process_start_time_seconds`.
    selector: PromMatchers = 'namespace="clerum"'
    query_timeout_s: float = Field(default=10.0, gt=0, le=300)
    verify_tls: bool = True


_MEMORY_PLACEHOLDERS = frozenset({"namespace", "pods", "container", "window"})
_SEL = 'namespace="$namespace", pod=~"$pods", container="$container"'


class MemoryQueries(_Strict):
    """PromQL the cluster stages evaluate at each configuration block's end for the
    mcp-host's memory (docs/cluster-profile.md, "memory"). Each query must give one
    number (a one-sample vector or a scalar); an empty answer is "not measured". The
    harness fills in `$namespace` (the profile's), `$pods` (a regex of the mcp-host pods
    that served the block's runs), `$container` (pods.mcp_host.container) and `$window`
    (the block's length as a range, e.g. `95s`). `working_set` is evaluated at the
    block's start and at its end: their difference is the leak figure. A query set to
    null is not run (its figure is not measured). The defaults read cAdvisor through the kubelet
    (`container_memory_working_set_bytes`) and kube-state-metrics."""

    source: Literal["prometheus", "none"] = "prometheus"
    # Where restarts and OOM kills come from: `prometheus` (the queries below, over
    # kube-state-metrics), or `pod-status`: the mcp-host pods' own status
    # (containerStatuses: restartCount, lastState OOMKilled), read through the API at
    # the block's start and end, for clusters without kube-state-metrics (Minikube,
    # the local cluster); the two queries are then not run.
    restarts_from: Literal["prometheus", "pod-status"] = "prometheus"
    peak_working_set: str = (
        f"max(max_over_time(container_memory_working_set_bytes{{{_SEL}}}[$window]))"
    )
    limit: str | None = f'min(kube_pod_container_resource_limits{{{_SEL}, resource="memory"}})'
    restarts: str | None = (
        f"sum(max_over_time(kube_pod_container_status_restarts_total{{{_SEL}}}[$window])"
        f" - min_over_time(kube_pod_container_status_restarts_total{{{_SEL}}}[$window]))"
    )
    oom_kills: str | None = (
        f"sum((max_over_time(kube_pod_container_status_restarts_total{{{_SEL}}}[$window])"
        f" - min_over_time(kube_pod_container_status_restarts_total{{{_SEL}}}[$window]))"
        " * on(namespace, pod, container) max by (namespace, pod, container)"
        " (max_over_time(kube_pod_container_status_last_terminated_reason"
        f'{{{_SEL}, reason="OOMKilled"}}[$window])))'
        # no OOMKilled series but the restarts known: 0, not "not measured"
        f" or (0 * sum(max_over_time(kube_pod_container_status_restarts_total{{{_SEL}}}[$window])))"
    )

    working_set: str | None = f"sum(container_memory_working_set_bytes{{{_SEL}}})"

    @field_validator("peak_working_set", "limit", "restarts", "oom_kills", "working_set")
    @classmethod
    def _placeholders(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.strip():
            raise ValueError("a query cannot be empty (null: not measured)")
        unknown = sorted(set(_template_names(v)) - _MEMORY_PLACEHOLDERS)
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {', '.join('$' + u for u in unknown)}; allowed: "
                + ", ".join("$" + p for p in sorted(_MEMORY_PLACEHOLDERS))
            )
        return v


def _template_names(text: str) -> list[str]:
    """The `$name` placeholders of a query (`string.Template` syntax; `$$` is a `$`)."""
    from string import Template

    return [
        m.group("named") or m.group("braced")
        for m in Template.pattern.finditer(text)
        if m.group("named") or m.group("braced")
    ]


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
            raise ValueError(f"the output directory must be an absolute path: {shorten(v)}")
        check_placeholders(v, DISK_PLACEHOLDERS)
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
    selector: LabelSelector = "app.kubernetes.io/name=spillover-operator"


class PlatformCommand(_Strict):
    """One of the platform's own commands (argv, no shell), run in `Stage1Lane.workdir`."""

    name: str = Field(min_length=1)
    argv: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=3600.0, gt=0, le=24 * 3600)

    @field_validator("argv")
    @classmethod
    def _program_named(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("argv[0] is empty: name the program to run (e.g. [make, minikube-t2])")
        return v


class Stage1Lane(_Strict):
    """The platform's own T2 lane (e.g. `make minikube-t2-preflight`, `make minikube-t2`),
    run first by stage `minikube`; its verdict and the exact head of `workdir` (git
    HEAD) go into stage.json and the report. Any command failing stops the stage."""

    workdir: str | None = None  # the platform's checkout (None: the current directory)
    commands: list[PlatformCommand] = Field(min_length=1)


class VersionSource(_Strict):
    """Where the mcp-host version that gates Stage 2 comes from, so that a
    Minikube-built image and the registry image of the same commit match:

    - `image_digest`: the `sha256:...` digest of the mcp-host container's imageID
      (the registry part left out);
    - `pod_label` / `pod_annotation`: that label or annotation (`key`) of the newest
      live mcp-host pod, e.g. the commit the image was built from;
    - `endpoint`: GET `url`; the body (or the string at `json_path` in it).
    """

    kind: Literal["image_digest", "pod_label", "pod_annotation", "endpoint"] = "image_digest"
    key: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    json_path: JsonPathStr | None = None

    @model_validator(mode="after")
    def _needs(self) -> VersionSource:
        if self.kind in ("pod_label", "pod_annotation") and not self.key:
            raise ValueError(f"kind {self.kind} needs `key` (the label or annotation)")
        if self.kind == "endpoint" and not self.url:
            raise ValueError("kind endpoint needs `url`")
        return self


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
    # the mcp-host's memory, restarts and OOM kills per configuration block
    memory: MemoryQueries = MemoryQueries()
    disk: DiskCheck = DiskCheck()
    fixtures: FixturesCheck = FixturesCheck()
    operator: OperatorLocation = OperatorLocation()
    # The mcp-host version Stage 1 records; null = the imageID of a running mcp-host pod.
    mcp_host_version: str | None = None
    # Where the version comes from when mcp_host_version is null (default: the imageID).
    mcp_host_version_source: VersionSource | None = None
    # Stage minikube: the platform's own T2 preflight/lane commands, run first.
    stage1_lane: Stage1Lane | None = None
    # The mcp-host is the simulator (the local real-node cluster's stand-ins): the stage's
    # verdict is the simulator's, so the report says so and apply-decision and the Stage 2
    # gate refuse it as they refuse stage sim's (stage.json: driver.simulated_platform).
    simulated_platform: bool = False
    # A kubectl binary for port-forward (run.access: port-forward).
    kubectl: str = "kubectl"

    @field_validator("kubectl")
    @classmethod
    def _kubectl(cls, v: str) -> str:
        if not v.strip():
            raise ValueError(
                "an empty command: name the kubectl binary (e.g. kubectl, or its full path), "
                "or leave the key out for the default kubectl"
            )
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if len(v) > 63 or not DNS1123_LABEL.match(v):
            raise ValueError(f"not a valid namespace name: {shorten(v)}")
        return v

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        if len(v) > 253 or not DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"not a valid SpilloverPolicy name: {shorten(v)}")
        return v
