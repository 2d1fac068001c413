"""The platform's names and bounds, shared by the operator, spilloverctl and the harness.

The spillover variables, condition types and reasons live in the policy model
(`domain.model`), the API group, version and kind in `domain.resource`."""

from __future__ import annotations

from typing import Final

# A DNS-1123 subdomain (Deployment names) and label (container names).
DNS1123_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

# Reported by effective_env for a variable whose value comes from valueFrom.
VALUE_FROM: Final = "<valueFrom>"

# Finalizer and field manager the operator uses.
FINALIZER: Final = "spillover.clerum.io/finalizer"
FIELD_MANAGER: Final = "spillover-operator"

# The WRC Deployment's conventional name: the operator's allow-list when
# SPILLOVER_ALLOWED_TARGETS is unset (allowlist.py), and the manifests' default.
DEFAULT_TARGET: Final = "workflow-recipe-controller"

# Annotations spilloverctl writes on a policy: the record of the change it makes (who,
# as the API server authenticated them, the generation, when, with what and `--reason`;
# change_record.py), and a one-off request to refresh the recipe pods now
# (`--refresh-recipe-pods`; the value is a unique token, the operator records the one it
# handled).
CHANGE_RECORD_ANNOTATION: Final = "spillover.clerum.io/change-record"
REFRESH_REQUEST_ANNOTATION: Final = "spillover.clerum.io/refresh-recipe-pods"
# What spilloverctl wrote before the change record: free text naming `$USER@host`, the
# client's word. Nothing reads it any more; spilloverctl removes it with its next change.
LEGACY_CHANGE_REASON_ANNOTATION: Final = "spillover.clerum.io/change-reason"
