"""A server that does not read what we send is stale past MAX_BACKLOG queued bytes."""

from __future__ import annotations

from jscore import events as ev
from jscore.connection import MAX_BACKLOG, State
from jscore.errors import StaleConnectionError
from tests.core.test_connection import Harness


def test_backlog_within_the_limit_changes_nothing() -> None:
    h = Harness()
    h.connect()
    assert not h.conn.check_backlog(MAX_BACKLOG)
    assert h.conn.state is State.CONNECTED and h.pump() == []


def test_backlog_past_the_limit_closes_the_connection_as_stale_and_reconnects() -> None:
    h = Harness(reconnect_wait=0.1)
    h.connect()
    assert h.conn.check_backlog(MAX_BACKLOG + 1)
    events = h.pump()
    errors = [e for e in events if isinstance(e, ev.ServerError)]
    closes = [e for e in events if isinstance(e, ev.CloseRequested)]
    assert errors and isinstance(errors[0].error, StaleConnectionError) and errors[0].fatal
    assert closes and isinstance(closes[0].error, StaleConnectionError)
    assert not h.conn.check_backlog(10 * MAX_BACKLOG), "only once per connection"
    events = h.lose()
    assert any(isinstance(e, ev.Disconnected) for e in events)
    h.connect()  # and it comes back
    assert h.conn.is_connected


def test_backlog_is_ignored_while_not_connected() -> None:
    h = Harness()
    h.start()
    assert not h.conn.check_backlog(10 * MAX_BACKLOG)
