"""Where the SpilloverPolicy lives in the API: its group, version, plural and kind.

A leaf every layer may import: the client addresses the API with these, the domain
checks a manifest's apiVersion and kind."""

from __future__ import annotations

from typing import Final

GROUP: Final = "spillover.clerum.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "spilloverpolicies"
KIND: Final = "SpilloverPolicy"
API_VERSION: Final = f"{GROUP}/{VERSION}"
