"""operator/pyproject.toml (what the operator image installs) and the repository's
pyproject.toml (the development install of operator and harness) agree: every
dependency of the operator is in the development install with the same bounds, so the
tests run the operator on what the image ships."""

from __future__ import annotations

import tomllib

from repo_paths import REPO_ROOT


def _project(path: str) -> dict[str, object]:
    return dict(tomllib.loads((REPO_ROOT / path).read_text())["project"])


def test_every_operator_dependency_is_in_the_development_install_with_the_same_bounds() -> None:
    operator = _project("operator/pyproject.toml")
    repo = _project("pyproject.toml")
    assert isinstance(operator["dependencies"], list)
    assert isinstance(repo["dependencies"], list)
    missing = sorted(set(operator["dependencies"]) - set(repo["dependencies"]))
    assert missing == [], f"in operator/pyproject.toml only: {missing}"


def test_the_operator_distribution_ships_spilloverctl_and_no_harness() -> None:
    operator = _project("operator/pyproject.toml")
    assert operator["scripts"] == {"spilloverctl": "spillover_operator.cli:main"}
    deps = " ".join(str(d) for d in operator["dependencies"])  # type: ignore[union-attr]
    for harness_only in ("matplotlib", "prometheus-api-client", "tqdm"):
        assert harness_only not in deps
