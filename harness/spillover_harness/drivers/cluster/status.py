"""Reading the platform's run status through the profile's JSONPaths (`fields.*`,
`disk.output_dir_path`): a value of the expected type, or None when it is absent or of
another type (the field is then looked for elsewhere, or recorded unmeasured)."""

from __future__ import annotations

from datetime import datetime

from spillover_harness.profile import JsonPath


def first(path: str | None, doc: object) -> object | None:
    return None if path is None else JsonPath.parse(path).first(doc)


def as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
