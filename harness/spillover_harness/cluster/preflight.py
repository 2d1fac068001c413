"""Preflight: what must hold before a cluster stage spends runs, as a checklist.

Each check gives ✔ or ✘ with a one-line detail, and each failure its fix. Checks
that depend on a failed one are reported as ✘ "not checked: <what failed>".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spillover_operator.client import (
    ApiError,
    ClientError,
    Connection,
    CustomResource,
    find_deployment,
    get_config_map,
    get_policy,
    is_served,
    list_deployments,
    policy_crd_installed,
    server_version,
)
from spillover_operator.domain.assess import assess
from spillover_operator.domain.envplan import passthrough_names
from spillover_operator.domain.model import COND_READY, PASSTHROUGH_VAR, SPILLOVER_VARS
from spillover_operator.domain.resource import GROUP, PLURAL
from spillover_operator.observed import env_in_effect

from spillover_harness.cluster.kubeconn import (
    ClusterStageError,
    Target,
    connect_profile,
    context_for,
)
from spillover_harness.cluster.observe import exec_sh, name_of, pick_pod, running_pods
from spillover_harness.cluster.starters import HttpStarter, KubectlNotRunnable, StartError
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.fixtures import FixtureSet
from spillover_harness.plan.matrix import Matrix
from spillover_harness.profile import HttpRun, Profile


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def lines(self) -> list[str]:
        mark = "✔" if self.ok else "✘"
        out = [f"{mark} {self.name}: {self.detail}"]
        if not self.ok and self.fix:
            out.append(f"    fix: {self.fix}")
        return out


@dataclass
class PreflightResult:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def render(self) -> str:
        lines = [line for c in self.checks for line in c.lines()]
        failed = [c.name for c in self.checks if not c.ok]
        lines.append("preflight passed" if not failed else f"preflight FAILED: {', '.join(failed)}")
        return "\n".join(lines)


def _digest_files(fixtures: FixtureSet) -> dict[str, str]:
    """relative path under the export dir -> sha256 (as `fixtures export` writes them)."""
    out: dict[str, str] = {}
    for fixture in fixtures:
        for rel, text in fixture.files.items():
            path = f"{fixture.recipe}/{fixture.input_name}/{rel}"
            out[path] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return out


def run_preflight(
    profile: Profile,
    target: Target,
    stage: str,
    matrix: Matrix,
    fixtures: FixtureSet,
) -> PreflightResult:
    checks: list[Check] = []
    add = checks.append
    context = context_for(profile, target)

    # 1. kube context / minikube profile
    try:
        cluster = connect_profile(profile, target)
    except ClusterStageError as exc:
        add(
            Check(
                "kube context",
                False,
                str(exc),
                "start the cluster (`minikube start -p PROFILE`) or pass --context/--kubeconfig",
            )
        )
        return PreflightResult(checks)
    ctx_ok = True
    if stage == "minikube" and context is not None and cluster.context != context:
        ctx_ok = False
    if stage == "minikube" and context is None:
        ctx_ok = False
    add(
        Check(
            "kube context",
            ctx_ok and _reachable(cluster),
            f"{cluster.where}"
            + ("" if ctx_ok else " (stage minikube needs the context named by MINIKUBE_PROFILE)"),
            "MINIKUBE_PROFILE=<profile>: `minikube start -p <profile>` then pass "
            "--context <profile> (make ... MINIKUBE_PROFILE=<profile>)",
        )
    )
    if not checks[-1].ok:
        return PreflightResult(checks)

    ns = profile.namespace

    # 2. CRD
    crd_ok = policy_crd_installed(cluster)
    add(
        Check(
            "SpilloverPolicy CRD",
            crd_ok,
            f"{PLURAL}.{GROUP} is {'served' if crd_ok else 'NOT installed'}",
            "kubectl apply -k manifests/crd (cluster-admin), or `make deploy`",
        )
    )

    # 3. operator
    add(_operator_check(cluster, profile.operator.namespace, profile.operator.selector))

    # 4. policy Ready
    policy = None
    if crd_ok:
        try:
            policy = get_policy(cluster, profile.policy)
        except ClientError as exc:
            add(
                Check(
                    "policy",
                    False,
                    exc.message,
                    f"kubectl apply -f manifests/samples/default.yaml -n {ns}",
                )
            )
    else:
        add(Check("policy", False, "not checked: the CRD is missing", "install the CRD first"))
    if policy is not None:
        report = assess(policy, _find_wrc(cluster, profile.wrc.deployment))
        ready = report.condition(COND_READY)
        current = report.observed_generation == report.generation
        ok = bool(ready and ready.get("status") == "True" and current)
        add(
            Check(
                "policy",
                ok,
                f"SpilloverPolicy {ns}/{profile.policy}: Ready="
                f"{ready.get('status') if ready else 'unknown'}"
                f"{'' if not ready else ' (' + str(ready.get('reason')) + ')'}, generation "
                f"{report.generation}, observed {report.observed_generation}",
                f"`spilloverctl -n {ns} status {profile.policy}` says why; "
                "is the operator running?",
            )
        )

    # 5. WRC and passthrough
    try:
        env = env_in_effect(cluster, profile.wrc.deployment, profile.wrc.container)
        names = passthrough_names(env.get(PASSTHROUGH_VAR))
        missing = [v for v in SPILLOVER_VARS if v not in names]
        add(
            Check(
                "WRC passthrough",
                not missing,
                f"Deployment {ns}/{profile.wrc.deployment} {PASSTHROUGH_VAR} "
                + (
                    "forwards the three spillover variables"
                    if not missing
                    else f"lacks {', '.join(missing)}"
                ),
                "the operator appends them when it applies the policy: check the policy "
                "targets this "
                "Deployment and the operator is running (`spilloverctl status`)",
            )
        )
    except ClientError as exc:
        add(
            Check(
                "WRC passthrough",
                False,
                exc.message,
                "set wrc.deployment / wrc.container in the profile",
            )
        )

    # 6. recipes reachable
    add(_recipes_check(profile, target, cluster))

    # 7. Prometheus
    ok, message = PrometheusCollector.from_profile(profile.prometheus).probe()
    add(
        Check(
            "Prometheus",
            ok,
            message,
            f"port-forward Prometheus to {profile.prometheus.url} and check it scrapes "
            "the mcp-host "
            f"({profile.prometheus.selector}); see docs/cluster-profile.md",
        )
    )

    # 8. fixtures
    add(_fixtures_check(profile, cluster, fixtures, matrix))
    return PreflightResult(checks)


def _reachable(cluster: Connection) -> bool:
    try:
        server_version(cluster)
    except ClientError:
        return False
    return True


def _find_wrc(cluster: Connection, name: str) -> dict[str, Any] | None:
    """The WRC Deployment for the policy check (a failure to read it is reported by the
    passthrough check, which reads it again)."""
    try:
        return find_deployment(cluster, name)
    except ClientError:
        return None


def _operator_check(cluster: Connection, namespace: str, selector: str) -> Check:
    fix = (
        f"deploy it (`make deploy` / `make deploy-minikube`) and check "
        f"`kubectl -n {namespace} get pods -l {selector}`"
    )
    try:
        deps = list_deployments(cluster.in_namespace(namespace), selector)
        pods = running_pods(cluster, namespace, selector)
    except Exception as exc:
        return Check(
            "operator", False, f"cannot look in namespace {namespace}: {type(exc).__name__}", fix
        )
    available = [d for d in deps if ((d.get("status") or {}).get("availableReplicas") or 0) >= 1]
    ready = [
        p
        for p in pods
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]
    if available or ready:
        what = name_of(available[0]) if available else name_of(ready[0])
        return Check("operator", True, f"{namespace}/{what} is running")
    return Check(
        "operator", False, f"no available operator ({selector}) in namespace {namespace}", fix
    )


def _recipes_check(profile: Profile, target: Target, cluster: Connection) -> Check:
    run = profile.run
    if isinstance(run, HttpRun):
        starter = HttpStarter(profile, target, cluster)
        try:
            # any HTTP answer means the endpoint is there: a 404 for an unknown run is fine
            status = starter.probe()
        except KubectlNotRunnable as exc:
            return Check(
                "recipes",
                False,
                f"execute endpoint svc/{run.service}:{run.port} ({run.access}) not reached: {exc}",
                "name a kubectl that runs: --kubectl PATH (the make targets pass the one "
                "`make kubectl` builds) or the profile's `kubectl` key",
            )
        except StartError as exc:
            return Check(
                "recipes",
                False,
                f"execute endpoint svc/{run.service}:{run.port} ({run.access}) unreachable: {exc}",
                "check the Service and its pods, and the profile's run.service/run.port",
            )
        finally:
            starter.close()
        ok = status < 500
        return Check(
            "recipes",
            ok,
            f"execute endpoint svc/{run.service}:{run.port} answers "
            f"(HTTP {status} for an unknown run)",
            "the WRC answers with a server error: look at its logs",
        )
    resource = CustomResource(run.group, run.version, run.plural, run.kind)
    try:
        served = is_served(cluster.in_namespace(profile.namespace), resource)
        problem = "" if served else "the API server does not serve it"
    except ApiError as exc:
        served, problem = False, exc.message
    if not served:
        return Check(
            "recipes",
            False,
            f"{run.kind} ({run.api_version}) not served: {problem}",
            "install the platform's recipe CRD, or fix run.api_version/plural in the profile",
        )
    return Check(
        "recipes", True, f"{run.kind} ({run.api_version}) is served in {profile.namespace}"
    )


_SHA = 'cd "$1" 2>/dev/null || { echo MISSING; exit 0; }; find . -type f -exec sha256sum {} +'


def matrix_fixtures(fixtures: FixtureSet, matrix: Matrix) -> tuple[FixtureSet, bool]:
    """The inputs this matrix runs (the harness generates more: `budget`), those built
    on first use too (`budget-16MiB`: built here when the matrix names it), and whether
    it names one of those (its export then needs `fixtures export --all`)."""
    cells = {(recipe.name, spec.name) for recipe, spec in matrix.cells()}
    wanted = {k: fixtures.get(*k) for k in sorted(fixtures.inputs()) if k in cells}
    return FixtureSet(seed=fixtures.seed, fixtures=wanted), bool(cells & set(fixtures.lazy))


def _fixtures_check(
    profile: Profile, cluster: Connection, fixtures: FixtureSet, matrix: Matrix
) -> Check:
    cfg = profile.fixtures
    fixtures, lazy = matrix_fixtures(fixtures, matrix)
    fix = (
        f"`spillover-harness fixtures export DIR --seed {matrix.seed}{' --all' if lazy else ''}`"
        " and load DIR into the recipes "
        "(fixtures.dir / fixtures.configmap in the profile say where)"
    )
    want = _digest_files(fixtures)
    if cfg.dir is None and cfg.configmap is None:
        return Check(
            "fixtures",
            False,
            "the profile says nowhere to find them (fixtures.dir or fixtures.configmap)",
            fix,
        )
    problems: list[str] = []
    if cfg.dir is not None:
        where = pick_pod(cluster, profile.namespace, cfg.pod or profile.disk.pod)
        if isinstance(where, str):
            problems.append(where)
        else:
            pod, container = where
            try:
                out = exec_sh(cluster, profile.namespace, pod, container, _SHA, cfg.dir)
            except Exception as exc:
                problems.append(f"exec in {pod} failed: {type(exc).__name__}")
            else:
                if out.strip() == "MISSING":
                    problems.append(f"{cfg.dir} does not exist in pod {pod}")
                else:
                    have = {}
                    for line in out.splitlines():
                        parts = line.split(None, 1)
                        if len(parts) == 2:
                            have[parts[1].strip().removeprefix("./")] = parts[0]
                    bad = sorted(p for p, h in want.items() if have.get(p) != h)
                    if bad:
                        problems.append(
                            f"{len(bad)} of {len(want)} files missing or different under {cfg.dir} "
                            f"in pod {pod} (e.g. {bad[0]})"
                        )
    if cfg.configmap is not None:
        try:
            cm = get_config_map(cluster.in_namespace(profile.namespace), cfg.configmap)
            data = cm.get("data") or {}
            for f in fixtures:
                key = f"{f.recipe}.{f.input_name}.sha256"
                digest = hashlib.sha256(
                    "".join(
                        f"{p}\n{want[f'{f.recipe}/{f.input_name}/{p}']}\n" for p in sorted(f.files)
                    ).encode()
                ).hexdigest()
                if data.get(key) != digest:
                    problems.append(f"ConfigMap {cfg.configmap}: {key} missing or different")
        except Exception as exc:
            problems.append(f"ConfigMap {cfg.configmap}: {type(exc).__name__}")
    if problems:
        return Check("fixtures", False, "; ".join(problems), fix)
    return Check(
        "fixtures", True, f"the {len(want)} fixture files of seed {matrix.seed} are loaded"
    )


def failing_names(result: PreflightResult) -> list[str]:
    return [c.name for c in result.checks if not c.ok]


Printer = Callable[[str], None]
