"""ReplySpin: whether a caller waiting for an answer polls without sleeping first, and for how
long (see jscore.spin)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jscore.spin import SAMPLE_CAP, SPIN_LIMIT, ReplySpin


def test_a_new_caller_spins() -> None:
    assert ReplySpin().budget() == SPIN_LIMIT


def test_quick_answers_keep_it_spinning() -> None:
    spin = ReplySpin()
    for _ in range(1000):
        spin.observe(SPIN_LIMIT * 0.6)
        assert spin.budget() == SPIN_LIMIT


def test_a_remote_server_turns_it_off_within_two_waits() -> None:
    spin = ReplySpin()
    spin.observe(0.002)  # a round trip of 2 ms: the spin was wasted
    spin.observe(0.002)
    assert spin.budget() == 0.0
    for _ in range(100):
        spin.observe(0.002)
        assert spin.budget() == 0.0


def test_one_slow_request_turns_it_off_for_a_few_waits_only() -> None:
    spin = ReplySpin()
    for _ in range(50):
        spin.observe(50e-6)
    spin.observe(30.0)  # a stream create on a busy cluster, a long fetch: counted as SAMPLE_CAP
    assert spin.average <= SAMPLE_CAP
    waits = 0
    while spin.budget() == 0.0:
        spin.observe(50e-6)
        waits += 1
    assert 1 <= waits <= 10, waits


def test_answers_that_come_quickly_again_turn_it_back_on() -> None:
    spin = ReplySpin()
    for _ in range(20):
        spin.observe(0.005)
    assert spin.budget() == 0.0
    for _ in range(30):
        spin.observe(40e-6)
    assert spin.budget() == SPIN_LIMIT


@given(st.lists(st.floats(min_value=-1.0, max_value=1e6, allow_nan=False), max_size=200))
def test_the_average_stays_within_zero_and_the_cap(samples: list[float]) -> None:
    spin = ReplySpin()
    for s in samples:
        spin.observe(s)
        assert 0.0 <= spin.average <= SAMPLE_CAP
        assert spin.budget() in (0.0, SPIN_LIMIT)
