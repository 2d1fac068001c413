"""Scripted, seeded agents: what the simulated model answers at each iteration.

An agent is a generator. It yields a `Turn` (the model's answer: some text and
tool calls, or the final output when there are no calls) and receives the
contents of the tool messages for those calls, exactly as the model would see
them in its next prompt: inline results, spillover summaries or read results.
It never looks at the fixture itself, only at what the tools returned, so a
result it only saw summarized must be read back before it can use it.

Every random choice comes from the agent's seed, drawn in a fixed order that does
not depend on what spillover did, so repetition k explores the same way under
every configuration and the comparison between configurations is paired.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from spillover_harness.fixtures import CODE_REVIEW, SUMMARIZE
from spillover_harness.plan.sim_model import SimModel
from spillover_harness.sim.store import READ_TOOL


# How much the agent reads at once, its windows and how often it reads lazily are the
# parameters of `plan/sim_model.py` (today's values are its defaults).
@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """One model answer. No tool calls means it is the step's final output."""

    text: str
    calls: tuple[ToolCall, ...] = ()

    @property
    def final(self) -> bool:
        return not self.calls


Agent = Generator[Turn, list[str], None]
_Reads = Generator[Turn, list[str], Any]


@dataclass(frozen=True)
class Spilled:
    ref: str
    size: int
    structure: str
    head: str
    tail: str
    max_read: int


def parse_content(content: str) -> dict[str, Any] | Spilled:
    """A tool message's content as the model understands it."""
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return {"error": "unreadable tool result"}
    if not isinstance(value, dict):
        return {"value": value}
    info = value.get("spillover")
    if isinstance(info, dict) and isinstance(info.get("ref"), str):
        return Spilled(
            ref=info["ref"],
            size=int(info.get("sizeBytes", 0)),
            structure=str(info.get("structure", "")),
            head=str(info.get("head", "")),
            tail=str(info.get("tail", "")),
            max_read=int(info.get("maxReadBytes", 4096)),
        )
    return value


@dataclass(frozen=True)
class Stashed:
    """A result the handoff cache kept out (docs/simulator.md §8): ask for extractions."""

    result_id: str
    size: int
    structure: str
    preview: str
    query_tool: str


def parse_stashed(content: str) -> Stashed | None:
    """The handoff placeholder in a tool message, or None (anything else)."""
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return None
    info = value.get("handoff") if isinstance(value, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("resultId"), str):
        return None
    return Stashed(
        result_id=info["resultId"],
        size=int(info.get("sizeBytes", 0)),
        structure=str(info.get("structure", "")),
        preview=str(info.get("preview", "")),
        query_tool=str(info.get("queryWith", "")),
    )


def _evicted(answer: dict[str, Any]) -> bool:
    return "evicted" in str(answer.get("error", ""))


_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def unescape_fragment(fragment: str) -> str:
    """Decode the JSON string escapes of a slice of JSON text (a partial document)."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        return chr(int(code[1:], 16)) if code[0] == "u" else _ESCAPES[code]

    return _ESCAPE.sub(one, fragment)


def _derive(seed: str, purpose: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x1f{purpose}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


_FILLERS = (
    "I want to be sure nothing is missed.",
    "This should give me the context I need.",
    "Let me keep track of what I have seen so far.",
    "I will note anything suspicious as I go.",
    "Then I can compare it with the rest of the change.",
    "That keeps the review grounded in the actual code.",
)


class _Ctx:
    def __init__(self, seed: str, model: SimModel) -> None:
        self.model = model
        self.plan = _derive(seed, "plan")
        self._ids = _derive(seed, "ids")
        self._talk = _derive(seed, "talk")

    def call(self, name: str, **arguments: Any) -> ToolCall:
        return ToolCall(f"call_{self._ids.getrandbits(64):016x}", name, arguments)

    def say(self, text: str) -> str:
        extra = [self._talk.choice(_FILLERS) for _ in range(self._talk.randint(0, 2))]
        return " ".join([text, *extra])

    # -- getting content back from a spilled result -----------------------------------

    def read_all(self, s: Spilled, why: str) -> _Reads:
        """Read a whole spilled result (parallel ranged reads); returns its bytes or None."""
        calls = tuple(
            self.call(READ_TOOL, ref=s.ref, offset=o, length=min(s.max_read, s.size - o))
            for o in range(0, s.size, s.max_read)
        )
        results = yield Turn(self.say(why), calls)
        pieces: dict[int, bytes] = {}
        for content in results:
            r = parse_content(content)
            if isinstance(r, Spilled) or "data" not in r:
                return None
            pieces[int(r["offset"])] = str(r["data"]).encode("utf-8")
        data = b"".join(pieces[o] for o in sorted(pieces))
        while len(data) < s.size:  # a read cut short at a character boundary
            results = yield Turn(
                self.say("Reading the rest."),
                (self.call(READ_TOOL, ref=s.ref, offset=len(data), length=s.max_read),),
            )
            r = parse_content(results[0])
            if isinstance(r, Spilled) or not r.get("data"):
                return None
            data += str(r["data"]).encode("utf-8")
        return data

    def read_windows(self, s: Spilled, windows: list[tuple[int, int]], why: str) -> _Reads:
        """Read byte windows of a spilled result; returns the decoded fragments."""
        calls: list[ToolCall] = []
        for start, end in windows:
            for o in range(start, end, s.max_read):
                calls.append(
                    self.call(READ_TOOL, ref=s.ref, offset=o, length=min(s.max_read, end - o))
                )
        results = yield Turn(self.say(why), tuple(calls))
        fragments: list[str] = []
        for content in results:
            r = parse_content(content)
            if not isinstance(r, Spilled) and "data" in r:
                fragments.append(unescape_fragment(str(r["data"])))
        return fragments

    def query(self, s: Stashed, requests: list[dict[str, Any]], why: str) -> _Reads:
        """Ask the handoff cache for extractions (parallel calls); returns the answers."""
        calls = tuple(self.call(s.query_tool, resultId=s.result_id, **r) for r in requests)
        results = yield Turn(self.say(why), calls)
        answers: list[dict[str, Any]] = []
        for content in results:
            r = parse_content(content)
            answers.append(r if isinstance(r, dict) else {"error": "unexpected answer"})
        return answers

    def recall(self, tool: str, why: str, **arguments: Any) -> _Reads:
        """Call a tool again (its cached result was evicted); returns the new content."""
        results = yield Turn(self.say(why), (self.call(tool, **arguments),))
        return results[0]

    def resolve_object(
        self, content: str, why: str, again: tuple[str, dict[str, Any]] | None = None
    ) -> _Reads:
        """The result as an object, reading it back whole when it was spilled, or asking
        the handoff cache for it whole (calling the tool `again` once on a ref miss)."""
        stashed = parse_stashed(content)
        if stashed is not None:
            answers = yield from self.query(stashed, [{}], why)
            answer = answers[0]
            if "value" in answer:
                value = answer["value"]
                return value if isinstance(value, dict) else {"value": value}
            if again is not None and _evicted(answer):
                fresh = yield from self.recall(
                    again[0], "That result was evicted from the cache; asking again.", **again[1]
                )
                result = yield from self.resolve_object(fresh, why)
                return result
            return {"error": "could not extract the handed-off result"}
        view = parse_content(content)
        if not isinstance(view, Spilled):
            return view
        data = yield from self.read_all(view, why)
        if data is None:
            return {"error": "could not read the spilled result"}
        value = json.loads(data.decode("utf-8"))
        return value if isinstance(value, dict) else {"value": value}


# -- code review -----------------------------------------------------------------------


@dataclass(frozen=True)
class Smell:
    kind: str
    pattern: re.Pattern[str]
    explanation: str


SMELLS: tuple[Smell, ...] = (
    Smell(
        "off-by-one",
        re.compile(r"^[ \t]*for \w+ in range\(len\([\w.]+\)\s*\+\s*1\):", re.M),
        "off-by-one: the loop runs one index past the end of the list and raises IndexError",
    ),
    Smell(
        "swallowed-exception",
        re.compile(r"^[ \t]*except Exception:[ \t]*\n[ \t]*pass\b", re.M),
        "`except Exception: pass` swallows every error silently",
    ),
    Smell(
        "hardcoded-secret",
        re.compile(
            r'^[ \t]*\w*(?:token|secret|password)\w*\s*=\s*"[A-Za-z0-9_]{16,}"', re.M | re.I
        ),
        "a hardcoded secret (API token) is committed in the source; load the credential "
        "from the environment",
    ),
    Smell(
        "sql-injection",
        re.compile(r'^[ \t]*\w+\.execute\(f"', re.M),
        "SQL injection: the query is built with an f-string from unsanitized input; use a "
        "parameterized query",
    ),
    Smell(
        "resource-leak",
        re.compile(r"^[ \t]*\w+\s*=\s*open\(", re.M),
        "the file handle is never closed (resource leak); use a context manager",
    ),
)


@dataclass(frozen=True)
class Finding:
    path: str
    kind: str
    explanation: str
    snippet: str
    line: int | None


def detect(path: str, text: str, *, exact_lines: bool) -> list[Finding]:
    found: list[Finding] = []
    for smell in SMELLS:
        for match in smell.pattern.finditer(text):
            line_start = text.rfind("\n", 0, match.start()) + 1
            line_end = text.find("\n", match.start())
            snippet = text[line_start : line_end if line_end >= 0 else len(text)].strip()
            line = text.count("\n", 0, match.start()) + 1 if exact_lines else None
            found.append(Finding(path, smell.kind, smell.explanation, snippet, line))
    return found


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.M)
_LINES = re.compile(r"content: string\((\d+) B, (\d+) lines\)")


@dataclass(frozen=True)
class Hunk:
    new_start: int
    new_len: int
    first_added: str


def parse_hunks(diff: str) -> list[Hunk]:
    hunks: list[Hunk] = []
    for match in _HUNK.finditer(diff):
        body_start = diff.find("\n", match.end()) + 1
        nxt = _HUNK.search(diff, body_start)
        body = diff[body_start : nxt.start() if nxt else len(diff)]
        added = next(
            (ln[1:].strip() for ln in body.splitlines() if ln.startswith("+") and ln[1:].strip()),
            "",
        )
        hunks.append(Hunk(int(match.group(1)), int(match.group(2) or 1), added))
    return hunks


def _added_lines(diff: str) -> str:
    return "\n".join(
        ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")
    )


def _merge(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _hunk_windows(
    s: Spilled, hunks: list[Hunk], margin: tuple[int, int]
) -> list[tuple[int, int]] | None:
    """Estimate where each hunk sits in the spilled read_file result's JSON text."""
    lines = _LINES.search(s.structure)
    marker = s.head.find('"content":"')
    if lines is None or marker < 0 or not hunks:
        return None
    prefix = marker + len('"content":"')
    per_line = max(1.0, (s.size - prefix - 2) / int(lines.group(2)))
    windows = []
    for h in hunks:
        start = prefix + (h.new_start - 1) * per_line - margin[0]
        end = prefix + (h.new_start - 1 + h.new_len) * per_line + margin[1]
        windows.append((max(0, int(start)), min(s.size, int(end))))
    return _merge(windows)


def _line_spans(hunks: list[Hunk], before: int, after: int) -> list[tuple[int, int]]:
    spans = [(max(1, h.new_start - before), h.new_start + h.new_len - 1 + after) for h in hunks]
    return _merge(spans)


def _stashed_file_text(
    ctx: _Ctx, path: str, s: Stashed, hunks: list[Hunk], again: bool = True
) -> _Reads:
    """A handed-off file: ask for the whole text when small, else the lines around each
    hunk (exact line numbers: the cache extracts by line). On a ref miss, read it again."""
    model = ctx.model
    lines = _LINES.search(s.structure)
    if lines is None or s.size <= model.full_read_limit or not hunks:
        answers = yield from ctx.query(
            s, [{"field": "content"}], f"{path} was handed off; asking for its text."
        )
        spans: list[tuple[int, int]] = []
    else:
        total = int(lines.group(2))
        per_line = max(1.0, int(lines.group(1)) / total)
        spans = _line_spans(
            hunks,
            math.ceil(model.window_before / per_line),
            math.ceil(model.window_after / per_line),
        )
        answers = yield from ctx.query(
            s,
            [{"field": "content", "lines": [a, b]} for a, b in spans],
            f"{path} is large; asking for the lines around each hunk of the diff.",
        )
    if any(_evicted(a) for a in answers) and again:
        fresh = yield from ctx.recall(
            "read_file", f"{path} was evicted; reading it again.", path=path
        )
        result = yield from _file_text(ctx, path, fresh, hunks, again=False)
        return result
    if not spans:
        if not answers or "value" not in answers[0]:
            return s.preview, False
        return str(answers[0]["value"]), True
    total = int(lines.group(2)) if lines else 0
    placed = [""] * total
    for answer in answers:
        if "text" in answer:
            for offset, line in enumerate(str(answer["text"]).split("\n")):
                if 0 <= int(answer["first"]) - 1 + offset < total:
                    placed[int(answer["first"]) - 1 + offset] = line
    seen = "\n".join(placed)
    missing = [h for h in hunks if h.first_added and h.first_added not in seen]
    if missing:
        per_line = max(1.0, int(lines.group(1)) / total) if lines else 1.0
        wide = math.ceil(model.wide_window / per_line)
        more = yield from ctx.query(
            s,
            [{"field": "content", "lines": [a, b]} for a, b in _line_spans(missing, wide, wide)],
            f"I did not find every hunk of {path}; asking for wider ranges around them.",
        )
        for answer in more:
            if "text" in answer:
                for offset, line in enumerate(str(answer["text"]).split("\n")):
                    if 0 <= int(answer["first"]) - 1 + offset < total:
                        placed[int(answer["first"]) - 1 + offset] = line
    return "\n".join(placed), True


def _file_text(ctx: _Ctx, path: str, content: str, hunks: list[Hunk], again: bool = True) -> _Reads:
    """What the reviewer gets to see of a file: (text, exact line numbers?)."""
    stashed = parse_stashed(content)
    if stashed is not None:
        result = yield from _stashed_file_text(ctx, path, stashed, hunks, again)
        return result
    view = parse_content(content)
    if not isinstance(view, Spilled):
        return str(view.get("content", "")), True
    model = ctx.model
    windows = (
        None
        if view.size <= model.full_read_limit
        else _hunk_windows(view, hunks, (model.window_before, model.window_after))
    )
    if windows is None:
        data = yield from ctx.read_all(
            view, f"{path} was kept out of the prompt; reading it in full."
        )
        if data is None:
            return view.head + "\n" + view.tail, False
        return str(json.loads(data.decode("utf-8")).get("content", "")), True
    fragments = yield from ctx.read_windows(
        view, windows, f"{path} is large; reading the code around each hunk of the diff."
    )
    seen = "\n".join(fragments)
    missing = [h for h in hunks if h.first_added and h.first_added not in seen]
    if missing:
        wide = _hunk_windows(view, missing, (model.wide_window, model.wide_window)) or []
        more = yield from ctx.read_windows(
            view, wide, f"I did not find every hunk of {path}; reading wider around them."
        )
        fragments.extend(more)
    return "\n".join(
        [unescape_fragment(view.head), *fragments, unescape_fragment(view.tail)]
    ), False


def code_review_agent(seed: str, model: SimModel = SimModel()) -> Agent:  # noqa: B008
    ctx = _Ctx(seed, model)
    results = yield Turn(
        ctx.say("I'll start by listing the files of the change."), (ctx.call("list_files"),)
    )
    listing = yield from ctx.resolve_object(
        results[0], "The file list was kept out; reading it.", ("list_files", {})
    )
    files = {
        str(f["path"]): f for f in listing.get("files", []) if isinstance(f, dict) and "path" in f
    }
    repository = sorted(str(p) for p in listing.get("repository", []))
    order = sorted(files)
    ctx.plan.shuffle(order)
    extras = ctx.plan.sample(repository, min(len(repository), ctx.plan.choice((0, 1, 1, 2))))
    queue: list[tuple[str, bool]] = [(p, False) for p in order]
    for extra in extras:
        queue.insert(ctx.plan.randrange(len(queue) + 1), (extra, True))

    findings: dict[tuple[str, str], Finding] = {}
    notes: list[str] = []
    for path, is_extra in queue:
        if is_extra:
            results = yield Turn(
                ctx.say(f"Let me look at {path} for context on how this code is used."),
                (ctx.call("read_file", path=path),),
            )
            yield from _file_text(ctx, path, results[0], [])
            continue
        results = yield Turn(
            ctx.say(f"Next, {path}: its diff and the whole file."),
            (ctx.call("get_diff", path=path), ctx.call("read_file", path=path)),
        )
        diff_obj = yield from ctx.resolve_object(
            results[0], f"The diff of {path} was kept out.", ("get_diff", {"path": path})
        )
        diff = str(diff_obj.get("diff", ""))
        hunks = parse_hunks(diff)
        text, exact = yield from _file_text(ctx, path, results[1], hunks)
        for f in detect(path, _added_lines(diff), exact_lines=False) + detect(
            path, text, exact_lines=exact
        ):
            key = (f.path, f.kind)
            if key not in findings or (findings[key].line is None and f.line is not None):
                findings[key] = f
        info = files[path]
        notes.append(
            f"- `{path}` ({info.get('status')}, +{info.get('additions')}/-{info.get('deletions')},"
            f" {len(hunks)} hunk{'s' if len(hunks) != 1 else ''}): "
            + ctx.plan.choice(
                (
                    "the change is consistent with the surrounding code.",
                    "logging was adjusted; behaviour otherwise unchanged.",
                    "call sites look correct after the edit.",
                    "no further remarks beyond the findings above.",
                )
            )
        )

    out = [f"# Code review: {listing.get('change', 'the change')}", "", "## Findings", ""]
    if findings:
        for i, f in enumerate(sorted(findings.values(), key=lambda f: (f.path, f.kind)), 1):
            where = f" line {f.line}" if f.line is not None else ""
            out.append(f"{i}. `{f.path}`{where}: **{f.kind}**: {f.explanation}.")
            out.append(f"   `{f.snippet}`")
    else:
        out.append("No problems found.")
    out += ["", "## Files", "", *notes, ""]
    yield Turn("\n".join(out))


# -- summarize -------------------------------------------------------------------------

_FACT = re.compile(
    r"\d{4}-\d{2}-\d{2}|\d+(?:\.\d+)?%|\b[A-Z][a-z]+-\d+\b|\d+ (?:nodes|requests per second)"
)
_SENTENCE_END = re.compile(r"(?<=\.)\s+")


def summarize_text(title: str, text: str) -> str:
    out = [f"# Summary: {title}", ""]
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    for section in sections:
        heading, _, body = section.partition("\n")
        sentences = [s.strip() for s in _SENTENCE_END.split(body.replace("\n", " ")) if s.strip()]
        facts = [s for s in sentences if _FACT.search(s) and not s.startswith("Tracking")]
        plain = [s for s in sentences if s not in facts and not s.startswith("Tracking")]
        points = " ".join(([plain[0]] if plain else []) + facts)
        out.append(f"- **{heading.strip()}**: {points}")
    if not sections:
        out.append("The document could not be read.")
    out.append("")
    return "\n".join(out)


def summarize_agent(seed: str, model: SimModel = SimModel()) -> Agent:  # noqa: B008
    ctx = _Ctx(seed, model)
    lazy = ctx.plan.random() < model.lazy_reader_p
    results = yield Turn(ctx.say("I'll read the document first."), (ctx.call("read_document"),))
    stashed = parse_stashed(results[0])
    if stashed is not None:
        yield from _summarize_stashed(ctx, stashed, lazy)
        return
    view = parse_content(results[0])
    if not isinstance(view, Spilled):
        yield Turn(summarize_text(str(view.get("title", "")), str(view.get("content", ""))))
        return
    # All the ranges in one answer (parallel reads), as the handoff reader asks for all
    # its sections at once: both strategies read a document the same way (§8).
    data = b""
    if lazy:
        # "I have the head, the middle and the tail": a lazy reader asks for the first
        # `lazy_read_fraction` of the ranges only.
        data = yield from _read_head(ctx, view, math.ceil(model.lazy_read_fraction * view.size))
    else:
        whole = yield from ctx.read_all(view, "Reading the whole document.")
        data = whole or b""
    title_match = re.search(r'"title":"((?:[^"\\]|\\.)*)"', view.head)
    title = unescape_fragment(title_match.group(1)) if title_match else "the document"
    if len(data) >= view.size:
        text = str(json.loads(data.decode("utf-8")).get("content", ""))
    else:
        text = unescape_fragment(data.decode("utf-8", errors="ignore") + view.tail)
    yield Turn(summarize_text(title, text))


def _read_head(ctx: _Ctx, view: Spilled, upto: int) -> _Reads:
    """The ranges of a spilled result that start before byte `upto`, in one answer;
    returns their bytes in order (a range that did not come back is left out)."""
    calls = tuple(
        ctx.call(READ_TOOL, ref=view.ref, offset=o, length=min(view.max_read, view.size - o))
        for o in range(0, min(upto, view.size), view.max_read)
    )
    results = yield Turn(ctx.say("Reading the first part of the document."), calls)
    pieces: dict[int, bytes] = {}
    for content in results:
        r = parse_content(content)
        if not isinstance(r, Spilled) and r.get("data"):
            pieces[int(r["offset"])] = str(r["data"]).encode("utf-8")
    return b"".join(pieces[o] for o in sorted(pieces))


def _summarize_stashed(ctx: _Ctx, s: Stashed, lazy: bool, again: bool = True) -> Agent:
    """A handed-off document: ask for its outline, then for its sections (all in one
    answer; a lazy reader only for the first `lazy_read_fraction` of them)."""
    answers = yield from ctx.query(
        s, [{"field": "content", "outline": True}], "The document was handed off; its outline."
    )
    if _evicted(answers[0]) and again:
        fresh = yield from ctx.recall("read_document", "It was evicted; reading it again.")
        stashed = parse_stashed(fresh)
        if stashed is not None:
            yield from _summarize_stashed(ctx, stashed, lazy, again=False)
            return
        view = parse_content(fresh)
        text = str(view.get("content", "")) if isinstance(view, dict) else ""
        yield Turn(
            summarize_text(str(view.get("title", "")) if isinstance(view, dict) else "", text)
        )
        return
    heads = [h for h in answers[0].get("outline", []) if h.get("level") == 2]
    total = int(answers[0].get("lines", 0))
    spans = [
        (int(h["line"]), int(heads[i + 1]["line"]) - 1 if i + 1 < len(heads) else total)
        for i, h in enumerate(heads)
    ]
    if lazy:
        spans = spans[: max(1, math.ceil(ctx.model.lazy_read_fraction * len(spans)))]
    texts: list[str] = []
    if spans:
        sections = yield from ctx.query(
            s,
            [{"field": "content", "lines": [a, b]} for a, b in spans],
            "Asking for every section of the document.",
        )
        texts = [str(a["text"]) for a in sections if "text" in a]
    title_match = re.search(r'"title":"((?:[^"\\]|\\.)*)"', s.preview)
    title = unescape_fragment(title_match.group(1)) if title_match else "the document"
    yield Turn(summarize_text(title, "\n".join(texts)))


def make_agent(recipe: str, seed: str, model: SimModel = SimModel()) -> Agent:  # noqa: B008
    """The scripted agent of `recipe`, reading as `model` says (docs/simulator.md §1.5)."""
    if recipe == CODE_REVIEW:
        return code_review_agent(seed, model)
    if recipe == SUMMARIZE:
        return summarize_agent(seed, model)
    raise ValueError(f"no simulated agent for recipe '{recipe}'")
