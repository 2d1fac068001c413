"""Counters read straight from the scrape targets Prometheus matches (no scrape wait).

After a stage, the block check needs the counters' values at the end of the last
block. Prometheus holds them only after its next scrape of every matched target (up
to one scrape interval later). The targets themselves hold them now: Prometheus'
`/api/v1/targets` names each active target's `scrapeUrl` and its labels (the labels
of its `up` series), so the harness fetches the same exposition Prometheus would
scrape and sums the counters over the same series.

`read_direct` returns the sums, or `DirectReadFailed` with why (the caller then waits
for a scrape instead). It fails, rather than guess, when:

- a matched target is not healthy at its last scrape (Prometheus would hold no
  samples for it after the next one either), or cannot be fetched within the
  timeout, or its exposition does not parse;
- Prometheus matches a target (`up{selector}`) that is not among the active
  targets the selector picks (the two views of the target set disagree);
- a counter series Prometheus holds for the matched targets is absent from what
  the targets expose, labels included (a relabelling this module does not model).

Series labels are what Prometheus stores with the default `honor_labels: false`:
the target's labels, and a sample's own label that clashes with one of them kept as
`exported_<name>`. The selector (PromQL label matchers, see
`profile.validators.check_prom_matchers`) is applied to those labels, as Prometheus
applies it to the series.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from spillover_harness.collectors.prometheus import _selector
from spillover_harness.profile.validators import split_prom_matchers

# The exposition Prometheus' classic text parser reads; prometheus_client serves it.
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

SeriesKey = tuple[str, frozenset[tuple[str, str]]]
"""A series: its metric name and its labels (without `__name__`)."""


class DirectReadFailed(Exception):
    """The counters could not be read from the targets; the message says why."""


class TargetsChanging(DirectReadFailed):
    """Prometheus' view of the targets is not settled (a matched target not healthy,
    or not yet scraped; none matched; its two target lists disagree; a series it holds
    gone from the targets): what a rollout that replaced the pods looks like for a few
    seconds, so worth another look. Other failures (a target the harness cannot
    fetch) will not change by waiting."""


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # "=", "!=", "=~", "!~"
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        have = labels.get(self.name, "")  # an absent label matches as ""
        if self.op == "=":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        hit = re.fullmatch(self.value, have) is not None
        return hit if self.op == "=~" else not hit


def parse_matchers(text: str) -> list[Matcher]:
    """PromQL label matchers without braces (`namespace="clerum", job=~"mcp.*"`), as
    the profile accepts them (`profile.validators.split_prom_matchers`). Raises
    DirectReadFailed for what this module does not read."""
    try:
        parts = split_prom_matchers(text)
    except ValueError:
        raise DirectReadFailed(f"selector not understood here: {text!r}") from None
    out: list[Matcher] = []
    for name, op, quoted in parts:
        try:
            value = json.loads(quoted)  # PromQL's double-quoted strings escape as JSON
        except json.JSONDecodeError:
            raise DirectReadFailed(f"selector value not understood here: {quoted}") from None
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise DirectReadFailed(f"selector regex {value!r}: {exc}") from None
        out.append(Matcher(name, op, value))
    return out


def series_labels(target: Mapping[str, str], sample: Mapping[str, str]) -> dict[str, str]:
    """The labels Prometheus stores for a sample scraped from a target (honor_labels
    false): the target's labels win; a clashing sample label becomes exported_<name>."""
    out = {k: v for k, v in sample.items() if v != ""}
    for name, value in target.items():
        if name in out:
            clash = out.pop(name)
            exported = f"exported_{name}"
            while exported in out or exported in target:
                exported = f"exported_{exported}"
            out[exported] = clash
        if value != "":
            out[name] = value
    return out


@dataclass(frozen=True)
class Target:
    labels: dict[str, str]
    scrape_url: str


@dataclass(frozen=True)
class DirectRead:
    """The sums per counter name, over the series of `targets` the selector matches."""

    sums: dict[str, float]
    targets: list[Target]
    series: dict[SeriesKey, float]


def matched_targets(active: Sequence[Mapping[str, Any]], matchers: list[Matcher]) -> list[Target]:
    """The active targets whose labels the selector matches; DirectReadFailed when one
    of them was not healthy at its last scrape."""
    out: list[Target] = []
    for t in active:
        labels = {str(k): str(v) for k, v in (t.get("labels") or {}).items()}
        if not all(m.matches(labels) for m in matchers):
            continue
        if t.get("health") != "up":
            raise TargetsChanging(
                f"target {t.get('scrapeUrl')} was {t.get('health')!r} at its last scrape"
            )
        out.append(Target(labels, str(t["scrapeUrl"])))
    return out


def fetch_series(
    target: Target, names: tuple[str, ...], matchers: list[Matcher], timeout_s: float
) -> dict[SeriesKey, float]:
    """The target's series of `names` the selector matches, with Prometheus' labels."""
    try:
        resp = requests.get(target.scrape_url, headers={"Accept": ACCEPT}, timeout=timeout_s)
    except requests.RequestException as exc:
        raise DirectReadFailed(
            f"target {target.scrape_url} not read: {type(exc).__name__}"
        ) from None
    if resp.status_code != 200:
        raise DirectReadFailed(f"target {target.scrape_url} answered HTTP {resp.status_code}")
    try:
        families = list(text_string_to_metric_families(resp.text))
    except Exception as exc:  # the parser raises ValueError and others on bad text
        raise DirectReadFailed(
            f"target {target.scrape_url}: exposition not parsed ({type(exc).__name__})"
        ) from None
    out: dict[SeriesKey, float] = {}
    for family in families:
        for sample in family.samples:
            if sample.name not in names:
                continue
            labels = series_labels(target.labels, sample.labels)
            if all(m.matches(labels) for m in matchers):
                out[(sample.name, frozenset(labels.items()))] = float(sample.value)
    return out


def read_direct(
    prom: Any,
    names: tuple[str, ...],
    selectors: str,
    *,
    timeout_s: float,
    pods: Collection[str] = (),
    pod_label: str = "pod",
) -> DirectRead:
    """The counters `names`, summed over the matched targets' series, read from the
    targets themselves (see the module doc). `prom`: a connected PrometheusConnect.

    `pods`: the pods whose counters the caller needs. While a matched target names its
    pod (`pod_label`) and one of `pods` is not among them, Prometheus has not found it
    yet (its discovery applies changes every 5 s, and a pod replaced by a switch may
    still be listed) or it was replaced: TargetsChanging, before any target is fetched
    (the caller's retries tell the two apart by time)."""
    matchers = parse_matchers(selectors)
    active = prom.get_targets(state="active").get("activeTargets") or []
    targets = matched_targets(active, matchers)
    if not targets:
        raise TargetsChanging("no active target matches the selector")
    listed = {t.labels[pod_label] for t in targets if pod_label in t.labels}
    unlisted = sorted(set(pods) - listed) if listed else []
    if unlisted:
        raise TargetsChanging(
            f"Prometheus does not list the pod(s) {', '.join(unlisted)} among its targets "
            "(not found yet, or replaced)"
        )
    known = {frozenset(t.labels.items()) for t in targets}
    for sample in prom.custom_query(f"up{_selector(selectors)}"):
        labels = frozenset((k, v) for k, v in sample["metric"].items() if k != "__name__")
        if labels not in known:
            raise TargetsChanging(
                "Prometheus matches a target that is not among the active targets: "
                + ", ".join(f'{k}="{v}"' for k, v in sorted(labels))
            )
    held: set[SeriesKey] = set()
    query = _selector(f'__name__=~"{"|".join(names)}"', selectors)
    for sample in prom.custom_query(query):
        metric = dict(sample["metric"])
        name = metric.pop("__name__", "")
        held.add((name, frozenset(metric.items())))
    series: dict[SeriesKey, float] = {}
    for target in targets:
        series.update(fetch_series(target, names, matchers, timeout_s))
    missing = sorted(held - set(series), key=lambda s: (s[0], sorted(s[1])))
    if missing:
        name, labels = missing[0]
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels))
        raise TargetsChanging(
            f"{len(missing)} series Prometheus holds not found on the targets, e.g. "
            f"{name}{{{shown}}}"
        )
    sums = dict.fromkeys(names, 0.0)
    for (name, _), value in series.items():
        sums[name] += value
    return DirectRead(sums, targets, series)
