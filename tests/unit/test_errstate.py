"""``quiet``: numpy's floating-point warnings are ignored inside, nested calls included."""

import threading
import warnings

import numpy as np
import pytest

from replayverify.programs.errstate import quiet


@quiet
def overflow() -> float:
    return float(np.float32(3e38) * np.float32(10))


@quiet
def nested() -> tuple[float, dict]:
    return overflow(), np.geterr()


@quiet
def fails() -> None:
    raise RuntimeError("inside")


def test_quiet_ignores_warnings_in_nested_calls_and_restores_the_errstate_after():
    before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, inside = nested()
        assert value == float("inf")
        assert set(inside.values()) == {"ignore"}
        assert overflow() == float("inf")
        with pytest.raises(RuntimeError):
            fails()
        assert np.geterr() == before
        with np.errstate(over="raise"):  # a quiet call after a failed one still ignores
            assert overflow() == float("inf")
            with pytest.raises(FloatingPointError):
                np.float32(3e38) * np.float32(10)


def test_quiet_in_another_thread_ignores_warnings_there():
    got = []

    @quiet
    def outer():
        thread = threading.Thread(target=lambda: got.append(nested()[1]))
        thread.start()
        thread.join()

    with np.errstate(all="raise"):
        outer()
    assert set(got[0].values()) == {"ignore"}
