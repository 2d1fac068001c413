"""Whether Ctrl-C is behind an exception, for the console scripts (spilloverctl and
spillover-harness) that must end a Ctrl-C as an interruption (exit 130), never a
traceback, whatever was running. The standard library only: the scripts import it
before anything heavy."""

from __future__ import annotations

__all__ = ["caused_by_interrupt"]


def caused_by_interrupt(error: BaseException) -> bool:
    """Whether `error` is, or was caused by, a KeyboardInterrupt. Python 3.11 wraps an
    exception raised while a class is built (a descriptor's `__set_name__`, as pydantic
    uses) in a RuntimeError: Ctrl-C landing there arrives as that error's cause."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
