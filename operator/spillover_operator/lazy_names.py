"""A package's public names, each imported from its submodule on first use (PEP 562).

Why: `spilloverctl kill` must start fast, and the packages it touches (`client`,
`observed`) would otherwise load every submodule, and with them the kubernetes
library's models, when only one name is needed. The package lists which module
defines each name (a submodule, or by its full dotted name a module outside the
package); `attach` gives it the module-level `__getattr__` and `__dir__`.
The standard library only; any layer may use it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def attach(
    package: str, where: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`, whose public name N lives in the
    submodule `where[N]` (or, if that holds a dot, in the module of that full name).
    A name is looked up once: it is then a plain global."""
    names = frozenset(public)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = module if "." in module else f"{package}.{module}"
        value = getattr(importlib.import_module(full), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain global
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
