"""Apply a spec change to a SpilloverPolicy manifest file, editing only the lines of the
fields that change: comments, key order, other documents and formatting are kept.

The file may hold several YAML documents; the one edited is the SpilloverPolicy named
`policy` (and in `namespace`, when the manifest names one). Its `spec` must be a block
mapping (`spec:` then indented keys). A changed value is replaced in place, a new key
is added after the spec's last key at the spec's indentation, a removed key's line is
deleted. The result is parsed again and checked to say exactly what was asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from spillover_operator.domain.strict_load import StrictLoadError, load_yaml_all

from spillover_harness.apply.decision import apply_patch
from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.input_file import InputFileError, read_text_file, shown

__all__ = ["ManifestEdit", "ManifestError", "edit_manifest", "plan_manifest_edit"]

KIND = "SpilloverPolicy"


class ManifestError(Exception):
    """The manifest cannot be edited as asked; the message names the file and why."""


@dataclass(frozen=True)
class ManifestEdit:
    path: Path
    before: dict[str, Any]  # the policy's spec before
    after: dict[str, Any]
    text: str  # the whole file after the edit


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _find_policy(
    docs: list[yaml.Node], path: Path, policy: str, namespace: str | None
) -> yaml.MappingNode:
    found: list[yaml.MappingNode] = []
    for node in docs:
        if not isinstance(node, yaml.MappingNode):
            continue
        data = yaml.safe_load(yaml.serialize(node))
        if not isinstance(data, dict) or data.get("kind") != KIND:
            continue
        meta = data.get("metadata") or {}
        if meta.get("name") != policy:
            continue
        if namespace is not None and meta.get("namespace") not in (None, namespace):
            continue
        found.append(node)
    if not found:
        where = f" in namespace {namespace}" if namespace else ""
        raise ManifestError(
            f"{path}: no {KIND} named {policy!r}{where}; pass the manifest that defines it "
            "(--gitops FILE) or the right --policy / -n"
        )
    if len(found) > 1:
        raise ManifestError(f"{path}: {len(found)} {KIND}s named {policy!r}; keep one")
    return found[0]


def _child(node: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


def plan_manifest_edit(
    path: Path, policy: str, namespace: str | None, patch: Mapping[str, Any]
) -> ManifestEdit:
    """The edited file (not written) and the spec before and after."""
    try:
        text = read_text_file(path, what="manifest")
        # duplicate keys (which one would the cluster get?), .inf, huge integers refused
        load_yaml_all(text, shown(path))
    except (InputFileError, StrictLoadError) as exc:
        raise ManifestError(str(exc)) from None
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from None
    node = _find_policy([d for d in docs if d is not None], path, policy, namespace)
    spec_entry = _child(node, "spec")
    if spec_entry is None or not isinstance(spec_entry[1], yaml.MappingNode):
        raise ManifestError(f"{path}: the {KIND} {policy!r} has no `spec` mapping")
    spec_node = spec_entry[1]
    if spec_node.flow_style or not spec_node.value:
        raise ManifestError(
            f"{path}: the {KIND} {policy!r} writes its spec in flow style ({{...}}); "
            "write it as a block (`spec:` then one key per line) to let it be edited"
        )
    before = yaml.safe_load(yaml.serialize(spec_node)) or {}
    after = apply_patch(before, patch)
    lines = text.splitlines(keepends=True)
    indent = spec_node.value[0][0].start_mark.column
    # (line index, replacement lines): applied from the bottom up
    edits: list[tuple[int, int, list[str]]] = []
    last_line = max(
        v.end_mark.line if v.end_mark.column else v.end_mark.line - 1 for _, v in spec_node.value
    )
    added: list[str] = []
    for key, value in patch.items():
        entry = _child(spec_node, key)
        if entry is None:
            if value is not None:
                added.append(" " * indent + f"{key}: {_scalar(value)}\n")
            continue
        knode, vnode = entry
        if not isinstance(vnode, yaml.ScalarNode) or vnode.start_mark.line != knode.start_mark.line:
            raise ManifestError(f"{path}: spec.{key} is not a one-line value; edit it by hand")
        line = lines[knode.start_mark.line]
        if value is None:
            edits.append((knode.start_mark.line, knode.start_mark.line + 1, []))
        else:
            start, end = vnode.start_mark.column, vnode.end_mark.column
            edits.append(
                (
                    knode.start_mark.line,
                    knode.start_mark.line + 1,
                    [line[:start] + _scalar(value) + line[end:]],
                )
            )
    if added:
        at = last_line + 1
        if at > 0 and at <= len(lines) and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        edits.append((at, at, added))
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        lines[start:end] = replacement
    new_text = "".join(lines)
    check = list(yaml.safe_load_all(new_text))
    node_after = _find_policy(
        [d for d in yaml.compose_all(new_text, Loader=yaml.SafeLoader) if d is not None],
        path,
        policy,
        namespace,
    )
    spec_after = (yaml.safe_load(yaml.serialize(node_after)) or {}).get("spec") or {}
    if spec_after != after or len(check) != len(list(yaml.safe_load_all(text))):
        raise ManifestError(
            f"{path}: editing the manifest did not give the spec asked for ({after}); "
            "edit it by hand"
        )
    return ManifestEdit(path, before, after, new_text)


def edit_manifest(
    path: Path, policy: str, namespace: str | None, patch: Mapping[str, Any], *, write: bool
) -> ManifestEdit:
    """Plan the edit and, with `write`, write the file (atomically, its mode kept). A
    symlink stays a link: the file it points to is the one rewritten."""
    edit = plan_manifest_edit(path, policy, namespace, patch)
    target = path.resolve()  # the atomic rename would replace a link by a plain file
    if write and edit.text != target.read_text(encoding="utf-8"):
        mode = target.stat().st_mode & 0o777
        atomic_write_bytes(target, edit.text.encode("utf-8"))
        target.chmod(mode)
    return edit
