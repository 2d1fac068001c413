"""Two operators on one namespace: one leads, the other waits (issue 19, item 4).

On the local control plane (real API server, kube-controller-manager, kwok):

- the election itself (`handlers.election.Elector`) against the real Lease API: who
  gets it, the write gate, a take-over after the duration (a clock of the test's),
  losing it, releasing it;
- two real operator processes (`kopf run`, each as the ServiceAccount of
  manifests/base) on one namespace, the recipe pods refreshed `OnKillSwitch`: over kill
  and restore flips every recipe Deployment is restarted at most once per change, the
  Events of a change are not doubled, the policy's Ready does not flap; then the leader
  is killed (SIGKILL) and the standby takes over and applies the next change.

No timing is asserted: the failover time is printed (`failover_s`), and docs/operator.md
gives the measured figure.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    condition,
    connection,
    container_manifest,
    deployment_manifest,
    env_map,
    is_ready,
    model,
    policy_manifest,
    read_deployment,
    read_policy,
    wait_for,
)
from kopf_operator import OperatorProcess
from kubernetes import client, watch
from spillover_operator import exit_codes
from spillover_operator.cli.main import run
from spillover_operator.client import (
    WriteRefused,
    config_map_lookup,
    find_lease,
    list_pods,
    post_event,
)
from spillover_operator.domain import leadership
from spillover_operator.domain.allowlist import REFRESH_DEPLOYMENTS_VAR
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR, SPILLOVER_VARS
from spillover_operator.domain.resolved_env import resolve
from spillover_operator.domain.resource import GROUP, PLURAL, VERSION
from spillover_operator.handlers.election import Elector, LeadershipLost
from spillover_operator.handlers.metrics import Metrics
from wrc_stand_in import WrcStandIn

pytestmark = pytest.mark.integration

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
REFRESH_COMPONENT = BASE.parent / "components" / "recipe-pods-refresh"
RECIPE_DEPLOYMENTS = ("mcp-host-r1", "mcp-host-r2", "mcp-host-r3")
WRC = "workflow-recipe-controller"
SELECTOR = "app.kubernetes.io/name=mcp-host"
REVISION = "deployment.kubernetes.io/revision"
WAIT = 120.0
FLIPS = 3  # kill + restore each


class Clock:
    """A monotonic clock the test moves (the standby's view of time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- the election on the real Lease API ---------------------------------------------


def test_one_elector_leads_the_other_waits_and_its_writes_are_refused(
    admin: client.ApiClient, namespace: str
) -> None:
    conn = connection(admin, namespace)
    a = Elector(conn, [namespace], "op-a", Metrics.for_process())
    b_metrics = Metrics.for_process()
    b = Elector(conn, [namespace], "op-b", b_metrics)
    assert a.try_acquire()
    assert not b.try_acquire()
    lease = find_lease(conn, leadership.LEASE_NAME)
    assert lease is not None and lease["spec"]["holderIdentity"] == "op-a"
    assert b_metrics.leader.labels(namespace)._value.get() == 0
    assert a.metrics is not None and a.metrics.leader.labels(namespace)._value.get() == 1
    ok, why = b.standby_health()
    assert ok and "op-a leads" in why
    elected = client.CoreV1Api(admin).list_namespaced_event(
        namespace, field_selector="reason=LeaderElected"
    )
    assert [e.involved_object.name for e in elected.items] == [leadership.LEASE_NAME]

    # A write through a connection gated on the standby never reaches the API server.
    gated = conn.__class__(**{**conn.__dict__, "write_gate": lambda: b.gate(wait=0.2)})
    with pytest.raises(WriteRefused, match="not the confirmed leader"):
        post_event(gated, lease, "Normal", "FromTheStandby", "must not be posted")
    posted = client.CoreV1Api(admin).list_namespaced_event(
        namespace, field_selector="reason=FromTheStandby"
    )
    assert not posted.items
    a.gate(wait=0)  # the leader's passes at once


def test_a_standby_takes_over_a_lease_not_renewed_for_its_duration(
    admin: client.ApiClient, namespace: str
) -> None:
    conn = connection(admin, namespace)
    a_clock, b_clock = Clock(), Clock()
    lost: list[str] = []
    a = Elector(conn, [namespace], "op-a", clock=a_clock, on_lost=lost.append)
    b = Elector(conn, [namespace], "op-b", clock=b_clock)
    assert a.try_acquire()
    assert not b.try_acquire()
    assert a.renew()  # a renewal: the standby's wait starts again at its next read
    b_clock.now += leadership.DURATION_SECONDS
    assert not b.try_acquire()
    # The leader stops renewing (stalled): past its deadline it no longer trusts itself.
    a_clock.now += leadership.RENEW_DEADLINE_SECONDS
    assert not a.confirmed()
    with pytest.raises(WriteRefused):
        a.gate(wait=0)
    b_clock.now += leadership.DURATION_SECONDS
    assert b.try_acquire()
    lease = find_lease(conn, leadership.LEASE_NAME)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "op-b"
    assert lease["spec"]["leaseTransitions"] == 1
    # The old leader finds out at its next renewal: it ends (the operator exits).
    with pytest.raises(LeadershipLost, match="held by op-b"):
        a.renew()
    a.stopped = False
    a.leading = True
    a_clock.now += 1
    thread = a.start_keeping()
    with a.cond:
        a.cond.notify_all()
    thread.join(timeout=leadership.RENEW_SECONDS + 10)
    assert lost and "held by op-b" in lost[0]
    assert not a.confirmed()


def test_kopf_s_own_event_is_not_posted_once_the_lease_may_have_passed(
    control_plane: LocalCluster,
    admin: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf posts Events (and patches) through the session main.py's login gives it:
    the deposed leader's Event never reaches the API server after the new leader's."""
    import asyncio

    import kopf
    from spillover_operator.handlers.election import WriteGateClosed, gated_session

    conn = connection(admin, namespace)
    a_clock, b_clock = Clock(), Clock()
    a = Elector(conn, [namespace], "op-a", clock=a_clock)
    b = Elector(conn, [namespace], "op-b", clock=b_clock)
    assert a.try_acquire()
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    settings = kopf.OperatorSettings()
    info = kopf.login_with_kubeconfig(logger=logging.getLogger("test"), settings=settings)
    assert info is not None

    def event(reason: str) -> dict[str, Any]:
        return {
            "metadata": {"generateName": "kopf-"},
            "involvedObject": {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "name": leadership.LEASE_NAME,
                "namespace": namespace,
            },
            "reason": reason,
            "message": reason,
            "type": "Normal",
        }

    async def post(reason: str) -> str:
        session: Any = gated_session(info, lambda: lambda: a.gate(wait=0)).aiohttp_session
        url = f"{info.server.rstrip('/')}/api/v1/namespaces/{namespace}/events"
        try:
            async with session.post(url, json=event(reason)) as response:
                return str(response.status)
        except WriteGateClosed as exc:
            return f"refused: {exc}"
        finally:
            await session.close()

    assert asyncio.run(post("FromTheLeader")) == "201"
    # a stalls past its renew deadline; b takes the Lease after its duration.
    a_clock.now += leadership.RENEW_DEADLINE_SECONDS
    assert not b.try_acquire()
    b_clock.now += leadership.DURATION_SECONDS
    assert b.try_acquire()
    answer = asyncio.run(post("FromTheDeposedLeader"))
    assert answer.startswith("refused: ") and "not the confirmed leader" in answer
    reasons = [e.reason for e in client.CoreV1Api(admin).list_namespaced_event(namespace).items]
    assert "FromTheLeader" in reasons and "FromTheDeposedLeader" not in reasons


def test_a_released_lease_is_taken_at_the_standby_s_next_read(
    admin: client.ApiClient, namespace: str
) -> None:
    conn = connection(admin, namespace)
    a = Elector(conn, [namespace], "op-a")
    b = Elector(conn, [namespace], "op-b")
    c = Elector(conn, [namespace], "op-c")
    assert a.try_acquire()
    assert not b.try_acquire() and not c.try_acquire()
    a.release()
    with pytest.raises(WriteRefused):
        a.gate(wait=0)
    # Both standbys try: the resourceVersion lets exactly one take it.
    results = [b.try_acquire(), c.try_acquire()]
    assert results.count(True) == 1
    lease = find_lease(conn, leadership.LEASE_NAME)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ("op-b" if results[0] else "op-c")


# ---- two operator processes ---------------------------------------------------------


@dataclass
class ReadyLog:
    """Every Ready condition the policy was written with, from a watch."""

    api: client.ApiClient
    namespace: str
    seen: list[tuple[int, str, str]] = field(default_factory=list)  # (generation, status, reason)
    errors: list[str] = field(default_factory=list)
    _watch: watch.Watch = field(default_factory=watch.Watch)
    _thread: threading.Thread | None = None

    def start(self) -> ReadyLog:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        try:
            for event in self._watch.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                timeout_seconds=600,
            ):
                pol = event["object"]
                ready = condition(pol, "Ready")
                observed = (pol.get("status") or {}).get("observedGeneration")
                if ready and isinstance(observed, int):
                    entry = (observed, str(ready.get("status")), str(ready.get("reason")))
                    if not self.seen or self.seen[-1] != entry:
                        self.seen.append(entry)
        except Exception as exc:  # the stream ends when the test stops it
            self.errors.append(repr(exc))

    def stop(self) -> None:
        self._watch.stop()

    def transitions(self) -> list[tuple[int, str]]:
        """(generation, status) each time Ready's status changed."""
        out: list[tuple[int, str]] = []
        for generation, status, _ in self.seen:
            if not out or out[-1][1] != status:
                out.append((generation, status))
        return out


@dataclass
class Two:
    control_plane: LocalCluster
    api: client.ApiClient
    namespace: str
    workdir: Path
    operators: dict[str, OperatorProcess] = field(default_factory=dict)
    stand_in: WrcStandIn | None = None
    extra: list[Any] = field(default_factory=list)

    def install_rbac(self) -> Path:
        """The ServiceAccount and Roles of manifests/base in this namespace, and the
        refresh Role narrowed by name to the stand-in's recipe Deployments (in a cluster
        the admission policy spillover-operator-writes narrows it; here RBAC does),
        without its StatefulSet rule."""
        files = [BASE / n for n in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml")]
        files += [REFRESH_COMPONENT / n for n in ("role-refresh.yaml", "rolebinding-refresh.yaml")]
        core, rbac = client.CoreV1Api(self.api), client.RbacAuthorizationV1Api(self.api)
        for path in files:
            doc = yaml.safe_load(path.read_text())
            doc["metadata"]["namespace"] = self.namespace
            if doc["kind"] == "Role" and doc["metadata"]["name"] == "spillover-operator-refresh":
                doc["rules"][0]["resourceNames"] = list(RECIPE_DEPLOYMENTS)
                del doc["rules"][1]
            if doc["kind"] == "ServiceAccount":
                core.create_namespaced_service_account(
                    self.namespace, model(client.V1ServiceAccount, doc)
                )
            elif doc["kind"] == "Role":
                rbac.create_namespaced_role(self.namespace, model(client.V1Role, doc))
            else:
                doc["subjects"][0]["namespace"] = self.namespace
                rbac.create_namespaced_role_binding(
                    self.namespace, model(client.V1RoleBinding, doc)
                )
        return Path(
            self.control_plane.service_account_kubeconfig(self.namespace, "spillover-operator")
        )

    def start_operator(self, kubeconfig: Path, name: str) -> OperatorProcess:
        extra = {
            REFRESH_DEPLOYMENTS_VAR: ",".join(RECIPE_DEPLOYMENTS),
            leadership.ID_VAR: name,
        }
        op = OperatorProcess(self.namespace, kubeconfig, self.workdir, name=name, extra_env=extra)
        self.operators[name] = op
        return op.start()

    def leader(self, op: OperatorProcess) -> float:
        return op.metric("spillover_operator_leader", namespace=self.namespace)

    def create_wrc(self) -> None:
        env = {"LOG_LEVEL": "info", PASSTHROUGH_VAR: "OPENAI_BASE_URL"}
        container = container_manifest("wrc", "example.invalid/wrc:1", env)
        body = deployment_manifest(WRC, [container], labels={"app": "wrc"})
        client.AppsV1Api(self.api).create_namespaced_deployment(
            self.namespace, model(client.V1Deployment, body)
        )

    def create_policy(self) -> None:
        spec = {
            "enabled": True,
            "target": {"deployment": WRC, "container": "wrc"},
            "recipePods": {"refresh": "OnKillSwitch"},
        }
        client.CustomObjectsApi(self.api).create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, policy_manifest(self.namespace, spec)
        )

    def policy(self) -> dict[str, Any]:
        return read_policy(self.api, self.namespace)

    def any_operator(self) -> OperatorProcess | None:
        live = [op for op in self.operators.values() if op.proc and op.proc.poll() is None]
        return live[0] if live else None

    def wait_policy(self, what: str, check: Any) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            pol = self.policy()
            return pol if check(pol) else None

        found: dict[str, Any] = wait_for(what, probe, timeout=WAIT)
        return found

    def pod_values(self) -> dict[str, dict[str, str | None]]:
        conn = connection(self.api, self.namespace)
        lookup = config_map_lookup(conn)
        out: dict[str, dict[str, str | None]] = {}
        for pod in list_pods(conn, SELECTOR):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            values = resolve(pod["spec"]["containers"][0], SPILLOVER_VARS, lookup)
            out[pod["metadata"]["name"]] = {k: v.value for k, v in values.items()}
        return out

    def ctl(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = run(
            ["--kubeconfig", str(self.control_plane.kubeconfig), "-n", self.namespace, *argv],
            stdout=out,
            stderr=err,
        )
        return code, out.getvalue(), err.getvalue()

    def revisions(self) -> dict[str, int]:
        """Each recipe Deployment's template revision: 1 + the restarts it had."""
        return {
            name: int(
                read_deployment(self.api, self.namespace, name)["metadata"]["annotations"][REVISION]
            )
            for name in RECIPE_DEPLOYMENTS
        }

    def events(self) -> dict[tuple[str, str, str], int]:
        """(reason, kind of the object, its name) -> how many Events."""
        counts: dict[tuple[str, str, str], int] = {}
        for e in client.CoreV1Api(self.api).list_namespaced_event(self.namespace).items:
            key = (str(e.reason), str(e.involved_object.kind), str(e.involved_object.name))
            counts[key] = counts.get(key, 0) + int(e.count or 1)
        return counts

    def restarts_announced(self) -> dict[str, int]:
        """Recipe Deployment -> the RecipePodsRefresh Events announcing its restart."""
        counts: dict[str, int] = {}
        events = client.CoreV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector="reason=RecipePodsRefresh"
        )
        for e in events.items:
            for name in RECIPE_DEPLOYMENTS:
                if f"rollout restart of Deployment/{name} " in str(e.message):
                    counts[name] = counts.get(name, 0) + int(e.count or 1)
        return counts

    def close(self) -> None:
        if self.stand_in is not None:
            self.stand_in.stop()
        for op in self.operators.values():
            op.stop()
        for api in self.extra:
            api.close()
        custom = client.CustomObjectsApi(self.api)
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)[
            "items"
        ]:
            if item["metadata"].get("finalizers"):
                custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )


@pytest.fixture
def two(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[Two]:
    t = Two(control_plane, admin, namespace, tmp_path)
    try:
        yield t
    finally:
        t.close()


def _delta(after: dict[Any, int], before: dict[Any, int]) -> dict[Any, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_two_operators_act_once_per_change_and_the_standby_takes_over(two: Two) -> None:
    kubeconfig = two.install_rbac()
    two.create_wrc()
    a = two.start_operator(kubeconfig, "op-a")
    wait_for("op-a leads", lambda: two.leader(a) == 1, timeout=WAIT, operator=a)
    b = two.start_operator(kubeconfig, "op-b")  # its readiness answers while standby
    assert two.leader(b) == 0
    two.create_policy()
    two.wait_policy("the policy Ready", is_ready)
    api = two.control_plane.api_client()
    two.extra.append(api)
    two.stand_in = WrcStandIn(api, two.namespace, "at-pod-creation", via="deployment").start()
    two.wait_policy(
        "three current recipe pods",
        lambda p: (
            is_ready(p) and ((p.get("status") or {}).get("recipePods") or {}).get("current") == 3
        ),
    )
    ready = ReadyLog(two.api, two.namespace).start()
    revisions = two.revisions()
    changes: list[dict[str, Any]] = []
    try:
        for _ in range(FLIPS):
            for command, value in (("kill", "false"), ("restore", "true")):
                events = two.events()
                announced_before = two.restarts_announced()
                # kill: the refresh is the policy's (OnKillSwitch); restore: requested.
                extra = () if command == "kill" else ("--refresh-recipe-pods",)
                code, out, err = two.ctl(command, "--wait", "--timeout", "120", *extra)
                if code != exit_codes.OK:
                    pytest.fail(
                        f"{command} exited {code}:\n{out}\n{err}\nbefore: {changes}\n"
                        f"the standby's log:\n{b.log_tail()}\nstatus: "
                        + json.dumps(two.policy().get("status"), indent=1),
                        pytrace=False,
                    )
                values = two.pod_values()
                assert len(values) == 3 and all(v[ENABLED_VAR] == value for v in values.values())
                now = two.revisions()
                restarts = {n: now[n] - revisions[n] for n in RECIPE_DEPLOYMENTS}
                announced = _delta(two.restarts_announced(), announced_before)
                changes.append(
                    {
                        "change": command,
                        "restarts": restarts,
                        "announced": announced,
                        "events": _delta(two.events(), events),
                    }
                )
                revisions = now
        time.sleep(2)  # a late duplicate (a second operator's pass) would show by now
        late_restarts = _delta(two.revisions(), revisions)
    finally:
        ready.stop()
    report = json.dumps(
        [{**c, "events": {"/".join(k): n for k, n in c["events"].items()}} for c in changes],
        indent=1,
    )
    print(report)
    # One change, at most one restart per owner: no recipe Deployment was restarted
    # twice for one kill or one restore, every restart was the leader's and announced
    # once ("rollout restart of Deployment/<name>"), none by the standby. The refresh
    # waits until the WRC has passed the value on (the recipe ConfigMap) before it
    # restarts, so the leader needs no second restart. (An owner whose pods already run
    # the new values needs none: 0 happens.)
    for change in changes:
        for name, n in change["restarts"].items():
            assert n <= 1, report
            assert n == change["announced"].get(name, 0), report
    assert sum(sum(c["restarts"].values()) for c in changes) >= len(RECIPE_DEPLOYMENTS), report
    assert not late_restarts, (late_restarts, report)
    # No Event twice for one change: Applied once on the policy and once on the WRC.
    for change in changes:
        events = change["events"]
        assert events.get(("Applied", "SpilloverPolicy", "spillover")) == 1, report
        assert events.get(("Applied", "Deployment", WRC)) == 1, report
    # Ready does not flap: per change at most False (rolling out) then True, never back.
    transitions = ready.transitions()
    assert len(transitions) <= 2 * len(changes) + 1, transitions
    for generation in {g for g, _, _ in ready.seen}:
        statuses = [s for g, s, _ in ready.seen if g == generation]
        if "True" in statuses:
            assert "False" not in statuses[statuses.index("True") :], (generation, ready.seen)
    assert two.leader(a) == 1 and two.leader(b) == 0
    # spilloverctl status tells which replica acts.
    code, out, err = two.ctl("status")
    assert code == exit_codes.OK and "\nleader: op-a (leader Lease renewed " in out, (out, err)
    # The standby did nothing at all: no reconcile (its metrics), no handler (its log).
    assert b.metric("spillover_operator_reconcile_total") == 0
    assert a.metric("spillover_operator_reconcile_total") > 0
    assert "Handler '" not in b.log_path.read_text(), b.log_tail()

    # The leader dies without a word: the standby takes over and applies the next change.
    assert a.proc is not None
    killed = time.monotonic()
    a.proc.kill()
    a.proc.wait(timeout=10)
    wait_for("op-b leads", lambda: two.leader(b) == 1, timeout=WAIT, operator=b)
    failover_s = time.monotonic() - killed
    code, out, err = two.ctl("kill", "--wait", "--timeout", "120")
    applied_s = time.monotonic() - killed
    print(f"failover_s={failover_s:.1f} kill_applied_after_leader_killed_s={applied_s:.1f}")
    assert code == exit_codes.OK, (code, out, err)
    assert env_map(read_deployment(two.api, two.namespace, WRC), "wrc")[ENABLED_VAR] == "false"
    pol = two.policy()
    assert is_ready(pol)
    lease = find_lease(connection(two.api, two.namespace), leadership.LEASE_NAME)
    assert lease is not None and lease["spec"]["holderIdentity"] == "op-b"
    code, out, err = two.ctl("status", "-o", "json")
    assert code == exit_codes.OK, (out, err)
    assert json.loads(out)["operator"]["leader"].startswith("op-b (leader Lease renewed "), out
    elected = two.events().get(("LeaderElected", "Lease", leadership.LEASE_NAME))
    assert elected == 2  # op-a at its start, op-b at the take-over
