"""Who changed a policy, when, why and with what: the change record.

`spilloverctl` writes it with every spec change it makes, as the annotation
`spillover.clerum.io/change-record` (JSON, keys in this order):

    {"user":"alice","generation":4,"time":"2026-12-02T10:00:00Z",
     "tool":"spilloverctl kill","reason":"INC-123"}

- `user` is the authenticated Kubernetes user, as the API server told spilloverctl
  (SelfSubjectReview), never `$USER`;
- `generation` is the policy generation the change makes (the spec change and the
  record travel in one request, with a resourceVersion precondition);
- `tool` and `reason` are what the client says (its name, your words);
- `time` is the API server's: spilloverctl writes the record as the field manager
  `RECORD_MANAGER`, whose managedFields entry the server stamps with the time of the
  write that carried the record (only record-carrying writes use that manager), and
  `last_change` reads it from there. The record's own `time` is null; an older record
  that carries one is shown with it only when no such entry is found.

The admission policy `spillover-change-record` (manifests/base/admission.yaml) admits a
record only from the user it names, only for the generation the same request stores,
and only together with a spec change: the record on a policy can describe nothing but
the spec change it came with. A later spec change without a record (kubectl, GitOps)
leaves the old record behind, naming an older generation: `last_change` then reports
the current generation as changed without a record (who and why unknown), never under
the earlier record. Pure: reconcile (Events, status) and `spilloverctl status` read the
policy they have.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spillover_operator.domain.constants import CHANGE_RECORD_ANNOTATION

KEYS = ("user", "generation", "time", "tool", "reason")
# The field manager of the writes that carry a record, and of no other write: its
# managedFields entry's `time` (the server's clock) is when the record was written.
RECORD_MANAGER = "spilloverctl-change-record"


class UnreadableRecord(ValueError):
    """The annotation is not a change record this module writes."""


@dataclass(frozen=True)
class ChangeRecord:
    user: str
    generation: int
    time: str
    tool: str
    reason: str | None = None

    def encode(self) -> str:
        """The annotation value: compact JSON, `user` then `generation` first (the
        admission policy checks that prefix)."""
        return json.dumps(
            {
                "user": self.user,
                "generation": self.generation,
                "time": self.time or None,
                "tool": self.tool,
                "reason": self.reason,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            # The admission policy reads the first "user"; a second one must not win here.
            raise UnreadableRecord(f"key {key!r} appears twice")
        seen[key] = value
    return seen


def decode(text: str) -> ChangeRecord:
    """The record in an annotation value; UnreadableRecord if it is anything else."""
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as exc:  # json.JSONDecodeError and UnreadableRecord
        raise UnreadableRecord(f"not a change record: {exc}") from None
    if not isinstance(doc, dict):
        raise UnreadableRecord("not a change record: not a JSON object")
    if list(doc)[:2] != ["user", "generation"]:
        raise UnreadableRecord("not a change record: it must start with user, then generation")
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise UnreadableRecord(f"not a change record: unknown keys {', '.join(unknown)}")
    user, generation = doc.get("user"), doc.get("generation")
    if not isinstance(user, str) or not user:
        raise UnreadableRecord("not a change record: user is not a name")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
        raise UnreadableRecord("not a change record: generation is not a positive integer")
    fields = {k: doc.get(k) for k in ("time", "tool", "reason")}
    for key, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise UnreadableRecord(f"not a change record: {key} is not a string")
    reason = fields["reason"] or None
    return ChangeRecord(user, generation, fields["time"] or "", fields["tool"] or "", reason)


@dataclass(frozen=True)
class LastChange:
    """What is known about the change that made the policy's current generation:
    `record` when a record describes exactly that generation, else None and `why_none`
    (no record, a record of an earlier generation, an unreadable one)."""

    generation: int | None
    record: ChangeRecord | None
    why_none: str = ""

    def describe(self) -> str:
        """One line for Events and `spilloverctl status`."""
        gen = f"generation {self.generation}" if self.generation is not None else "the policy"
        rec = self.record
        if rec is None:
            return f"{gen} changed without a reason by an unknown user; {self.why_none}"
        tool = f" with {rec.tool}" if rec.tool else ""
        when = f" at {rec.time}" if rec.time else ""
        reason = f": {rec.reason}" if rec.reason else " (no reason given)"
        return f"{gen} changed by {rec.user}{tool}{when}{reason}"

    def to_status(self) -> dict[str, Any]:
        """`status.lastChange`."""
        out: dict[str, Any] = {"generation": self.generation, "recorded": self.record is not None}
        if self.record is not None:
            out.update(
                user=self.record.user,
                time=self.record.time or None,
                tool=self.record.tool or None,
                reason=self.record.reason,
            )
        else:
            out["note"] = self.why_none
        return {k: v for k, v in out.items() if v is not None}


def _owns_record(fields: Any) -> bool:
    meta = fields.get("f:metadata") if isinstance(fields, Mapping) else None
    annotations = meta.get("f:annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and (f"f:{CHANGE_RECORD_ANNOTATION}" in annotations)


def server_time(meta: Mapping[str, Any]) -> str:
    """When the API server stored the record on the policy (`metadata` given): the time
    of the managedFields entry of `RECORD_MANAGER` that owns the record annotation; ""
    when there is none (a record written otherwise)."""
    entries = meta.get("managedFields")
    times = [
        str(entry.get("time"))
        for entry in (entries if isinstance(entries, list) else [])
        if isinstance(entry, Mapping)
        and entry.get("manager") == RECORD_MANAGER
        and entry.get("time")
        and _owns_record(entry.get("fieldsV1"))
    ]
    return max(times, default="")


def last_change(policy: Mapping[str, Any]) -> LastChange:
    """The change that made the policy's current `metadata.generation`."""
    meta = policy.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    raw_gen = meta.get("generation")
    generation = raw_gen if isinstance(raw_gen, int) and not isinstance(raw_gen, bool) else None
    annotations = meta.get("annotations")
    text = annotations.get(CHANGE_RECORD_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(text, str) or not text:
        return LastChange(generation, None, "no change record on the policy")
    try:
        record = decode(text)
    except UnreadableRecord as exc:
        return LastChange(generation, None, f"the change record is unreadable: {exc}")
    if record.generation != generation:
        return LastChange(
            generation,
            None,
            f"the change record describes generation {record.generation}, not this one",
        )
    stored = server_time(meta)
    return LastChange(generation, dataclasses.replace(record, time=stored) if stored else record)
