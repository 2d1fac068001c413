"""Whether Ctrl-C is behind an exception, for the console scripts (spilloverctl and
spillover-harness) that must end a Ctrl-C as an interruption (exit 130), never a
traceback, whatever was running. The standard library only: the scripts import it
before anything heavy."""

from __future__ import annotations

import _thread
import signal
import sys
import time
from typing import Any

__all__ = ["accept_interrupts", "caused_by_interrupt", "deliver_lost_interrupts"]


def accept_interrupts() -> None:
    """Let Ctrl-C in, a pending one first: call it inside the try that ends a
    KeyboardInterrupt as exit 130.

    The launchers `make install` writes for the console scripts start Python with SIGINT
    blocked, because a Ctrl-C while the interpreter and `site` load comes before any of
    the project's code could catch it: Python printed a traceback. Blocked, that Ctrl-C
    waits, pending, and arrives here as KeyboardInterrupt (raised by this call). A blocked
    signal is inherited by every thread and process started after, kubectl included, so
    `main` calls this before it starts any. Started otherwise (`python -m`, a test
    calling `main`), nothing is blocked and this changes nothing."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def deliver_lost_interrupts() -> None:
    """Deliver again a Ctrl-C that Python would lose.

    An exception raised in a callback Python calls on its own (a weakref callback of the
    import system's module locks, a `__del__`) is printed as "Exception ignored in ..."
    with a traceback, and the program goes on: a Ctrl-C landing there during start-up
    was printed that way and lost, and the command then ran to its end. This hook sends
    such a KeyboardInterrupt to the main thread again as SIGINT, so it ends the command as
    any Ctrl-C does; every other exception is reported as before. The console scripts
    install it first thing."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # As if SIGINT arrived again a moment later, from another thread: the main
            # thread handles it once out of this hook (raised here, it would be lost
            # again). A bare thread: threading's start() would wait here for it.
            _thread.start_new_thread(_interrupt_main_soon, ())
            return
        previous(unraisable)

    sys.unraisablehook = hook


def _interrupt_main_soon() -> None:
    time.sleep(REDELIVERY_DELAY_S)
    _thread.interrupt_main(signal.SIGINT)


REDELIVERY_DELAY_S = 0.01


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
