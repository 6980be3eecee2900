"""The rules of the spin before a wait for an answer (see jscore.spin): ReplySpin, whether and
how long a connection's callers spin; Callers, whether a thread is alone at waiting."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jscore.spin import PROBE_EVERY, SAMPLE_CAP, SHARED_HOLD, SPIN_LIMIT, Callers, ReplySpin


def _spins(spin: ReplySpin, waits: int, answer: float) -> int:
    """Run ``waits`` waits whose answers come after ``answer`` seconds; how many spun."""
    spun = 0
    for _ in range(waits):
        if spin.budget() > 0:
            spun += 1
            spin.observe(answer)
    return spun


def test_a_new_connection_spins() -> None:
    assert ReplySpin().budget() == SPIN_LIMIT


def test_quick_answers_keep_it_spinning() -> None:
    assert _spins(ReplySpin(), 1000, SPIN_LIMIT * 0.6) == 1000


def test_a_remote_server_turns_it_off_within_two_waits_but_for_probes() -> None:
    spin = ReplySpin()
    assert _spins(spin, 2, 0.002) == 2  # round trips of 2 ms: both spins were wasted
    assert spin.budget() == 0.0
    # From then on one wait in PROBE_EVERY spins, to find out whether answers got quicker.
    spun = _spins(spin, 10 * PROBE_EVERY, 0.002)
    assert spun == 10


def test_one_slow_request_turns_it_off_for_two_probe_periods_at_most() -> None:
    spin = ReplySpin()
    _spins(spin, 50, 50e-6)
    spin.observe(30.0)  # a stream create on a busy cluster, a long fetch: counted as SAMPLE_CAP
    assert spin.average <= SAMPLE_CAP
    assert spin.budget() == 0.0
    waits = 0
    while _spins(spin, 1, 50e-6) == 0 or spin.budget() == 0.0:
        waits += 1
        assert waits <= 2 * PROBE_EVERY
    assert _spins(spin, 100, 50e-6) == 100


def test_answers_that_come_quickly_again_turn_it_back_on() -> None:
    spin = ReplySpin()
    _spins(spin, 20, 0.005)
    assert spin.budget() == 0.0
    _spins(spin, 30 * PROBE_EVERY, 40e-6)  # only the probes spin, and see the quick answers
    assert _spins(spin, 100, 40e-6) == 100


def test_waits_that_did_not_spin_teach_it_nothing() -> None:
    spin = ReplySpin()
    _spins(spin, 20, 0.005)
    while spin.budget() == 0.0:  # up to the next probe
        pass
    spin.observe(0.005)
    average = spin.average
    for _ in range(PROBE_EVERY - 1):
        assert spin.budget() == 0.0
    assert spin.average == average
    assert spin.budget() == SPIN_LIMIT  # the next probe


def test_a_wait_that_is_not_measured_takes_no_probes_turn() -> None:
    spin = ReplySpin()
    assert spin.budget(probe=False) == SPIN_LIMIT  # (on: it spins like any wait)
    _spins(spin, 20, 0.005)
    while spin.budget() == 0.0:  # up to a probe
        pass
    spin.observe(0.005)
    for _ in range(10 * PROBE_EVERY):
        assert spin.budget(probe=False) == 0.0  # long polls between round trips
    for _ in range(PROBE_EVERY - 1):
        assert spin.budget() == 0.0
    assert spin.budget() == SPIN_LIMIT  # the round trips' probe comes on time


@given(st.lists(st.floats(min_value=-1.0, max_value=1e6, allow_nan=False), max_size=200))
def test_the_average_stays_within_zero_and_the_cap(samples: list[float]) -> None:
    spin = ReplySpin()
    for s in samples:
        spin.observe(s)
        assert 0.0 <= spin.average <= SAMPLE_CAP
        assert spin.budget() in (0.0, SPIN_LIMIT)


def test_one_thread_alone_may_spin() -> None:
    callers = Callers()
    for i in range(100):
        callers.note("main", i * 0.001)
        assert callers.alone(i * 0.001)


def test_a_second_thread_stops_every_spin_for_the_hold() -> None:
    callers = Callers()
    callers.note("a", 10.0)
    callers.note("b", 10.001)
    assert not callers.alone(10.001)
    callers.note("b", 10.002)
    assert not callers.alone(10.002)  # b is alone now, but only since 10.001
    assert not callers.alone(10.001 + SHARED_HOLD * 0.99)
    assert callers.alone(10.001 + SHARED_HOLD)


def test_threads_taking_turns_never_spin() -> None:
    callers = Callers()
    now = 0.0
    for i in range(1000):
        now += 100e-6
        callers.note(i % 2, now)
        assert i == 0 or not callers.alone(now)
