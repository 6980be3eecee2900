"""The auto-progress timer of a consume (jscore.jsmsg.ProgressMachine), in virtual time."""

from __future__ import annotations

import pytest

from jscore.errors import InvalidOptionError
from jscore.jsmsg import HandlerFinished, HandlerStarted, ProgressMachine, ProgressRequested
from jscore.machine import ConnectionClosed, ConnectionLost, ConnectionRestored, Stop


def test_progress_every_interval_while_the_handler_runs() -> None:
    m = ProgressMachine(1.0)
    assert m.next_deadline() is None
    m.handle(HandlerStarted(reply="$JS.ACK.a"), 10.0)
    assert m.next_deadline() == 11.0
    m.handle_timeout(10.5)  # spurious: nothing yet
    assert m.drain_events() == []
    m.handle_timeout(11.0)
    assert m.drain_events() == [ProgressRequested(reply="$JS.ACK.a")]
    assert m.next_deadline() == 12.0
    m.handle_timeout(12.2)
    assert m.drain_events() == [ProgressRequested(reply="$JS.ACK.a")]
    m.handle(HandlerFinished(), 12.5)
    assert m.next_deadline() is None
    m.handle_timeout(20.0)
    assert m.drain_events() == [] and m.sent == 2


def test_a_new_handler_restarts_the_timer_with_its_own_reply() -> None:
    m = ProgressMachine(2.0)
    m.handle(HandlerStarted(reply="a"), 0.0)
    m.handle(HandlerFinished(), 1.0)
    m.handle(HandlerStarted(reply="b"), 1.5)
    assert m.next_deadline() == 3.5
    m.handle_timeout(3.5)
    assert m.drain_events() == [ProgressRequested(reply="b")]


def test_connection_changes_keep_the_timer_and_the_end_stops_it() -> None:
    m = ProgressMachine(1.0)
    m.handle(HandlerStarted(reply="a"), 0.0)
    m.handle(ConnectionLost(error=None), 0.2)
    m.handle(ConnectionRestored(url="nats://x"), 0.4)
    assert m.next_deadline() == 1.0 and not m.finished
    m.handle(ConnectionClosed(error=None), 0.5)
    assert m.finished and m.next_deadline() is None
    m2 = ProgressMachine(1.0)
    m2.handle(Stop(), 0.0)
    assert m2.finished


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True, "1"])
def test_bad_interval_is_refused(bad: object) -> None:
    with pytest.raises(InvalidOptionError):
        ProgressMachine(bad)  # type: ignore[arg-type]
