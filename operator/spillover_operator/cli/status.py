"""`spilloverctl status`: the policy, what is in effect on its Deployment, mismatches."""

from __future__ import annotations

import json
from typing import TextIO

from spillover_operator import exit_codes
from spillover_operator.client import Connection, observe

from .report import format_text, report_to_json


def cmd_status(cluster: Connection, name: str, output: str, out: TextIO) -> int:
    """Print the report; exit 0 when consistent, 6 on a mismatch or a not-ready state,
    4 when the target Deployment is missing (NotFound propagates for the policy)."""
    report = observe(cluster, name)
    if output == "json":
        out.write(json.dumps(report_to_json(report), indent=2) + "\n")
    else:
        out.write(format_text(report) + "\n")
    if report.deployment_name and not report.deployment_found:
        return exit_codes.NOT_FOUND
    return exit_codes.OK if report.consistent else exit_codes.MISMATCH
