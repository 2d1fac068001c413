"""Opening a file a user names without trusting what the name points to.

A FIFO opened for reading blocks until a writer comes, and a device such as
/dev/zero reports size 0 but never ends: both are refused before a byte is read
(stat, then the opened descriptor checked again, opened non-blocking so a FIFO
swapped in between cannot hang), and what is read is bounded by the bytes actually
read, never by the size the file reports.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["NotARegularFile", "TooLarge", "open_regular", "read_regular", "what_it_is"]


class NotARegularFile(OSError):
    """The path names a FIFO, a device, a socket or a directory, not a file."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"is {kind}, not a regular file")
        self.kind = kind


class TooLarge(OSError):
    """The file holds more bytes than the reader takes."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


def what_it_is(mode: int) -> str:
    """`a FIFO (named pipe)`, `a character device`...: a non-regular file as a message says it."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _check(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotARegularFile(what_it_is(mode))


def open_regular(path: Path | str) -> BinaryIO:
    """`path` opened for reading in binary; NotARegularFile (before opening) when it is
    not a regular file; any other OSError as the system raises it."""
    _check(os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _check(os.fstat(fd).st_mode)  # swapped for a FIFO after the stat: still refused
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file `path`; TooLarge when it holds more than `limit`
    (at most `limit + 1` bytes are ever read, whatever size the file reports)."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(limit)
    return data
