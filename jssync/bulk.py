"""Bulk, idempotent JetStream publishing for one writer thread: the engine of the Spark writers.

Every message carries a ``Nats-Msg-Id``. The writer thread builds complete ``HPUB`` frames (reply
subject ``<inbox>.<token>``, one int token per message) and hands them over in batches:
:meth:`BulkPublisher.send` takes the client lock once per batch, queues the joined frames and
writes them itself when the I/O thread is idle. The I/O thread settles each PubAck under the
client lock (a dict pop and a decode, see :class:`jscore.publish.FrameWindow`); no future, no
callback and no thread hand-off per message.

Whatever is ambiguous or transient is written again as the same frame (the core's
:class:`jscore.publish.PublishPolicy`): a batch with no PubAck after ``ack_timeout``, 503 no
responders, 10008, 10158 "in process", and everything in flight after a reconnect. The
stream's duplicate window (or, in subject mode, the per-subject limit) keeps it stored once.
The writer thread does this work itself, when it sends or waits: there is no worker thread.
:meth:`BulkPublisher.finish` returns only once every message is settled; the first failure is
raised (:attr:`FrameWindow.failure`).

Compared with ``js.publish_async`` (a :class:`PubAckFuture` per message, a window shared by
threads, callbacks), this path does about a third of the per-message work; it exists for the
writers that publish millions of rows from one thread and only need a count and the first error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from jscore import events as ev
from jscore.connection import State
from jscore.errors import ConnectionClosedError, NatsError, PubAckTimeoutError
from jscore.protocol import MsgReceived
from jscore.publish import FrameWindow

from .client import _HIGH_WATER, Subscription

if TYPE_CHECKING:
    from .client import Client

__all__ = ["BulkPublisher"]

_monotonic = time.monotonic
_CONNECTED: Final = State.CONNECTED
_TICK: Final = 0.25  # a waiting writer looks at the connection at least this often


class _AckInbox(Subscription):
    """The bulk publisher's reply inbox: acks are settled on the I/O thread as they are routed."""

    def __init__(self, client: Client, subject: str, owner: BulkPublisher) -> None:
        super().__init__(client, subject, None, None, 1)
        self._deliver = owner._on_ack  # type: ignore[method-assign]


class BulkPublisher:
    """One writer thread's idempotent publishing on a client (see the module docstring).

    ``reply_prefix`` (bytes, ending in ``.``) is what the frames' reply subjects start with;
    the token follows. Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        client: Client,
        *,
        max_pending: int = 4000,
        ack_timeout: float = 30.0,
        retries: int = 5,
        retry_wait: float = 0.1,
        per_subject_dedup: bool = False,
        stall_timeout: float | None = None,
    ) -> None:
        self.window = FrameWindow(
            max_pending=max_pending,
            ack_timeout=ack_timeout,
            retries=retries,
            retry_wait=retry_wait,
            per_subject_dedup=per_subject_dedup,
        )
        # With no connection, nothing expires; give up after this long with no progress at all.
        self._stall_timeout = stall_timeout if stall_timeout is not None else ack_timeout * (retries + 1) + 30.0
        self._nc = client
        self._conn = client._conn
        self._lock = client._lock
        self._cond = threading.Condition(client._lock)
        self._waiting = False
        self._reconnected = False
        self._closed = False
        client._check_fork()
        with self._lock:
            if self._conn.is_closed:
                raise ConnectionClosedError("the connection is closed; nothing was published")
            prefix = self._conn.new_inbox() + "."
            sub = _AckInbox(client, prefix + "*", self)
            sub.sid = self._conn.subscribe(prefix + "*")
            client._subs[sub.sid] = sub
            client._listeners.append(self._on_event)
            client._wake_locked()
        self._sub = sub
        self._plen = len(prefix)
        self.reply_prefix = prefix.encode()
        self.max_payload = self._conn.max_payload

    # ------------------------------------------------------------------ I/O thread

    def _on_ack(self, m: MsgReceived) -> None:
        """I/O thread, client lock held."""
        try:
            token = int(m.subject[self._plen :])
        except ValueError:
            return
        if self.window.receive_ack(token, m.data, m.status, _monotonic()) and self._waiting:
            self._waiting = False
            self._cond.notify()

    def _on_event(self, event: Any) -> None:
        """Client listener (I/O thread, no lock): a new connection means re-sending."""
        if isinstance(event, ev.Reconnected):
            self._reconnected = True

    # ------------------------------------------------------------------ the writer thread

    def send(self, first_token: int, frames: list[bytes]) -> None:
        """Write a batch of new frames whose tokens are ``first_token, first_token + 1, ...``.
        Blocks while the window is full (re-sending what is due meanwhile); raises the window's
        first failure, or :class:`ConnectionClosedError`."""
        window = self.window
        nc = self._nc
        with self._lock:
            if not window.has_room:
                # Wait for half the window: refills come in large writes, not one per batch.
                self._wait_locked(window.max_pending // 2)
            else:
                self._service_locked()
            conn = self._conn
            if conn.out_bytes + nc._wbuf_len > _HIGH_WATER:
                nc._wait_for_room()
            window.sent(range(first_token, first_token + len(frames)), frames, _monotonic())
            if conn.publish_frames(b"".join(frames), len(frames)):
                nc._kick_locked()
            # (not connected: the frames stay in the window and go out after the reconnect)

    def finish(self) -> FrameWindow:
        """Wait until every message is settled; returns the window (its counters). Raises the
        first failure, :class:`PubAckTimeoutError` when nothing progresses for the stall timeout
        with no connection, or :class:`ConnectionClosedError`."""
        with self._lock:
            self._wait_locked(0)
        return self.window

    def close(self) -> None:
        """Unsubscribe the reply inbox (late acks go nowhere). Idempotent."""
        if self._closed:
            return
        self._closed = True
        nc = self._nc
        with self._lock:
            try:
                nc._listeners.remove(self._on_event)
            except ValueError:
                pass
            sid = self._sub.sid
            if nc._subs.pop(sid, None) is not None and not self._conn.is_closed:
                try:
                    self._conn.unsubscribe(sid)
                except NatsError:
                    pass
                nc._wake_locked()

    def __enter__(self) -> BulkPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ under the lock

    def _wait_locked(self, level: int) -> None:
        """Block until at most ``level`` messages are in flight, doing the re-sends meanwhile."""
        window = self.window
        last_progress = _monotonic()
        seen = window.written
        self._service_locked()
        while window.in_flight > level:
            now = _monotonic()
            if window.written != seen:
                seen, last_progress = window.written, now
            elif now - last_progress > self._stall_timeout:
                raise PubAckTimeoutError(
                    f"{window.in_flight} publishes unconfirmed and no PubAck for {self._stall_timeout:g} s "
                    f"(connected: {self._conn.state is _CONNECTED}): they may or may not be stored"
                )
            due = window.next_deadline()
            timeout = _TICK if due is None else min(_TICK, max(0.0, due - now))
            window.wake_level = level
            self._waiting = True
            self._cond.wait(timeout)
            self._waiting = False
            window.wake_level = -1
            self._service_locked()

    def _service_locked(self) -> None:
        """Raise what ended the window; write again what is due; after a reconnect, everything."""
        window = self.window
        if window.failure is not None:
            raise window.failure
        conn = self._conn
        if conn.is_closed:
            raise ConnectionClosedError(
                f"the connection closed with {window.in_flight} publishes unconfirmed (they may or may not be stored)"
            )
        if conn.state is not _CONNECTED:
            return  # nothing expires while there is no connection
        now = _monotonic()
        if self._reconnected:
            self._reconnected = False
            self._write_locked(window.everything(now))
            return
        due = window.next_deadline()
        if due is not None and due <= now:
            self._write_locked(window.due(now))
            if window.failure is not None:
                raise window.failure

    def _write_locked(self, frames: Iterable[bytes]) -> None:
        batch = list(frames)
        if batch and self._conn.publish_frames(b"".join(batch), len(batch)):
            self._nc._kick_locked()
