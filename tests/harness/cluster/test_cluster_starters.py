"""`starters.object_name`: custom-resource run names are valid Kubernetes names."""

from __future__ import annotations

import re

import pytest
from spillover_harness.cluster.starters import StartError, object_name
from spillover_harness.results.records import RunKey, run_id_for

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def test_the_default_configuration_names_give_valid_distinct_names() -> None:
    ids = [
        run_id_for(RunKey("minikube", config, "code-review", "large", 1))
        for config in ("128KiB", "128kib", "32KiB", "off")
    ]
    names = [object_name(f"spill-{run_id}") for run_id in ids]
    assert names[0].startswith("spill-minikube-128kib-code-review-large-r1-")
    assert all(DNS_SUBDOMAIN.fullmatch(n) and len(n) <= 253 for n in names), names
    assert len(set(names)) == len(names)  # the run id's hash keeps 128KiB and 128kib apart


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Spill_Run__1", "spill-run-1"),
        ("-a.-b-.", "a.b"),
        ("run.ID", "run.id"),
    ],
)
def test_other_characters_become_dashes(text: str, name: str) -> None:
    assert object_name(text) == name


def test_a_long_name_is_cut_and_keeps_a_hash() -> None:
    a, b = object_name("x" * 300 + "A"), object_name("x" * 300 + "B")
    assert len(a) == 253 and a != b
    assert DNS_SUBDOMAIN.fullmatch(a)


def test_nothing_usable_is_refused() -> None:
    with pytest.raises(StartError, match="no letter or digit"):
        object_name("__")
