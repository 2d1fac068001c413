"""The recipes' tools, as the simulated mcp-host runs them against a fixture."""

from __future__ import annotations

from typing import Any

from spillover_harness.fixtures import CODE_REVIEW, SUMMARIZE, Fixture
from spillover_harness.sim.store import READ_TOOL


def _tool(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


_PATH = {"path": {"type": "string", "description": "repository-relative file path"}}

RECIPE_TOOLS: dict[str, list[dict[str, Any]]] = {
    CODE_REVIEW: [
        _tool(
            "list_files",
            "List the files of the change under review (path, status, lines added and "
            "removed) and the other files of the repository.",
            {},
            [],
        ),
        _tool(
            "get_diff",
            "Return the unified diff of one changed file.",
            _PATH,
            ["path"],
        ),
        _tool(
            "read_file",
            "Return the full text of a repository file at the new revision.",
            _PATH,
            ["path"],
        ),
    ],
    SUMMARIZE: [
        _tool(
            "read_document",
            "Return the document to summarize (title and full Markdown text).",
            {},
            [],
        ),
    ],
}


def read_tool_definition(threshold: int) -> dict[str, Any]:
    return _tool(
        READ_TOOL,
        "Read a tool result that spillover kept out of the prompt. Returns at most "
        f"{threshold} bytes of the result's JSON text per call; read larger results "
        "with offset and length.",
        {
            "ref": {"type": "string", "description": "spillover://<stepId>/<callId>.json"},
            "offset": {"type": "integer", "minimum": 0},
            "length": {"type": "integer", "minimum": 1, "maximum": threshold},
        },
        ["ref"],
    )


SYSTEM_PROMPTS: dict[str, str] = {
    CODE_REVIEW: (
        "You are a meticulous senior software engineer reviewing a code change. Use the "
        "tools to list the changed files, read every diff and the full text of each "
        "changed file, because defects often hide in the code around a change. Report "
        "every correctness, security and reliability problem you find with the file, "
        "the line when you know it and a short explanation; do not invent problems. "
        "Finish with a short per-file summary. Be concise: the review is read by busy "
        "people, and findings must be actionable."
    ),
    SUMMARIZE: (
        "You are a careful technical writer. Read the whole document with the tools and "
        "write a faithful summary that covers every section from the beginning to the "
        "end, keeping the concrete facts: dates, figures, names and decisions. Do not "
        "add facts that are not in the document."
    ),
}

TASKS: dict[str, str] = {
    CODE_REVIEW: "Review the change in this repository and report your findings.",
    SUMMARIZE: "Summarize the attached document for the platform steering group.",
}


def run_tool(fixture: Fixture, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The raw result of one tool call (before spillover sees it)."""
    if fixture.recipe == CODE_REVIEW:
        if name == "list_files":
            changed = {c.path for c in fixture.changed}
            return {
                "change": fixture.title,
                "files": [
                    {
                        "path": c.path,
                        "status": c.status,
                        "additions": c.additions,
                        "deletions": c.deletions,
                    }
                    for c in fixture.changed
                ],
                "repository": [p for p in fixture.repo_paths() if p not in changed],
            }
        if name == "get_diff":
            path = arguments.get("path")
            if not isinstance(path, str) or path not in fixture.diffs:
                return {"error": f"not a file of the change: {path!r}"}
            return {"path": path, "diff": fixture.diffs[path]}
        if name == "read_file":
            path = arguments.get("path")
            text = fixture.source(path) if isinstance(path, str) else None
            if text is None:
                return {"error": f"no such file: {path!r}"}
            return {"path": path, "content": text}
    if fixture.recipe == SUMMARIZE and name == "read_document":
        return {"title": fixture.title, "content": fixture.document}
    return {"error": f"unknown tool: {name}"}
