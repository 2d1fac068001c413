"""What every test may rely on, however the suite was launched.

A suite started as a background job (`make test &`, nohup, a CI step run in the
background) inherits SIGINT ignored, and Python then leaves it ignored: a test that
sends Ctrl-C, to this process or to a child it starts (which inherits an ignored
signal across exec), would see nothing happen. The Ctrl-C tests rely on Python's own
disposition, so the suite sets it: KeyboardInterrupt here, and the default (hence
Python's KeyboardInterrupt again) in every child, since a handler is not inherited
across exec where an ignored signal is."""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
