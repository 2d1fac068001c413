"""Reading a file a user names (a matrix, a profile, a manifest): every way the path
can be wrong is an `InputFileError` with one line naming the file and the fix, never
an OSError or UnicodeDecodeError escaping as a traceback."""

from __future__ import annotations

import errno
from pathlib import Path

from spillover_operator.domain.quoting import cut
from spillover_operator.domain.strict_load import MAX_TEXT_CHARS
from spillover_operator.regular_file import NotARegularFile, TooLarge, read_regular

__all__ = ["InputFileError", "InputFileMissing", "read_text_file", "shown"]


class InputFileError(ValueError):
    """The file cannot be read as a text file; the message says why and what to pass."""


class InputFileMissing(InputFileError):
    """There is no such file."""


def shown(path: Path | str) -> str:
    """A path as a message quotes it: cut when it is absurdly long."""
    return cut(str(path), 120)


def read_text_file(path: Path, *, what: str) -> str:
    """The UTF-8 text of `path`, a `what` file (e.g. "matrix")."""
    name = shown(path)
    try:
        data = read_regular(path, MAX_TEXT_CHARS)
    except NotARegularFile as exc:
        raise InputFileError(
            f"{name}: is {exc.kind}, not a {what} file; pass a regular file (a pipe or "
            "device is never read)"
        ) from None
    except TooLarge:
        raise InputFileError(
            f"{name}: more than the {MAX_TEXT_CHARS} bytes a {what} file may have; "
            f"pass the {what} file itself"
        ) from None
    except FileNotFoundError:
        raise InputFileMissing(f"{name}: no such {what} file") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise InputFileError(
                f"{name}: the file name is too long for the file system; pass a shorter path"
            ) from None
        raise InputFileError(
            f"{name}: cannot read the {what} file: {exc.strerror or exc}"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(
            f"{name}: not UTF-8 text (byte {exc.start}); save the {what} file as UTF-8"
        ) from None
