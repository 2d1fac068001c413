"""Run templates: the placeholders a profile's templates may use, checked when the
profile loads, and filled for each run."""

from __future__ import annotations

import string
from collections.abc import Mapping

from spillover_operator.domain.quoting import shorten

__all__ = [
    "DISK_PLACEHOLDERS",
    "POLL_PLACEHOLDERS",
    "RUN_PLACEHOLDERS",
    "check_placeholders",
    "placeholders",
    "render_template",
]

# Placeholders a run template may use.
# `env` is the configuration's environment (a mapping): only for a platform that takes it
# per run, like the simulator behind the local control plane; real platforms get it
# from the policy through the WRC.
RUN_PLACEHOLDERS = frozenset(
    {"recipe", "input", "run_id", "namespace", "seed", "repetition", "env"}
)
# Placeholders of a poll path (http mode): ours, and the id the platform answered with.
POLL_PLACEHOLDERS = frozenset({"run_id", "platform_run_id", "namespace"})
# Placeholders of the output directory to check for `.spill` entries.
DISK_PLACEHOLDERS = frozenset({"run_id", "platform_run_id", "namespace", "recipe", "input"})


def placeholders(text: str) -> set[str]:
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"bad placeholder syntax in {shorten(text)}: {exc}") from None
    names: set[str] = set()
    for _, field, spec, conv in parsed:
        if field is None:
            continue
        if field == "" or spec or conv:
            raise ValueError(
                f"placeholders are plain names like {{run_id}}, got {{{field}}} in {shorten(text)}"
            )
        names.add(field)
    return names


def check_placeholders(value: object, allowed: frozenset[str], where: str = "") -> None:
    """Every string in a template may use only the allowed placeholders."""
    if isinstance(value, str):
        unknown = sorted(placeholders(value) - allowed)
        if unknown:
            at = f" at {where}" if where else ""
            raise ValueError(
                f"unknown placeholder {', '.join('{' + u + '}' for u in unknown)}{at} "
                f"(known: {', '.join('{' + a + '}' for a in sorted(allowed))})"
            )
    elif isinstance(value, Mapping):
        for k, v in value.items():
            check_placeholders(k, allowed, f"{where}.{k}" if where else str(k))
            check_placeholders(v, allowed, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_placeholders(v, allowed, f"{where}.{i}" if where else str(i))


def render_template(template: object, values: Mapping[str, object]) -> object:
    """Fill a run template. A string that is exactly one placeholder (`"{seed}"`)
    becomes the value itself (keeping its type); other strings are formatted."""
    if isinstance(template, str):
        names = placeholders(template)
        if len(names) == 1:
            (only,) = names
            if template == "{" + only + "}":
                return values[only]
        return template.format(**values)
    if isinstance(template, Mapping):
        return {
            str(render_template(k, values)): render_template(v, values) for k, v in template.items()
        }
    if isinstance(template, list):
        return [render_template(v, values) for v in template]
    return template
