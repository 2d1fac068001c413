"""`spillover-harness preflight`: is the cluster ready for a stage? A checklist."""

from __future__ import annotations

import argparse
from typing import Any

from spillover_operator import exit_codes

from spillover_harness.cli.common import (
    FORMATTER,
    BadInput,
    add_cluster_args,
    add_matrix_arg,
    epilog,
    err,
    load_matrix_arg,
)

CODES = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.API,
    exit_codes.PREFLIGHT,
    exit_codes.INTERRUPTED,
)


def add_parser(sub: Any) -> None:
    pf = sub.add_parser(
        "preflight",
        formatter_class=FORMATTER,
        help="check a cluster is ready for a stage (a checklist with the fix of each failure)",
        description=(
            "Check, and print as a checklist: the kube context (for minikube: the\n"
            "context named by MINIKUBE_PROFILE), the SpilloverPolicy CRD, the operator\n"
            "running, the policy Ready, the WRC Deployment and its passthrough list,\n"
            "the recipes' endpoint, Prometheus scraping the mcp-host, the fixtures loaded."
        ),
        epilog=epilog(*CODES),
    )
    pf.add_argument("--stage", required=True, choices=("minikube", "dev"))
    add_cluster_args(pf)
    add_matrix_arg(pf)
    pf.set_defaults(func=cmd_preflight)


def cmd_preflight(args: argparse.Namespace) -> int:
    from spillover_harness.cli.run import CLUSTER_NEEDS_PROFILE
    from spillover_harness.cluster.kubeconn import ClusterStageError, Target
    from spillover_harness.cluster.preflight import run_preflight
    from spillover_harness.fixtures import build_fixtures
    from spillover_harness.profile import ProfileError, load_profile, with_kubectl

    if not args.profile:
        raise BadInput(CLUSTER_NEEDS_PROFILE.format(stage=args.stage))
    try:
        profile = with_kubectl(load_profile(args.profile), args.kubectl)
    except ProfileError as exc:
        raise BadInput(f"bad profile: {exc}") from None
    matrix = load_matrix_arg(args.matrix)
    target = Target(args.kubeconfig, args.context)
    try:
        result = run_preflight(profile, target, args.stage, matrix, build_fixtures(matrix.seed))
    except ClusterStageError as exc:
        err(f"error: the cluster could not be used: {exc}")
        return exit_codes.API
    print(result.render())
    return exit_codes.OK if result.ok else exit_codes.PREFLIGHT
