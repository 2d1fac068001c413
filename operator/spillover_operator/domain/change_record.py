"""Who changed a policy, when, why and with what: the change record.

`spilloverctl` writes it with every spec change it makes, as the annotation
`spillover.clerum.io/change-record` (JSON, keys in this order):

    {"user":"alice","generation":4,"time":null,
     "tool":"spilloverctl kill","reason":"INC-123"}

- `user` is the authenticated Kubernetes user, as the API server told spilloverctl
  (SelfSubjectReview), never `$USER`;
- `generation` is the policy generation the change makes (the spec change and the
  record travel in one request, with a resourceVersion precondition);
- `tool` and `reason` are what the client says (its name, your words);
- `time` is null: a writer's clock proves nothing, and neither does anything else on
  the policy a policy editor can write (the record's own `time`, `metadata.managedFields`,
  which an editor may rewrite at will). The time shown is `LastChange.seen_at`: when
  the operator first reported this change, from its own status (`status.lastChange.seenAt`,
  the status subresource, which only the operator's Role may write); `spilloverctl
  kill/restore/set` show the time the API server stamped on their own write, in its
  answer to that write. Otherwise no time is shown.

What the record says is shown as written, but on one line: every character a terminal
could act on (a newline, ESC, any other control or format character, and a backslash)
is escaped as Python's repr escapes it (`quoting.escaped`), in `status`, `status.lastChange`
and the Events alike, so a record cannot print a line of its own.

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
from spillover_operator.domain.quoting import escaped

KEYS = ("user", "generation", "time", "tool", "reason")
# The field manager of the writes that carry a record, and of no other write: in the
# answer to that write, its managedFields entry's `time` is the server's time of it.
# Never read from a policy read later: a policy editor may rewrite managedFields.
RECORD_MANAGER = "spilloverctl-change-record"
# status.lastChange's key for when the operator first reported the change.
SEEN_AT = "seenAt"


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
            raise UnreadableRecord(f"key '{escaped(key)}' appears twice")
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
        keys = ", ".join(escaped(key) for key in unknown)
        raise UnreadableRecord(f"not a change record: unknown keys {keys}")
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
    (no record, a record of an earlier generation, an unreadable one). `seen_at`: when
    the change was made, from a source no policy editor can write ("" when there is
    none; the record's own `time` is never shown)."""

    generation: int | None
    record: ChangeRecord | None
    why_none: str = ""
    seen_at: str = ""

    def shown(self) -> dict[str, str | None]:
        """The record's user, tool and reason as shown: on one line, escaped."""
        rec = self.record
        if rec is None:
            return {}
        return {
            "user": escaped(rec.user),
            "tool": escaped(rec.tool) or None,
            "reason": escaped(rec.reason) if rec.reason else None,
        }

    def describe(self) -> str:
        """One line for Events and `spilloverctl status`."""
        gen = f"generation {self.generation}" if self.generation is not None else "the policy"
        if self.record is None:
            return f"{gen} changed without a reason by an unknown user; {self.why_none}"
        shown = self.shown()
        tool = f" with {shown['tool']}" if shown["tool"] else ""
        when = f" at {self.seen_at}" if self.seen_at else ""
        reason = f": {shown['reason']}" if shown["reason"] else " (no reason given)"
        return f"{gen} changed by {shown['user']}{tool}{when}{reason}"

    def to_status(self) -> dict[str, Any]:
        """`status.lastChange`."""
        out: dict[str, Any] = {"generation": self.generation, "recorded": self.record is not None}
        if self.record is not None:
            out.update(self.shown())
            out[SEEN_AT] = self.seen_at or None
        else:
            out["note"] = self.why_none
        return {k: v for k, v in out.items() if v is not None}


def _owns_record(fields: Any) -> bool:
    meta = fields.get("f:metadata") if isinstance(fields, Mapping) else None
    annotations = meta.get("f:annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and (f"f:{CHANGE_RECORD_ANNOTATION}" in annotations)


def written_at(meta: Mapping[str, Any]) -> str:
    """The server's time of the write that carried the record, from the `metadata` of
    the API server's answer to that very write (`RECORD_MANAGER`'s managedFields entry
    owning the record annotation); "" when there is none. Only for the answer to one's
    own write: on a policy read later, a policy editor may have rewritten managedFields."""
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


def _seen_before(policy: Mapping[str, Any], change: LastChange) -> str:
    """When the operator first reported `change` (status.lastChange.seenAt), if its
    status describes this very change: the same generation, recorded, and the same
    user, tool and reason. "" otherwise."""
    status = policy.get("status")
    seen = status.get("lastChange") if isinstance(status, Mapping) else None
    if not isinstance(seen, Mapping) or seen.get("recorded") is not True:
        return ""
    if seen.get("generation") != change.generation:
        return ""
    if any(seen.get(key) != value for key, value in change.shown().items()):
        return ""
    when = seen.get(SEEN_AT)
    return when if isinstance(when, str) else ""


def last_change(policy: Mapping[str, Any], *, seen_at: str = "") -> LastChange:
    """The change that made the policy's current `metadata.generation`.

    Its time: when the operator's status says it first reported this change, else
    `seen_at` (the operator passes its clock's now, spilloverctl the server's time of
    its own write), else none."""
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
    change = LastChange(generation, record)
    return dataclasses.replace(change, seen_at=_seen_before(policy, change) or seen_at)
