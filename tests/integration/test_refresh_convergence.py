"""Refresh that always converges (issue 19, item 3), on the local control plane.

Each case runs SPILLOVER_REFRESH_TRIALS trials (default 3; the issue's acceptance is
20 of 20) in one namespace, one real operator and the WRC stand-in in behaviour
`at-pod-creation` through Deployments (the recipe pods read a ConfigMap the stand-in
keeps equal to the WRC's env, so only a restart brings new values). A trial ends with
every matched pod running the policy's values the moment the command exits 0, and
goes back to spillover on for the next one. Every trial runs; the test fails at the
end naming each failed trial.

- kill-then-restore: `kill`, then `restore --refresh-recipe-pods --wait` as soon as
  the kill's refresh restarted a first owner (20 pods in 4 Deployments: owners
  mid-rollout with spillover off, others not restarted yet).
- kill-mid-rollout: every recipe Deployment (4 replicas, maxSurge 2, minReadySeconds
  1: 6 pods mid-rollout) starts a rollout, then `kill --wait` at once.
- replica-change: a recipe Deployment scaled (4 <-> 6) once the refresh has begun.
- operator-restart: the operator SIGKILLed once the refresh has begun, then started
  again: it resumes from status.recipePods.
- slow-wrc: the WRC passes its env on 2 s after its rollout completes.

And a kill on 100 pods in 10 Deployments posts a bounded number of Events
(SPILLOVER_EVENT_RECIPES, SPILLOVER_EVENT_REPLICAS; a kwok node takes 110 pods: for
300, SPILLOVER_CONTROLPLANE_NODES=4).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from k8s_helpers import is_ready, wait_for
from kubernetes import client
from spillover_operator import exit_codes
from spillover_operator.domain.model import ENABLED_VAR
from test_recipe_pods_on_cluster import (  # noqa: F401  (setup: a fixture; admin: conftest)
    Setup,
    all_current,
    counts,
    setup,
)

pytestmark = pytest.mark.integration

TRIALS = int(os.environ.get("SPILLOVER_REFRESH_TRIALS", "3"))
TIMEOUT = "180"  # seconds, per `--wait`: a bound for a loaded machine, never asserted on


@dataclass(frozen=True)
class Case:
    recipes: int
    replicas: int
    max_surge: int | None = None
    min_ready_seconds: int = 0
    pass_delay: float = 0.0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"r{i}" for i in range(1, self.recipes + 1))


CASES = {
    "kill-then-restore": Case(recipes=4, replicas=5),
    "kill-mid-rollout": Case(recipes=2, replicas=4, max_surge=2, min_ready_seconds=1),
    "replica-change": Case(recipes=2, replicas=4),
    "operator-restart": Case(recipes=2, replicas=4),
    "slow-wrc": Case(recipes=2, replicas=3, pass_delay=2.0),
}


def start(s: Setup, case: Case) -> None:
    s.recipe_deployments = tuple(f"mcp-host-{r}" for r in case.names)
    s.create_wrc()
    s.start_operator()
    s.create_policy(refresh="OnKillSwitch")
    s.wait_policy("the policy Ready", is_ready)
    s.start_stand_in(
        "at-pod-creation",
        "deployment",
        recipes=case.names,
        replicas=case.replicas,
        max_surge=case.max_surge,
        min_ready_seconds=case.min_ready_seconds,
        pass_delay=case.pass_delay,
    )
    s.wait_policy("every recipe pod current", all_current(case.recipes * case.replicas))


def wrong_pods(s: Setup, enabled: str, matched: int | None = None) -> str | None:
    """None when every live recipe pod runs ENABLED=`enabled` (and, with `matched`, at
    least that many run: more while a rollout's surge pods, all current, still run);
    else what is wrong."""
    values = s.pod_values()
    off = sorted(name for name, v in values.items() if v[ENABLED_VAR] != enabled)
    if off:
        return f"{len(off)} of {len(values)} pods not {ENABLED_VAR}={enabled}: {off[:5]}"
    if matched is not None and len(values) < matched:
        return f"{len(values)} pods, expected at least {matched}"
    return None


def run_ctl(s: Setup, *argv: str) -> tuple[int, str]:
    code, out, err = s.ctl(*argv)
    return code, f"exit {code}: {out[-600:]} {err[-1200:]}"


def expect_ok(s: Setup, enabled: str, what: str, *argv: str, matched: int | None = None) -> None:
    code, text = run_ctl(s, *argv)
    # The moment it exits 0 every pod must run the value: checked before anything else.
    wrong = wrong_pods(s, enabled, matched)
    if code != exit_codes.OK or wrong:
        raise AssertionError(f"{what}: {wrong or ''} {text}")


def restore(s: Setup, matched: int | None = None) -> None:
    """`restore --wait --refresh-recipe-pods`; when it changed the spec, exactly one
    Applied Event on the policy names the generation it made (the refresh request
    and the spec arrive in one write, handled by two handlers)."""
    before = s.policy()["metadata"]["generation"]
    expect_ok(
        s, "true", "restore", "restore", "--wait", "--refresh-recipe-pods",
        "--timeout", TIMEOUT, matched=matched,
    )  # fmt: skip
    # The command has waited for Ready=True of the new generation: the pass that
    # applied it posted its Events before that status.
    generation = s.policy()["metadata"]["generation"]
    if generation != before:
        applied = applied_events(s, generation)
        assert len(applied) == 1, f"generation {generation}: {len(applied)} Applied: {applied}"


def applied_events(s: Setup, generation: int) -> list[str]:
    """The messages of the Applied Events on the policy that name `generation`."""
    found = client.CoreV1Api(s.api).list_namespaced_event(
        s.namespace, field_selector="involvedObject.kind=SpilloverPolicy,reason=Applied"
    )
    return [str(e.message) for e in found.items if f"(generation {generation} " in str(e.message)]


def refresh_begun(s: Setup) -> None:
    """Wait until the operator restarted a first owner for the policy's generation (the
    kill's refresh round: OnKillSwitch, no request)."""

    def begun(p: dict[str, Any]) -> bool:
        this_round = counts(p).get("refreshRound") == f"{p['metadata']['generation']}/"
        return this_round and bool(counts(p).get("refreshed"))

    s.wait_policy("the refresh begun", begun)


def in_background(s: Setup, *argv: str) -> Callable[[], tuple[int, str]]:
    """Run spilloverctl in a thread; the answer is its exit code and output."""
    result: list[tuple[int, str]] = []
    thread = threading.Thread(target=lambda: result.append(run_ctl(s, *argv)), daemon=True)
    thread.start()

    def join() -> tuple[int, str]:
        thread.join(timeout=float(TIMEOUT) + 60)
        return result[0] if result else (-1, "spilloverctl did not return")

    return join


def scale(s: Setup, deployment: str, replicas: int) -> None:
    client.AppsV1Api(s.api).patch_namespaced_deployment_scale(
        deployment, s.namespace, {"spec": {"replicas": replicas}}
    )


# ---- the trials ----------------------------------------------------------------------


def kill_then_restore(s: Setup, case: Case, trial: int) -> None:
    code, text = run_ctl(s, "kill")
    assert code == exit_codes.OK, f"kill: {text}"
    # The restore comes while the kill's refresh is under way: owners restarted with
    # spillover off, mid-rollout, others not yet.
    refresh_begun(s)
    restore(s, case.recipes * case.replicas)


def kill_mid_rollout(s: Setup, case: Case, trial: int) -> None:
    apps = client.AppsV1Api(s.api)
    for r in case.names:
        patch = {"spec": {"template": {"metadata": {"annotations": {"trial": str(trial)}}}}}
        apps.patch_namespaced_deployment(f"mcp-host-{r}", s.namespace, patch)
    n = case.recipes * case.replicas
    expect_ok(s, "false", "kill mid-rollout", "kill", "--wait", "--timeout", TIMEOUT, matched=n)
    restore(s, n)


def replica_change(s: Setup, case: Case, trial: int) -> None:
    join = in_background(s, "kill", "--wait", "--timeout", TIMEOUT)
    refresh_begun(s)
    replicas = case.replicas + 2 if trial % 2 == 0 else case.replicas
    scale(s, "mcp-host-r1", replicas)
    code, text = join()
    n = replicas + (case.recipes - 1) * case.replicas
    wrong = wrong_pods(s, "false", n) if code == exit_codes.OK else None
    assert code == exit_codes.OK and not wrong, f"kill while scaling: {wrong or ''} {text}"
    restore(s, n)


def operator_restart(s: Setup, case: Case, trial: int) -> None:
    op = s.operator
    assert op is not None and op.proc is not None
    join = in_background(s, "kill", "--wait", "--timeout", TIMEOUT)
    refresh_begun(s)
    op.proc.kill()  # no SIGTERM: mid-step, as a node loss or an OOM kill would
    op.proc.wait(timeout=30)
    time.sleep(0.5)
    op.start()
    code, text = join()
    n = case.recipes * case.replicas
    wrong = wrong_pods(s, "false", n) if code == exit_codes.OK else None
    assert code == exit_codes.OK and not wrong, f"kill across an operator restart: {wrong} {text}"
    restore(s, n)


def slow_wrc(s: Setup, case: Case, trial: int) -> None:
    n = case.recipes * case.replicas
    expect_ok(s, "false", "kill, slow WRC", "kill", "--wait", "--timeout", TIMEOUT, matched=n)
    restore(s, n)


TRIAL: dict[str, Callable[[Setup, Case, int], None]] = {
    "kill-then-restore": kill_then_restore,
    "kill-mid-rollout": kill_mid_rollout,
    "replica-change": replica_change,
    "operator-restart": operator_restart,
    "slow-wrc": slow_wrc,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_refresh_converges(setup: Setup, name: str) -> None:  # noqa: F811
    case = CASES[name]
    start(setup, case)
    failures: list[str] = []
    for trial in range(TRIALS):
        began = time.monotonic()
        try:
            TRIAL[name](setup, case, trial)
        except (AssertionError, pytest.fail.Exception) as exc:
            failures.append(f"trial {trial + 1}: {exc}")
            # Back to spillover on everywhere for the next trial, or stop.
            try:
                scale(setup, "mcp-host-r1", case.replicas)
                restore(setup, case.recipes * case.replicas)
            except (AssertionError, pytest.fail.Exception) as again:
                failures.append(f"could not recover after trial {trial + 1}: {again}")
                break
        print(f"{name} trial {trial + 1}: {time.monotonic() - began:.1f}s")
    passed = TRIALS - sum(1 for f in failures if f.startswith("trial "))
    print(f"{name}: {passed}/{TRIALS} trials converged")
    assert not failures, f"{name}: {passed}/{TRIALS} converged\n" + "\n".join(failures)


# ---- Events --------------------------------------------------------------------------

EVENT_RECIPES = int(os.environ.get("SPILLOVER_EVENT_RECIPES", "10"))
EVENT_REPLICAS = int(os.environ.get("SPILLOVER_EVENT_REPLICAS", "10"))


def test_a_kill_on_many_pods_posts_events_per_owner_not_per_pod(setup: Setup) -> None:  # noqa: F811
    case = Case(recipes=EVENT_RECIPES, replicas=EVENT_REPLICAS)
    start(setup, case)
    core = client.CoreV1Api(setup.api)

    def on_policy() -> list[Any]:
        return [
            e
            for e in core.list_namespaced_event(setup.namespace).items
            if e.involved_object.kind == "SpilloverPolicy"
        ]

    before = {e.metadata.name for e in on_policy()}
    n = case.recipes * case.replicas
    expect_ok(setup, "false", "kill", "kill", "--wait", "--timeout", "600", matched=n)
    wait_for("the policy's status to settle", lambda: counts(setup.policy()).get("current") == n)
    posted = [e for e in on_policy() if e.metadata.name not in before]
    recipe = [e for e in posted if str(e.reason).startswith("RecipePods")]
    refreshes = [e for e in recipe if e.reason == "RecipePodsRefresh"]
    summary = [f"{e.reason}: {e.message[:120]}" for e in posted]
    # One restart per owner, and the RecipePods Events on a change of the owners with
    # stale pods: at most 2 per owner and a few more (Applied, the last AllCurrent).
    assert len(refreshes) == case.recipes, summary
    assert len(recipe) <= 2 * case.recipes + 3, summary
    assert len(posted) <= 2 * case.recipes + 6, summary
    print(f"{n} pods in {case.recipes} Deployments: {len(posted)} Events on the policy")
