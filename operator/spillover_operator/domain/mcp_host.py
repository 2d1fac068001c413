"""What an mcp-host process reports it runs with.

How the mcp-host reads each of its three variables is the policy model's
(`model.EnvField.read`); this module reads the process's own report of its raw values.
"""

from __future__ import annotations

from typing import Final

from spillover_operator.domain.model import DEFAULTS

# ---- what the process itself reports ----------------------------------------------
#
# A pod's spec says what its process was started with, not what it runs with (an image
# that ignores its environment, a value read once and cached). An mcp-host that reports
# what it runs with says where, in its pod's annotation `spillover.clerum.io/report:
# "<port>/<path>"` (for example "8080/spillover"): a GET there answers
# {"runsWith": {VAR: value or null, ...}} with the raw values of the three variables the
# process runs with (null: unset, the default). Where a pod carries the annotation, a
# recipe pod is current only once its process reports the policy's values.

REPORT_ANNOTATION: Final = "spillover.clerum.io/report"
MAX_REPORT_BYTES: Final = 4096
_MAX_PATH = 200


class ReportError(ValueError):
    """A process report that cannot be read: the annotation or the answer is malformed."""


def report_address(annotations: object) -> tuple[int, str] | None:
    """(port, path) from the pod's report annotation; None when it has none."""
    if not isinstance(annotations, dict):
        return None
    raw = annotations.get(REPORT_ANNOTATION)
    if raw is None:
        return None
    port_text, sep, path = str(raw).partition("/")
    if (
        not sep
        or not port_text.isascii()
        or not port_text.isdigit()
        or not 0 < int(port_text) < 65536
        or len(path) > _MAX_PATH
        or not all(c.isalnum() or c in "-._/~" for c in path)
        or ".." in path
    ):
        raise ReportError(
            f"annotation {REPORT_ANNOTATION}={str(raw)[:80]!r} is not '<port>/<path>' "
            "(a port 1-65535 and a plain path, e.g. '8080/spillover')"
        )
    return int(port_text), path


def parse_report(body: bytes) -> dict[str, str | None]:
    """The raw values a process reports it runs with (None: unset)."""
    import json

    if len(body) > MAX_REPORT_BYTES:
        raise ReportError(f"the report is {len(body)} bytes (at most {MAX_REPORT_BYTES})")
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"the report is not JSON: {exc}") from None
    runs_with = doc.get("runsWith") if isinstance(doc, dict) else None
    if not isinstance(runs_with, dict):
        raise ReportError("the report has no 'runsWith' object")
    out: dict[str, str | None] = {}
    for var in DEFAULTS:
        value = runs_with.get(var)
        if value is not None and not isinstance(value, str):
            raise ReportError(f"the report's {var} is {type(value).__name__}, not a string")
        out[var] = value
    return out
