"""`spillover_operator.client` and `spillover_operator.observed` import their names on
first use (so `spilloverctl kill` loads only the modules it needs); every name must
still be there, and be what the module that defines it says."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import pytest
import spillover_operator.client
import spillover_operator.observed

PACKAGES = [spillover_operator.client, spillover_operator.observed]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_public_name_resolves_to_its_definition(package: ModuleType) -> None:
    where = package._WHERE
    assert sorted(where) == sorted(package.__all__)
    for name in package.__all__:
        # A dotted entry names a module outside the package (lazy_names.attach).
        full = where[name] if "." in where[name] else f"{package.__name__}.{where[name]}"
        module = importlib.import_module(full)
        assert getattr(package, name) is getattr(module, name), name
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_an_unknown_name_is_an_error(package: ModuleType) -> None:
    with pytest.raises(AttributeError):
        _ = package.no_such_name
    with pytest.raises(ImportError):
        exec(f"from {package.__name__} import no_such_name", {})


def test_names_do_not_depend_on_what_was_imported_first() -> None:
    """A submodule named like a function would replace it on the package once imported
    (the import system sets the attribute): `observe` must stay the function."""
    code = (
        "import spillover_operator.observed.waiting\n"
        "from spillover_operator.client import connect\n"
        "from spillover_operator.observed import observe, wait_until_settled\n"
        "print(callable(observe), observe.__module__, type(connect).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "spillover_operator.observed.observing", "function"]


@pytest.mark.parametrize("package", ["spillover_operator.client", "spillover_operator.observed"])
def test_importing_the_package_loads_no_submodule(package: str) -> None:
    code = (
        "import sys\n"
        f"import {package}\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{package}.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
