"""The operator's allow-list of target Deployments: parsing the setting and the refusal."""

from __future__ import annotations

import pytest
from spillover_operator.domain import allowlist
from spillover_operator.domain.allowlist import (
    ALLOWED_TARGETS_VAR,
    DEFAULT,
    AllowList,
    AllowListError,
    from_environ,
    parse,
    refusal,
)
from spillover_operator.domain.constants import DEFAULT_TARGET
from spillover_operator.domain.recipe_pods import NO_OWNER, Owner


@pytest.mark.parametrize("raw", [None, "", "   ", ",", " , ,"])
def test_unset_or_blank_means_the_wrc_conventional_name(raw: str | None) -> None:
    assert parse(raw) == DEFAULT
    assert DEFAULT.names == (DEFAULT_TARGET,) == ("workflow-recipe-controller",)
    assert DEFAULT.defaulted


def test_names_are_trimmed_deduplicated_and_ordered() -> None:
    allowed = parse(" wrc , workflow-recipe-controller,,wrc,wrc.v2 ")
    assert allowed == AllowList(("wrc", "workflow-recipe-controller", "wrc.v2"))
    assert not allowed.defaulted
    assert allowed.allows("wrc.v2")
    assert not allowed.allows("payments-api")
    assert not allowed.allows("WRC")  # names are exact, never case-folded


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("*", "there is no wildcard"),
        ("wrc,*-api", "there is no wildcard"),
        ("Bad_Name", "'Bad_Name' is not a Deployment name"),
        ("wrc,-lead", "'-lead' is not a Deployment name"),
        ("a" * 254, "is not a Deployment name"),
    ],
)
def test_malformed_settings_are_errors_naming_the_entry_and_the_fix(raw: str, named: str) -> None:
    with pytest.raises(AllowListError) as info:
        parse(raw)
    message = str(info.value)
    assert named in message
    assert ALLOWED_TARGETS_VAR in message
    assert "comma-separated names" in message


def test_every_bad_entry_is_named_at_once() -> None:
    with pytest.raises(AllowListError) as info:
        parse("Bad_One,ok,*")
    assert "'Bad_One'" in str(info.value) and "wildcard" in str(info.value)


def test_from_environ_reads_the_setting() -> None:
    assert from_environ({}) == DEFAULT
    assert from_environ({ALLOWED_TARGETS_VAR: "wrc"}).names == ("wrc",)


def test_an_allowed_target_is_not_refused() -> None:
    assert refusal(DEFAULT_TARGET, {}) is None
    assert refusal("wrc", {ALLOWED_TARGETS_VAR: "workflow-recipe-controller,wrc"}) is None


def test_the_confused_deputy_attempt_is_refused_naming_field_and_allowed_names() -> None:
    message = refusal("payments-api", {})
    assert message is not None
    assert message.startswith("spec.target.deployment: Deployment 'payments-api' ")
    assert "allowed: workflow-recipe-controller (the default, as SPILLOVER_ALLOWED_TARGETS" in (
        message
    )
    assert "Nothing was read or changed" in message


def test_refusal_names_the_configured_list() -> None:
    message = refusal("payments-api", {ALLOWED_TARGETS_VAR: "wrc-a, wrc-b"})
    assert message is not None
    assert "allowed: wrc-a, wrc-b (the operator's SPILLOVER_ALLOWED_TARGETS)" in message


def test_a_malformed_setting_refuses_every_target_and_says_why() -> None:
    environ = {ALLOWED_TARGETS_VAR: "*"}
    for target in (DEFAULT_TARGET, "payments-api"):
        message = refusal(target, environ)
        assert message is not None
        assert message.startswith(f"spec.target.deployment: {target!r} cannot be checked")
        assert "there is no wildcard" in message
        assert "configures no Deployment until its setting is fixed" in message


# ---- the recipe workloads a refresh may restart ----------------------------------


def test_refresh_allow_list_is_empty_unless_named() -> None:
    assert allowlist.refresh_allow_list({}).owners == frozenset()
    env = {
        allowlist.REFRESH_DEPLOYMENTS_VAR: " mcp-host-r1, mcp-host-r2 ,",
        allowlist.REFRESH_STATEFULSETS_VAR: "mcp-s",
    }
    assert allowlist.refresh_allow_list(env).owners == frozenset(
        {Owner("Deployment", "mcp-host-r1"), Owner("Deployment", "mcp-host-r2"),
         Owner("StatefulSet", "mcp-s")}
    )  # fmt: skip


def test_refresh_refusal_names_the_owner_the_allowed_ones_and_the_fix() -> None:
    env = {allowlist.REFRESH_DEPLOYMENTS_VAR: "mcp-host-r1"}
    assert allowlist.refresh_refusal(Owner("Deployment", "mcp-host-r1"), env) is None
    # Same name, other kind: not allowed.
    db = allowlist.refresh_refusal(Owner("StatefulSet", "mcp-host-r1"), env)
    assert db is not None and db.startswith("StatefulSet/mcp-host-r1 is not a recipe workload")
    assert "allowed: Deployment/mcp-host-r1" in db and "recipeStatefulSets" in db
    # Nothing named: nothing allowed, and it says so.
    ledger = allowlist.refresh_refusal(Owner("Deployment", "ledger"), {})
    assert ledger is not None and "allowed: none" in ledger
    # Pods of other controllers are never deleted, bare pods never touched.
    job = allowlist.refresh_refusal(Owner("Job", "x"), env)
    assert job is not None and "never deletes pods" in job
    bare = allowlist.refresh_refusal(NO_OWNER, env)
    assert bare is not None and "no controller" in bare


def test_a_malformed_refresh_setting_refuses_every_owner() -> None:
    env = {allowlist.REFRESH_STATEFULSETS_VAR: "*"}
    with pytest.raises(allowlist.AllowListError, match="no wildcard, name each StatefulSet"):
        allowlist.refresh_allow_list(env)
    message = allowlist.refresh_refusal(Owner("StatefulSet", "anything"), env)
    assert message is not None and "restarts nothing until its setting is fixed" in message
