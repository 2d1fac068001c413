"""Every name is imported from the module that defines it: no module of the operator or
the harness passes on another module's names, so each name has one place to be read
from (and to be changed in). Read from the sources with `ast`; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

PACKAGES = {
    "spillover_operator": REPO_ROOT / "operator" / "spillover_operator",
    "spillover_harness": REPO_ROOT / "harness" / "spillover_harness",
}

# (package, name) a package's declared public surface takes from outside the package.
# The client is the one door to the API; the error of the label selectors it renders
# is the domain leaf `labels`' (the client may import no other domain module).
KEPT = {("spillover_operator.client", "SelectorError")}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found.append((".".join(parts), path))
    return found


def _imports(tree: ast.Module, module: str, is_package: bool) -> dict[str, tuple[str, str]]:
    """Name bound -> (the module it is imported from, its name there), for every
    `from X import N [as M]` in `tree`."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                up = here[: len(here) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                names[alias.asname or alias.name] = (base, alias.name)
    return names


def _imported_modules(tree: ast.Module, imported: dict[str, tuple[str, str]]) -> set[str]:
    """The names in `tree` bound to a module of ours (`from P import X` where P.X is one,
    `import P.X as Y`); the standard library's names are not this test's business."""
    ours = {module for module, _ in _modules()}
    bound = {name for name, (origin, was) in imported.items() if f"{origin}.{was}" in ours}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update(a.asname for a in node.names if a.asname and a.name in ours)
    return bound


def _public(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [str(name) for name in ast.literal_eval(node.value)]
    return []


def reexports(module: str, source: str, is_package: bool) -> list[str]:
    """What `module` passes on of another module's names, one line each."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname == alias.name:
                    found.append(
                        f"line {node.lineno}: `from {node.module} import {alias.name} as "
                        f"{alias.name}` passes the name on; import it from {node.module}"
                    )
    imported = _imports(tree, module, is_package)
    for name in _public(tree):
        origin, _ = imported.get(name, ("", ""))
        if not origin or (module, name) in KEPT:
            continue
        # A package may list the names of its own submodules: that is its surface.
        if is_package and origin.startswith(module + "."):
            continue
        found.append(f"__all__ lists {name}, which is {origin}'s; import it from there")
    modules = _imported_modules(tree, imported)
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id in modules
        ):
            found.append(
                f"line {node.lineno}: `= {value.value.id}.{value.attr}` names another "
                f"module's {value.attr} a second time; import it from there"
            )
    return found


def test_no_module_passes_on_another_modules_names() -> None:
    problems = []
    for module, path in _modules():
        text = path.read_text(encoding="utf-8")
        for problem in reexports(module, text, path.name == "__init__.py"):
            problems.append(f"{path.relative_to(REPO_ROOT)}: {problem}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "is_package", "source"),
    [
        ("spillover_operator.observed.waiting", False, "from a.b import N as N\n"),
        ("spillover_operator.domain.policy", False, "from a.b import (\n    M,\n    N as N,\n)\n"),
        (
            "spillover_operator.domain.constants",
            False,
            "from spillover_operator.domain import model as _model\n"
            "BUDGET_VAR = _model.BUDGET_VAR\n",
        ),
        (
            "spillover_operator.domain.settings",
            False,
            "import spillover_operator.domain.leadership as lead\nLEADER_ID_VAR = lead.ID_VAR\n",
        ),
        ("spillover_harness.sim.step", False, 'from x.y import N\n__all__ = ["N"]\n'),
        (
            "spillover_harness.evaluate",
            True,
            'from spillover_harness.stats import median\n__all__ = ["median"]\n',
        ),
    ],
)
def test_each_way_of_passing_a_name_on_is_found(module: str, is_package: bool, source: str) -> None:
    assert len(reexports(module, source, is_package)) == 1


def test_a_package_may_list_its_own_submodules_names() -> None:
    source = 'from spillover_harness.sim.steprun import StepRun\n__all__ = ["StepRun"]\n'
    assert reexports("spillover_harness.sim", source, True) == []
