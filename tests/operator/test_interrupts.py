"""`spillover_operator.interrupts`: Ctrl-C found behind an exception, bare or wrapped the
way Python 3.11 wraps it while a class is built; anything else is not Ctrl-C."""

from __future__ import annotations

from spillover_operator.interrupts import caused_by_interrupt


def _build_a_class_interrupted_by_ctrl_c() -> None:
    class Interrupted:
        def __set_name__(self, owner: type, name: str) -> None:
            raise KeyboardInterrupt

    class Built:
        field = Interrupted()


def test_ctrl_c_while_a_class_is_built_is_found_behind_the_error() -> None:
    try:
        _build_a_class_interrupted_by_ctrl_c()
    except BaseException as error:  # either form the interpreter raises
        assert caused_by_interrupt(error)
    else:
        raise AssertionError("the class was built without the interrupt")


def test_an_error_that_is_not_ctrl_c_is_not_taken_for_one() -> None:
    try:
        try:
            raise ValueError("bad")
        except ValueError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as error:
        assert not caused_by_interrupt(error)
    assert caused_by_interrupt(KeyboardInterrupt())
    assert not caused_by_interrupt(SystemExit(0))


def test_an_exception_chain_that_loops_ends() -> None:
    first, second = ValueError("a"), ValueError("b")
    first.__context__, second.__context__ = second, first
    assert not caused_by_interrupt(first)


def _lose_an_interrupt_in_a_weakref_callback() -> None:
    """What the CI run saw: Ctrl-C raised inside a callback Python calls on its own (the
    import system's module-lock weakref callback), which Python reports as "Exception
    ignored" and swallows."""
    import gc
    import weakref

    class Thing:
        pass

    def callback(_ref: object) -> None:
        raise KeyboardInterrupt

    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing
    gc.collect()
    del ref


def test_a_ctrl_c_python_would_swallow_is_delivered_again() -> None:
    import signal
    import sys
    import time

    import pytest
    from spillover_operator.interrupts import deliver_lost_interrupts

    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_hook = sys.unraisablehook
    try:
        deliver_lost_interrupts()
        with pytest.raises(KeyboardInterrupt):
            _lose_an_interrupt_in_a_weakref_callback()
            deadline = time.monotonic() + 5  # it arrives within milliseconds, while busy
            while time.monotonic() < deadline:
                pass
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGINT, previous_handler)


def test_other_lost_exceptions_are_reported_as_before(capsys: object) -> None:
    import sys

    from spillover_operator.interrupts import deliver_lost_interrupts

    seen: list[BaseException | None] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u.exc_value)
    try:
        deliver_lost_interrupts()
        import weakref

        class Thing:
            pass

        def callback(_ref: object) -> None:
            raise ValueError("not Ctrl-C")

        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        del ref
    finally:
        sys.unraisablehook = previous_hook
    assert len(seen) == 1 and isinstance(seen[0], ValueError)
