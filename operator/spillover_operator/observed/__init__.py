"""What is in effect, read through the client and judged by the domain: the status
report of a policy (`observe`), waiting until a change is in effect
(`wait_until_settled`), the target Deployment and its env (`find_target`,
`env_in_effect`), the recipe pods and their owners (`observe_recipe_pods`,
`observe_refresh`, `read_owner_states`, `read_process_report`).

Why a package of its own: `spillover_operator.client` is the one door to the API and
knows no policy (make lint's contract `client-imports-no-domain`); these functions need
both, so they live above the two. spilloverctl, the operator and the harness use them.

Names are imported on first use (PEP 562), as in the client: `spilloverctl kill`
without `--wait` loads none of this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spillover_operator import lazy_names

if TYPE_CHECKING:
    from spillover_operator.observed.deployments import env_in_effect, find_target
    from spillover_operator.observed.observing import observe
    from spillover_operator.observed.pods import (
        observe_recipe_pods,
        observe_refresh,
        read_owner_states,
        read_process_report,
    )
    from spillover_operator.observed.waiting import (
        ProgressCallback,
        WaitProgress,
        wait_until_settled,
    )

# Which submodule defines each public name.
_WHERE: dict[str, str] = {
    "ProgressCallback": "waiting",
    "WaitProgress": "waiting",
    "env_in_effect": "deployments",
    "find_target": "deployments",
    "observe": "observing",
    "observe_recipe_pods": "pods",
    "observe_refresh": "pods",
    "read_owner_states": "pods",
    "read_process_report": "pods",
    "wait_until_settled": "waiting",
}

__all__ = [
    "ProgressCallback",
    "WaitProgress",
    "env_in_effect",
    "find_target",
    "observe",
    "observe_recipe_pods",
    "observe_refresh",
    "read_owner_states",
    "read_process_report",
    "wait_until_settled",
]


if not TYPE_CHECKING:  # mypy reads the imports above, and no catch-all
    __getattr__, __dir__ = lazy_names.attach(__name__, _WHERE, __all__)
