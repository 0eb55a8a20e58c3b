"""`persched.testing.FakeClock`: time moves only with advance(); waiters wake."""

from __future__ import annotations

import threading
import time

import pytest

from persched.clock import Clock
from persched.testing import FakeClock
from tests.support.helpers import EPOCH, TIMEOUT


def test_starts_at_given_time() -> None:
    clock = FakeClock(start=EPOCH)
    assert clock.now() == EPOCH


def test_default_start_is_real_now() -> None:
    before = time.time()
    clock = FakeClock()
    after = time.time()
    assert before <= clock.now() <= after


def test_time_does_not_move_by_itself() -> None:
    clock = FakeClock(start=EPOCH)
    mono = clock.monotonic()
    assert not threading.Event().wait(0.02)  # let some real time pass
    assert clock.now() == EPOCH
    assert clock.monotonic() == mono


def test_advance_moves_wall_and_monotonic_together() -> None:
    clock = FakeClock(start=EPOCH)
    mono = clock.monotonic()
    clock.advance(2.5)
    assert clock.now() == EPOCH + 2.5
    assert clock.monotonic() == mono + 2.5
    clock.advance(0)
    assert clock.now() == EPOCH + 2.5


def test_advance_backwards_refused() -> None:
    clock = FakeClock(start=EPOCH)
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(-1.0)
    assert clock.now() == EPOCH


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_step_wall_moves_only_wall_time(step: float) -> None:
    clock = FakeClock(start=EPOCH)
    mono = clock.monotonic()
    clock.step_wall(step)
    assert clock.now() == EPOCH + step
    assert clock.monotonic() == mono


def test_is_a_clock() -> None:
    assert isinstance(FakeClock(start=EPOCH), Clock)


def test_wait_with_zero_timeout_returns() -> None:
    clock = FakeClock(start=EPOCH)
    cond = threading.Condition()
    with cond:
        clock.wait(cond, 0.0)
        clock.wait(cond, -1.0)


def test_advance_wakes_a_waiter_whose_deadline_passed() -> None:
    """A thread waiting for 5 fake seconds returns once advance() moves past them."""
    clock = FakeClock(start=EPOCH)
    cond = threading.Condition()
    deadline = clock.monotonic() + 5.0
    waiting = threading.Event()
    woke = threading.Event()

    def waiter() -> None:
        with cond:
            while clock.monotonic() < deadline:
                waiting.set()
                clock.wait(cond, deadline - clock.monotonic())
        woke.set()

    t = threading.Thread(target=waiter, name="test-waiter", daemon=True)
    t.start()
    assert waiting.wait(TIMEOUT)
    clock.advance(4.0)
    assert not woke.is_set()
    clock.advance(1.0)
    assert woke.wait(TIMEOUT)
    t.join(TIMEOUT)
    assert not t.is_alive()


def test_concurrent_advances_are_not_lost() -> None:
    clock = FakeClock(start=EPOCH)
    barrier = threading.Barrier(4, timeout=TIMEOUT)

    def bump() -> None:
        barrier.wait()
        for _ in range(1000):
            clock.advance(0.5)

    threads = [threading.Thread(target=bump, name=f"test-bump-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert clock.now() == EPOCH + 2000.0
