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
