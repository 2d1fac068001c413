"""Write a file so that a reader sees the old content or the new, never half.

The temporary file is created next to the target with mode 0666 and the
process umask applied by the kernel (as `open()` and `runs.jsonl` do), not
with `tempfile.mkstemp`'s 0600: a report is meant to be read by whoever may
read the results directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

FILE_MODE = 0o666  # before the umask, like any file open() creates


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (temporary file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, flags, FILE_MODE)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
