"""Loading a profile: a shipped one by name or a YAML file, validated into `Profile`;
every mistake is a `ProfileError` naming the file and the key."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import ValidationError
from spillover_operator.domain.quoting import shorten
from spillover_operator.domain.strict_load import StrictLoadError, load_yaml

from spillover_harness.input_file import InputFileError, InputFileMissing, read_text_file, shown
from spillover_harness.profile.model import Profile

__all__ = ["DEFAULT_PROFILES", "ProfileError", "load_profile", "parse_profile", "with_kubectl"]

DEFAULT_PROFILES = ("minikube", "dev", "local")


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and the key."""


_RUN_TAGS = ("custom-resource", "http")


def _loc(err_loc: tuple[int | str, ...]) -> str:
    parts = list(err_loc)
    # The discriminated union puts the tag into the location: run.http.port -> run.port
    if len(parts) >= 2 and parts[0] == "run" and parts[1] in _RUN_TAGS:
        del parts[1]
    return ".".join(str(p) for p in parts) or "<top level>"


def parse_profile(data: object, *, source: str = "<profile>") -> Profile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: the profile must be a YAML mapping at the top level")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = _loc(err["loc"])
            kind = err["type"]
            if kind == "extra_forbidden":
                lines.append(f"{source}: unknown key '{loc}'")
            elif kind == "missing":
                lines.append(f"{source}: missing key '{loc}'")
            elif kind == "union_tag_invalid":
                lines.append(
                    f"{source}: key '{loc}.mode': unknown mode {err['ctx']['tag']!r} "
                    f"(known: {', '.join(_RUN_TAGS)})"
                )
            elif kind == "union_tag_not_found":
                lines.append(f"{source}: missing key '{loc}.mode' (one of: {', '.join(_RUN_TAGS)})")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                lines.append(f"{source}: key '{loc}': {msg} (got {shorten(err.get('input'))})")
        raise ProfileError("\n".join(lines)) from None


def load_profile(path: Path | str) -> Profile:
    """Load a profile file. A bare name (`minikube`, `dev`) loads the shipped profile."""
    if isinstance(path, str) and path in DEFAULT_PROFILES:
        ref = resources.files("spillover_harness.profile.shipped").joinpath(f"{path}.yaml")
        return parse_profile(_yaml(ref.read_text(encoding="utf-8"), str(ref)), source=str(ref))
    p = Path(path)
    try:
        text = read_text_file(p, what="profile")
    except InputFileMissing:
        raise ProfileError(
            f"{shown(p)}: no such profile file (shipped: {', '.join(DEFAULT_PROFILES)})"
        ) from None
    except InputFileError as exc:
        raise ProfileError(str(exc)) from None
    return parse_profile(_yaml(text, shown(p)), source=shown(p))


def with_kubectl(profile: Profile, kubectl: str | None) -> Profile:
    """The profile with `kubectl` (`--kubectl`) in place of its own `kubectl` key; the
    profile itself when None."""
    if kubectl is None:
        return profile
    if not kubectl.strip():
        raise ProfileError("--kubectl: an empty command; name the kubectl binary or its path")
    return profile.model_copy(update={"kubectl": kubectl})


def _yaml(text: str, source: str) -> object:
    try:
        return load_yaml(text, source)  # duplicate keys, .inf, huge integers refused
    except StrictLoadError as exc:
        raise ProfileError(str(exc)) from None
