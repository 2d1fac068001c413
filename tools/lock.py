"""The Python lock files: what `make install` and the operator image install.

- requirements.lock: every package `make install` installs into .venv (pyproject.toml's
  dependencies, its `dev` extra, the build backend it builds the project with, and pip),
  each pinned to one version with the hashes of all that version's distributions.
- operator/requirements.lock: what the operator image installs (operator/pyproject.toml's
  dependencies and build backend), resolved under requirements.lock as constraints: the
  same versions and hashes, fewer packages.

Each names, in its header, the requirements it was resolved from (`# input ...`), so a
check needs neither the network nor the resolver.

Usage (from the repository's root, any Python >= 3.11):
  lock.py compile [--upgrade]  `make lock`: resolve both again with uv (tools/uv.txt,
                               installed from PyPI with its hashes); the versions already
                               locked are kept where they still fit, unless --upgrade
  lock.py check [--quick]      `make lock-check`: the locks were resolved from the
                               pyproject.toml files as they are now, every line is pinned
                               with hashes, the operator's pins are the repository's, and
                               every requirement is met by its pin (needs `packaging`,
                               which .venv has; --quick leaves that last one out and needs
                               the standard library only: `make install` runs it first)
  lock.py prune                `make install`, with .venv's Python: uninstall what the
                               lock does not list (a .venv made before is left exact)
Exit 0 fine, 1 the locks disagree with pyproject.toml (the message says to run `make
lock`), 2 usage or tooling.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV_PINS = Path("tools/uv.txt")
FIX = "run `make lock` and commit requirements.lock and operator/requirements.lock"


@dataclass(frozen=True)
class Target:
    """One lock file and what it is resolved from."""

    lock: Path
    pyproject: Path
    extras: tuple[str, ...]
    # What installs the rest: pip itself, for .venv (the image's pip leaves it).
    installer: tuple[str, ...]
    # Resolved under this lock's pins.
    constraint: Path | None


REPOSITORY = Target(Path("requirements.lock"), Path("pyproject.toml"), ("dev",), ("pip",), None)
OPERATOR = Target(
    Path("operator/requirements.lock"),
    Path("operator/pyproject.toml"),
    (),
    (),
    REPOSITORY.lock,
)
TARGETS = (REPOSITORY, OPERATOR)


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: frozenset[str]


class Disagreement(Exception):
    """The locks and pyproject.toml disagree: `make lock` mends it."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _tidy(requirement: str) -> str:
    return " ".join(requirement.split())


def inputs(root: Path, target: Target) -> list[str]:
    """`section: requirement` for every requirement the lock is resolved from, sorted."""
    data = tomllib.loads((root / target.pyproject).read_text())
    project = data.get("project", {})
    found = [f"dependencies: {_tidy(r)}" for r in project.get("dependencies", [])]
    extras = project.get("optional-dependencies", {})
    for extra in target.extras:
        if extra not in extras:
            raise Disagreement(f"{target.pyproject} has no extra [{extra}]")
        found += [f"{extra}: {_tidy(r)}" for r in extras[extra]]
    found += [f"build-system: {_tidy(r)}" for r in data.get("build-system", {}).get("requires", [])]
    found += [f"installer: {r}" for r in target.installer]
    return sorted(found, key=str.casefold)


def python_minor() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def header(target: Target, uv_version: str, resolved_from: list[str]) -> str:
    made_for = f"CPython {python_minor()} on {sys.platform}"
    if target is REPOSITORY:
        what = "Every package `make install` installs, pinned to one version with the hashes"
        how = "of all its distributions; it installs exactly these, pip --require-hashes."
    else:
        what = "Every package the operator image installs (operator/Dockerfile), pinned to the"
        how = f"versions and hashes of {REPOSITORY.lock}; it installs exactly these, the same way."
    lines = [
        f"# {target.lock}: made by `make lock` (tools/lock.py, {uv_version}); do not edit.",
        f"# {what}",
        f"# {how}",
        f"# Resolved for {made_for} from the requirements below, which `make lock-check`",
        "# compares with pyproject.toml as it is now.",
        f"# python: {python_minor()}",
        *(f"# input {line}" for line in resolved_from),
        "",
    ]
    return "\n".join(lines)


def recorded_inputs(text: str) -> list[str]:
    found = re.finditer(r"^# input (.+)$", text, re.MULTILINE)
    return sorted((m.group(1) for m in found), key=str.casefold)


def recorded_python(text: str) -> str | None:
    found = re.search(r"^# python: (\S+)$", text, re.MULTILINE)
    return found.group(1) if found else None


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def read_pins(path: Path) -> dict[str, Pin]:
    """The lock's pins by canonical name; a line that is not `name==version` with
    hashes is an error (pip's --require-hashes would refuse it too)."""
    pins: dict[str, Pin] = {}
    logical = re.sub(r"\\\n", " ", path.read_text())
    for raw in logical.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pin = _PIN.match(line)
        hashes = frozenset(_HASH.findall(line))
        if pin is None or not hashes:
            raise Disagreement(f"{path.name}: not pinned with hashes: {line[:100]}")
        name = canonical(pin.group(1))
        if name in pins:
            raise Disagreement(f"{path.name}: {name} is pinned twice")
        pins[name] = Pin(name, pin.group(2), hashes)
    return pins


def _diff(recorded: list[str], now: list[str]) -> str:
    added = sorted(set(now) - set(recorded))
    gone = sorted(set(recorded) - set(now))
    parts = [f"+ {line}" for line in added] + [f"- {line}" for line in gone]
    return "\n".join(f"    {p}" for p in parts)


def check(root: Path, *, quick: bool) -> list[str]:
    """What is wrong, one line each (empty: the locks agree with pyproject.toml)."""
    problems: list[str] = []
    pins_of: dict[Target, dict[str, Pin]] = {}
    for target in TARGETS:
        lock = root / target.lock
        if not lock.is_file():
            problems.append(f"{target.lock} is missing")
            continue
        text = lock.read_text()
        try:
            now = inputs(root, target)
            pins_of[target] = read_pins(lock)
        except Disagreement as e:
            problems.append(str(e))
            continue
        recorded = recorded_inputs(text)
        if recorded != now:
            problems.append(
                f"{target.lock} was resolved from other requirements than {target.pyproject}"
                f" has now:\n{_diff(recorded, now)}"
            )
        made_for = recorded_python(text)
        if made_for != python_minor():
            print(
                f"note: {target.lock} was resolved for Python {made_for}, this is"
                f" {python_minor()}: pip may find no distribution for some pins",
                file=sys.stderr,
            )
    repository, operator = pins_of.get(REPOSITORY), pins_of.get(OPERATOR)
    if repository is not None and operator is not None:
        for name, pin in sorted(operator.items()):
            same = repository.get(name)
            if same is None:
                problems.append(f"{OPERATOR.lock} pins {name}, {REPOSITORY.lock} does not")
            elif same.version != pin.version:
                problems.append(
                    f"{OPERATOR.lock} pins {name}=={pin.version},"
                    f" {REPOSITORY.lock} {name}=={same.version}"
                )
            elif same.hashes != pin.hashes:
                problems.append(
                    f"{OPERATOR.lock} lists other hashes for {name}=={pin.version}"
                    f" than {REPOSITORY.lock}"
                )
    if not quick:
        for target, pins in pins_of.items():
            problems += unmet(root, target, pins)
    return problems


def unmet(root: Path, target: Target, pins: dict[str, Pin]) -> list[str]:
    """Every requirement that applies here is met by a pin of the lock."""
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:
        raise SystemExit(
            "lock.py check: needs `packaging` (.venv has it: `make install`), or --quick"
        ) from None
    problems = []
    for line in inputs(root, target):
        section, _, text = line.partition(": ")
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        pin = pins.get(canonical(requirement.name))
        where = f"{target.pyproject} ({section})"
        if pin is None:
            problems.append(f"{requirement} from {where} is not in {target.lock}")
        elif not requirement.specifier.contains(Version(pin.version), prereleases=True):
            problems.append(f"{requirement} from {where}: {target.lock} pins {pin.version}")
    return problems


# ---- make lock ------------------------------------------------------------------------


def ensure_uv(root: Path) -> Path:
    """uv as tools/uv.txt pins it, installed from PyPI with its hashes into the project's
    cache (a folder per tools/uv.txt: a new pin installs anew)."""
    key = hashlib.sha256((root / UV_PINS).read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("SPILLOVER_UV_CACHE") or Path.home() / ".cache/spillover-ops/uv")
    home = cache / key
    uv = home / "bin" / "uv"
    done = home / ".complete"
    if done.exists() and uv.exists():
        return uv
    shutil.rmtree(home, ignore_errors=True)
    print(f"installing uv ({UV_PINS}) into {home}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    subprocess.run(
        [
            str(home / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--require-hashes",
            "--only-binary",
            ":all:",
            "-r",
            str(root / UV_PINS),
        ],
        check=True,
    )
    done.touch()
    return uv


def compile_one(
    uv: Path, root: Path, target: Target, tmp: Path, constraint: Path | None, upgrade: bool
) -> str:
    """The lock's new text (uv's resolution, this script's header)."""
    data = tomllib.loads((root / target.pyproject).read_text())
    work = tmp / target.lock.as_posix().replace("/", "-")
    work.mkdir()
    build = work / "build-system.in"
    build.write_text("".join(f"{r}\n" for r in data.get("build-system", {}).get("requires", [])))
    installer = work / "installer.in"
    installer.write_text("".join(f"{r}\n" for r in target.installer))
    out = work / target.lock.name
    if (root / target.lock).is_file() and not upgrade:
        # uv keeps the versions of the output file it finds where they still fit.
        shutil.copyfile(root / target.lock, out)
    else:
        out.unlink(missing_ok=True)
    command = [str(uv), "pip", "compile", str(target.pyproject), str(build), str(installer)]
    command += [f"--extra={extra}" for extra in target.extras]
    if constraint is not None:
        command += ["--constraint", str(constraint)]
    command += [
        "--output-file",
        str(out),
        "--generate-hashes",
        "--only-binary",
        ":all:",
        "--python",
        sys.executable,
        "--no-header",
        "--native-tls",
        "--quiet",
    ]
    if upgrade:
        command.append("--upgrade")
    env = {**os.environ, "UV_NO_CONFIG": "1"}
    subprocess.run(command, cwd=root, env=env, check=True)
    body = out.read_text()
    body = body.replace(f"-r {build}", f"{target.pyproject} [build-system]")
    body = body.replace(f"-r {installer}", "make install (pip)")
    if constraint is not None:
        body = body.replace(f"-c {constraint}", f"-c {REPOSITORY.lock}")
    leaked = str(tmp)
    if leaked in body:
        raise SystemExit(f"lock.py: a temporary path is left in {target.lock}: {leaked}")
    return body


def compile_locks(root: Path, upgrade: bool) -> None:
    uv = ensure_uv(root)
    version = subprocess.run([str(uv), "--version"], capture_output=True, text=True, check=True)
    uv_version = " ".join(version.stdout.split()[:2])
    with tempfile.TemporaryDirectory(prefix="spillover-lock.") as name:
        tmp = Path(name)
        texts: dict[Target, str] = {}
        for target in TARGETS:
            constraint = None
            if target.constraint is not None:
                constraint = tmp / f"constraint.{target.constraint.name}"
                constraint.write_text(texts[REPOSITORY])
            body = compile_one(uv, root, target, tmp, constraint, upgrade)
            texts[target] = header(target, uv_version, inputs(root, target)) + body
        for target, text in texts.items():
            path = root / target.lock
            before = path.read_text() if path.is_file() else ""
            staged = path.with_name(f".{path.name}.tmp")
            staged.write_text(text)
            os.replace(staged, path)
            print(
                f"{target.lock}: {len(read_pins(path))} pins"
                + (", unchanged" if before == text else ", written")
            )
    problems = check(root, quick=True)
    if problems:
        raise SystemExit("lock.py: the new locks do not pass the check:\n" + "\n".join(problems))


# ---- make install -------------------------------------------------------------------


def prune(root: Path) -> None:
    """Uninstall what this interpreter's site-packages hold and requirements.lock does not
    list (the project itself stays)."""
    pins = read_pins(root / REPOSITORY.lock)
    keep = set(pins) | {"spillover-ops"}
    places = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    installed = set()
    for dist in importlib.metadata.distributions(path=places):
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            installed.add(canonical(name))
    extra = sorted(installed - keep)
    if extra:
        print(f"not in {REPOSITORY.lock}, uninstalled: {' '.join(extra)}")
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", *extra], check=True
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lock.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (tests)")
    sub = parser.add_subparsers(dest="command", required=True)
    compile_parser = sub.add_parser("compile", help="make lock")
    compile_parser.add_argument("--upgrade", action="store_true")
    check_parser = sub.add_parser("check", help="make lock-check")
    check_parser.add_argument("--quick", action="store_true")
    check_parser.add_argument("--json", action="store_true", help="the problems as JSON")
    sub.add_parser("prune", help="make install")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.command == "compile":
        compile_locks(root, args.upgrade)
        return 0
    if args.command == "prune":
        prune(root)
        return 0
    problems = check(root, quick=args.quick)
    if args.json:
        print(json.dumps(problems))
    if problems:
        print("The Python locks disagree with pyproject.toml:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print(f"To mend it: {FIX}.", file=sys.stderr)
        return 1
    if not args.json:
        print("requirements.lock and operator/requirements.lock agree with pyproject.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
