"""The client library (spillover_operator.client) against the real API server of the
local control plane: its error types, the conflict retry, Events, and waiting with a
progress callback."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from typing import Any

import pytest
from controlplane.localcluster import LocalCluster
from k8s_helpers import (
    container_manifest,
    create_object,
    deployment_manifest,
    policy_manifest,
    read_deployment,
    wait_for,
)
from kubernetes import client
from spillover_operator.client import (
    ApiError,
    ConfigMapReader,
    Conflict,
    Connection,
    CustomResource,
    Forbidden,
    NotFound,
    NotServed,
    OperatorRefused,
    TimedOut,
    config_map_lookup,
    connect,
    find_deployment,
    find_policy,
    get_config_map,
    get_deployment,
    get_object,
    get_policy,
    is_served,
    list_deployments,
    list_pods,
    patch_deployment_env,
    patch_policy,
    patch_policy_status,
    pod_values,
    policy_crd_installed,
    post_event,
    proxy_request,
    read_pod_log,
    retry_on_conflict,
    selector_string,
    server_version,
)
from spillover_operator.domain.assess import StatusReport
from spillover_operator.domain.envplan import plan_apply
from spillover_operator.domain.model import ENABLED_VAR, PASSTHROUGH_VAR, SPILLOVER_VARS
from spillover_operator.domain.policy import parse_spec
from spillover_operator.domain.resolved_env import ConfigMapUnreadable, no_config_maps, resolve
from spillover_operator.observed import WaitProgress, env_in_effect, wait_until_settled

pytestmark = pytest.mark.integration

SPEC = {"enabled": False, "target": {"deployment": "wrc", "container": "controller"}}


@pytest.fixture
def conn(control_plane: LocalCluster, admin: client.ApiClient, namespace: str) -> Connection:
    """The library's own connection, from the admin kubeconfig, as spilloverctl makes it."""
    return connect(str(control_plane.kubeconfig), None, namespace, field_manager="client-test")


def _wrc(namespace: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    container = container_manifest("controller", "example.invalid/wrc:1", env or {})
    return deployment_manifest("wrc", [container], namespace=namespace)


def _rolled_out(api: client.ApiClient, namespace: str) -> bool:
    dep = read_deployment(api, namespace, "wrc")
    status = dep.get("status") or {}
    return bool(
        status.get("observedGeneration") == dep["metadata"]["generation"]
        and status.get("updatedReplicas") == status.get("availableReplicas") == 1
    )


def test_reads_and_not_found(conn: Connection, admin: client.ApiClient, namespace: str) -> None:
    assert server_version(conn).startswith("v")
    assert policy_crd_installed(conn)
    assert find_policy(conn, "spillover") is None
    assert find_deployment(conn, "wrc") is None
    with pytest.raises(NotFound) as info:
        get_policy(conn, "spillover")
    assert type(info.value) is NotFound
    assert f"SpilloverPolicy 'spillover' not found in namespace '{namespace}'" in info.value.message
    assert str(conn.kubeconfig) in info.value.message

    create_object(admin, _wrc(namespace, {PASSTHROUGH_VAR: "A"}))
    create_object(admin, policy_manifest(namespace, SPEC))
    assert get_policy(conn, "spillover")["spec"] == {**SPEC, "onDelete": "Retain"}  # CRD default
    assert get_deployment(conn, "wrc")["metadata"]["name"] == "wrc"
    env = env_in_effect(conn, "wrc", "controller")
    assert env[PASSTHROUGH_VAR] == "A" and env[ENABLED_VAR] is None
    with pytest.raises(NotFound, match="container 'nope' not found in Deployment"):
        env_in_effect(conn, "wrc", "nope")


def test_a_resource_nobody_installed_is_not_served(conn: Connection) -> None:
    runs = CustomResource("nothing.example.com", "v1", "recipes", "Recipe")
    assert not is_served(conn, runs)
    with pytest.raises(NotServed, match=r"does not serve recipes\.nothing\.example\.com"):
        get_object(conn, runs, "x")


def test_forbidden_with_a_limited_service_account(
    control_plane: LocalCluster, admin: client.ApiClient, namespace: str
) -> None:
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="reader"),
            rules=[
                client.V1PolicyRule(
                    api_groups=["spillover.clerum.io"],
                    resources=["spilloverpolicies"],
                    verbs=["get"],
                )
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="reader"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="reader"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)
            ],
        ),
    )
    create_object(admin, policy_manifest(namespace, SPEC))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "reader")
    reader = connect(str(kubeconfig), field_manager="client-test")
    assert reader.namespace == namespace  # from the kubeconfig's context

    def can_get() -> bool:
        return find_policy(reader, "spillover") is not None

    wait_for("the reader's Role to take effect", can_get, retry_on=(Forbidden,))
    with pytest.raises(Forbidden) as info:
        patch_policy(reader, "spillover", {"spec": {"enabled": True}})
    message = info.value.message
    assert info.value.status == 403
    assert f"may not patch spilloverpolicies.spillover.clerum.io in namespace '{namespace}'" in (
        message
    )
    assert str(kubeconfig) in message and "Grant that permission" in message
    with pytest.raises(Forbidden, match=r"may not get deployments\.apps"):
        get_deployment(reader, "wrc")
    with pytest.raises(Forbidden, match="may not create events"):
        post_event(reader, get_policy(reader, "spillover"), "Normal", "Test", "m")
    # a ConfigMap the reader may not read: the value it would give is unknown
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"K": "v"}),
    )
    with pytest.raises(ConfigMapUnreadable, match="Forbidden"):
        config_map_lookup(reader)("tuning")


def test_config_map_lookup_feeds_env_resolution(
    conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    client.CoreV1Api(admin).create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="tuning"),
            data={"THRESHOLD": "4096", "UNRELATED": "x"},
        ),
    )
    lookup = config_map_lookup(conn)
    assert lookup("tuning") == {"THRESHOLD": "4096", "UNRELATED": "x"}
    assert lookup("absent") is None
    container = {
        "name": "controller",
        "envFrom": [{"configMapRef": {"name": "tuning"}, "prefix": "SPILL_"}],
        "env": [{"name": "LIMIT", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k",
                                                                     "optional": True}}}],
    }  # fmt: skip
    got = resolve(container, ("SPILL_THRESHOLD", "LIMIT"), lookup)
    assert got["SPILL_THRESHOLD"].value == "4096"
    assert got["LIMIT"].state == "unset"


def test_a_listed_config_map_reader_reads_the_rest_from_one_list(
    control_plane: LocalCluster, conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    """`listed`: the first ConfigMap by a GET, the others from one LIST (one snapshot: a
    ConfigMap created after it is not seen, where a GET each would find it), with the
    same data and change times; a caller that may only `get` them reads each by GET."""
    core = client.CoreV1Api(admin)
    for name in ("a", "b", "c"):
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"K": name}),
        )
    one_by_one, listed = ConfigMapReader(conn), ConfigMapReader(conn, listed=True)
    for name in ("a", "b", "c", "absent"):
        assert listed.lookup(name) == one_by_one.lookup(name)
        assert listed.changed_at(name) == one_by_one.changed_at(name)
    assert listed.lookup("a") == {"K": "a"} and listed.lookup("absent") is None
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="d"), data={"K": "d"})
    )
    assert listed.lookup("d") is None  # not in the LIST it read
    assert ConfigMapReader(conn).lookup("d") == {"K": "d"}

    rbac = client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="cm-getter"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="cm-getter"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="cm-getter"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="cm-getter"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name="cm-getter", namespace=namespace)
            ],
        ),
    )
    getter = connect(
        str(control_plane.service_account_kubeconfig(namespace, "cm-getter")),
        field_manager="client-test",
    )
    without_list = ConfigMapReader(getter, listed=True)
    assert [without_list.lookup(n) for n in ("a", "b", "d")] == [{"K": "a"}, {"K": "b"}, {"K": "d"}]


def test_list_pods_by_selector_and_their_values(
    conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin)
    for name, labels, threshold in (
        ("mcp-a", {"app": "mcp-host", "recipe": "r1"}, "4096"),
        ("mcp-b", {"app": "mcp-host", "recipe": "r2"}, "8192"),
        ("other", {"app": "web"}, "1"),
    ):
        container = client.V1Container(
            name="mcp-host",
            image="example.invalid/mcp-host:1",
            env=[client.V1EnvVar(name="THRESHOLD", value=threshold)],
        )
        core.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name, labels=labels),
                spec=client.V1PodSpec(containers=[container]),
            ),
        )
    selector = selector_string(
        {
            "matchLabels": {"app": "mcp-host"},
            "matchExpressions": [{"key": "recipe", "operator": "In", "values": ["r1", "r2"]}],
        }
    )
    pods = list_pods(conn, selector)
    assert [p["metadata"]["name"] for p in pods] == ["mcp-a", "mcp-b"]
    values = [pod_values(p, ["THRESHOLD"], "mcp-host") for p in pods]
    assert [v["THRESHOLD"].value for v in values if v is not None] == ["4096", "8192"]
    assert list_pods(conn, "app=nothing-here") == []


def test_what_the_harness_reads_goes_through_the_client(
    conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    """The calls the harness's cluster code makes (preflight, observe, the HTTP starter)
    through the one door: Deployments by selector, a ConfigMap, a container's log, and a
    request behind the API server's proxy whose error status is the answer, not a
    raise."""
    container = container_manifest("controller", "example.invalid/wrc:1")
    wrc = deployment_manifest("wrc", [container], namespace=namespace, deployment_labels=True)
    create_object(admin, wrc)
    assert [d["metadata"]["name"] for d in list_deployments(conn, "app=wrc")] == ["wrc"]
    assert list_deployments(conn, "app=nothing-here") == []

    with pytest.raises(NotFound, match="ConfigMap 'tuning' not found"):
        get_config_map(conn, "tuning")
    client.CoreV1Api(admin).create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"a.sha256": "x"}),
    )
    assert get_config_map(conn, "tuning")["data"] == {"a.sha256": "x"}

    def running() -> str | None:
        pods = list_pods(conn, "app=wrc")
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return str(ok[0]["metadata"]["name"]) if ok else None

    pod = wait_for("the wrc pod to run", running)
    assert read_pod_log(conn, pod, "controller", since_seconds=5) == ""  # kwok's container
    with pytest.raises(ApiError, match="container nope is not valid"):
        read_pod_log(conn, pod, "nope")

    status, body = proxy_request(
        conn, "GET", f"/api/v1/namespaces/{namespace}/services/http:absent:8080/proxy/runs/x"
    )
    assert status == 404 and b'services \\"absent\\" not found' in body


def test_conflict_then_the_retry_rereads_and_wins(
    conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    create_object(admin, _wrc(namespace))
    spec = parse_spec(SPEC)
    stale = get_deployment(conn, "wrc")
    # Someone else changes the Deployment after our read: our plan's resourceVersion is old.
    client.AppsV1Api(admin).patch_namespaced_deployment(
        "wrc", namespace, {"metadata": {"labels": {"touched": "yes"}}}
    )
    with pytest.raises(Conflict) as info:
        patch_deployment_env(conn, "wrc", plan_apply(stale, spec, config_maps=no_config_maps))
    assert info.value.status == 409

    reads: list[dict[str, Any]] = [stale]

    def attempt() -> dict[str, Any]:
        current = reads.pop() if reads else get_deployment(conn, "wrc")
        return patch_deployment_env(
            conn, "wrc", plan_apply(current, spec, config_maps=no_config_maps)
        )

    after = retry_on_conflict(attempt, what=f"Deployment {namespace}/wrc")
    env = env_in_effect(conn, "wrc", "controller")
    assert env[ENABLED_VAR] == "false"
    assert env[PASSTHROUGH_VAR] == ",".join(SPILLOVER_VARS)
    # the retry re-read: the patch went onto the Deployment as the other writer left it
    assert after["metadata"]["labels"].get("touched") == "yes"


def test_post_event_names_the_object_and_the_component(
    conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    create_object(admin, policy_manifest(namespace, SPEC))
    policy = get_policy(conn, "spillover")
    post_event(conn, policy, "Normal", "ClientTest", "x" * 3000)
    events = (
        client.CoreV1Api(admin)
        .list_namespaced_event(namespace, field_selector="reason=ClientTest")
        .items
    )
    assert len(events) == 1
    event = events[0]
    assert event.involved_object.kind == "SpilloverPolicy"
    assert event.involved_object.name == "spillover"
    assert event.involved_object.uid == policy["metadata"]["uid"]
    assert event.source.component == "client-test"
    assert len(event.message) == 1000


def _settle_policy_status(conn: Connection, reason: str, ready: bool) -> None:
    """Write the status the operator would (no operator runs in these tests)."""
    policy = get_policy(conn, "spillover")
    patch_policy_status(
        conn,
        "spillover",
        {
            "observedGeneration": policy["metadata"]["generation"],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": reason,
                    "message": f"set by the test: {reason}",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    )


def test_wait_reports_progress_through_the_callback(
    conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    create_object(admin, _wrc(namespace))
    create_object(admin, policy_manifest(namespace, SPEC))
    wait_for("the WRC to roll out", lambda: _rolled_out(admin, namespace))
    looks: list[WaitProgress] = []

    # Nothing applied the policy: the wait runs out, having reported what it saw.
    with pytest.raises(TimedOut) as info:
        wait_until_settled(conn, "spillover", timeout=1.0, progress=looks.append)
    assert looks and not any(look.settled for look in looks)
    assert any("operator has never reported" in p for p in info.value.pending)
    assert "timed out after 1s waiting" in info.value.message
    first = looks[0]
    assert first.report.policy_name == "spillover" and first.pending

    # Apply it as --direct does; the direct wait settles once the rollout completes.
    spec = parse_spec(SPEC)
    patch_deployment_env(
        conn, "wrc", plan_apply(get_deployment(conn, "wrc"), spec, config_maps=no_config_maps)
    )
    looks.clear()
    report = wait_until_settled(conn, "spillover", direct=True, timeout=120, progress=looks.append)
    assert looks[-1].settled and looks[-1].report is report
    assert report.actual_env is not None and report.actual_env[ENABLED_VAR] == "false"
    states = [look.state() for look in looks[:-1]]
    # Called again only when something changed (a state may come back: following
    # watches, the wait sees each step of the rollout).
    assert all(a != b for a, b in itertools.pairwise(states))


def test_wait_stops_when_the_operator_refused_or_the_target_is_missing(
    conn: Connection, admin: client.ApiClient, namespace: str
) -> None:
    create_object(admin, policy_manifest(namespace, SPEC))
    with pytest.raises(NotFound, match="the target Deployment 'wrc' does not exist"):
        wait_until_settled(conn, "spillover", timeout=60)

    create_object(admin, _wrc(namespace))
    _settle_policy_status(conn, "Conflict", ready=False)
    with pytest.raises(OperatorRefused) as info:
        wait_until_settled(conn, "spillover", timeout=60)
    assert info.value.reason == "Conflict"
    assert "the operator refused generation 1: Ready=False reason=Conflict" in info.value.message

    other = copy.deepcopy(SPEC)
    other["target"]["container"] = "missing"
    patch_policy(conn, "spillover", {"spec": other})
    with pytest.raises(NotFound, match="container 'missing' not found"):
        wait_until_settled(conn, "spillover", timeout=60)


def test_wait_looks_seldom_while_the_operator_reports_a_rollout_and_at_once_when_done(
    conn: Connection, admin: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Watch events while the policy's last event says the operator is still rolling
    out make a look (a GET of the policy and the Deployment, a LIST of pods) at most
    every LOOK_EVERY_S; the event of Ready=True makes one at once, which settles."""
    from spillover_operator.observed import waiting

    create_object(admin, _wrc(namespace))
    create_object(admin, policy_manifest(namespace, SPEC))
    wait_for("the WRC to roll out", lambda: _rolled_out(admin, namespace))
    spec = parse_spec(SPEC)  # applied as the operator would
    patch_deployment_env(
        conn, "wrc", plan_apply(get_deployment(conn, "wrc"), spec, config_maps=no_config_maps)
    )
    wait_for("the applied WRC to roll out", lambda: _rolled_out(admin, namespace))
    _settle_policy_status(conn, "RolloutInProgress", ready=False)

    every = 1.0
    monkeypatch.setattr(waiting, "LOOK_EVERY_S", every)
    looks: list[float] = []
    real_observe = waiting.observe

    def counted_observe(*args: Any, **kwargs: Any) -> Any:  # the real look, counted
        looks.append(time.monotonic())
        return real_observe(*args, **kwargs)

    monkeypatch.setattr(waiting, "observe", counted_observe)
    ended: list[Any] = []

    def wait() -> None:
        try:
            ended.append(wait_until_settled(conn, "spillover", timeout=120, recipe_pods=False))
        except Exception as exc:  # reported by the main thread below
            ended.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_for("the first look", lambda: looks)
    # A burst of policy events (an annotation each) while the operator says "rolling out".
    start = time.monotonic()
    for i in range(40):
        patch_policy(conn, "spillover", {"metadata": {"annotations": {"test/burst": str(i)}}})
    end = time.monotonic()
    during = [t for t in looks if start <= t <= end]
    bound = int((end - start) / every) + 2
    assert len(during) <= bound, (
        f"{len(during)} looks during a burst of 40 events in {end - start:.2f} s; at most "
        f"{bound} expected while the operator reports the rollout in progress"
    )
    _settle_policy_status(conn, "RolloutComplete", ready=True)
    waiter.join(120)
    assert ended, "the wait did not end once the operator reported Ready=True"
    report = ended[0]
    assert isinstance(report, StatusReport), report
    ready = report.condition("Ready")
    assert ready is not None and ready.get("status") == "True"
