"""The cluster profile: how the harness reaches the platform in stages `minikube` and `dev`.

A YAML file says where things are (namespace, the WRC Deployment, the policy), how
a recipe run is started and followed (a custom resource, or an HTTP execute
endpoint), where every recorded field comes from (JSONPaths into the run's status
or response, regexes for the documented log lines), which pods to read logs from,
where Prometheus is, and where to look for `.spill` entries. Defaults come from
docs/reference.md §1; `docs/cluster-profile.md` lists every assumption behind them.

Validated like the matrix: a wrong key or type raises `ProfileError` naming the
file and the key.

Modules: `model` (the schema), `load` (files and errors), `jsonpath` (the JSONPath
engine), `template` (run templates and their placeholders), `validators` (names,
selectors, matchers, regexes). The profiles shipped as data are in `shipped/`.
"""

from __future__ import annotations

from spillover_harness.profile.jsonpath import JsonPath
from spillover_harness.profile.load import (
    DEFAULT_PROFILES,
    ProfileError,
    load_profile,
    parse_profile,
    with_kubectl,
)
from spillover_harness.profile.model import (
    CustomResourceRun,
    DiskCheck,
    FieldSources,
    FixturesCheck,
    HttpRun,
    LogPatterns,
    MemoryQueries,
    OperatorLocation,
    OutcomeSource,
    PlatformCommand,
    PlatformOutcome,
    Pods,
    PodSelector,
    Profile,
    PrometheusSource,
    RunMode,
    Stage1Lane,
    VersionSource,
    Wrc,
)
from spillover_harness.profile.template import (
    DISK_PLACEHOLDERS,
    POLL_PLACEHOLDERS,
    RUN_PLACEHOLDERS,
    render_template,
)
from spillover_harness.profile.validators import JsonPathStr

__all__ = [
    "DEFAULT_PROFILES",
    "DISK_PLACEHOLDERS",
    "POLL_PLACEHOLDERS",
    "RUN_PLACEHOLDERS",
    "CustomResourceRun",
    "DiskCheck",
    "FieldSources",
    "FixturesCheck",
    "HttpRun",
    "JsonPath",
    "JsonPathStr",
    "LogPatterns",
    "MemoryQueries",
    "OperatorLocation",
    "OutcomeSource",
    "PlatformCommand",
    "PlatformOutcome",
    "PodSelector",
    "Pods",
    "Profile",
    "ProfileError",
    "PrometheusSource",
    "RunMode",
    "Stage1Lane",
    "VersionSource",
    "Wrc",
    "load_profile",
    "parse_profile",
    "render_template",
    "with_kubectl",
]
