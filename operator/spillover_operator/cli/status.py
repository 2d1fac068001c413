"""`spilloverctl status`: the policy, what is in effect on its Deployment, mismatches."""

from __future__ import annotations

import datetime
import json
from typing import TextIO

from spillover_operator import exit_codes
from spillover_operator.client import ClientError, Connection, find_lease
from spillover_operator.domain import heartbeat, leadership
from spillover_operator.observed import observe

from .report import format_text, report_to_json


def cmd_status(cluster: Connection, name: str, output: str, out: TextIO) -> int:
    """Print the report; exit 0 when consistent, 6 on a mismatch or a not-ready state,
    4 when the target Deployment is missing (NotFound propagates for the policy)."""
    report = observe(cluster, name)
    seen = operator_presence(cluster)
    leader = leader_message(cluster)
    if output == "json":
        document = report_to_json(report)
        document["operator"] = {"watched": seen.watched, "message": seen.message, "leader": leader}
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        lines = format_text(report).splitlines()
        # Before the verdict, which stays the last line.
        lines.insert(max(0, len(lines) - 1), f"operator: {seen.message}")
        lines.insert(max(0, len(lines) - 1), f"leader: {leader}")
        out.write("\n".join(lines) + "\n")
    if report.deployment_name and not report.deployment_found:
        return exit_codes.NOT_FOUND
    return exit_codes.OK if report.consistent else exit_codes.MISMATCH


def operator_presence(cluster: Connection) -> heartbeat.Presence:
    """Whether an operator watches the namespace, from its heartbeat Lease (unknown
    when the Lease cannot be read)."""
    try:
        lease = find_lease(cluster, heartbeat.LEASE_NAME)
    except ClientError as exc:
        return heartbeat.Presence(None, f"unknown (cannot read the operator's Lease: {exc})")
    return heartbeat.presence(cluster.namespace, lease, datetime.datetime.now(datetime.UTC))


def leader_message(cluster: Connection) -> str:
    """Which operator replica acts in the namespace, from the leader Lease."""
    try:
        lease = find_lease(cluster, leadership.LEASE_NAME)
    except ClientError as exc:
        return f"unknown (cannot read the leader Lease: {exc})"
    return leadership.leader_summary(lease, datetime.datetime.now(datetime.UTC))
