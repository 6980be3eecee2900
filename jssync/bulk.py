"""Bulk, idempotent JetStream publishing for one writer thread: the engine of the Spark writers.

Every message carries a ``Nats-Msg-Id``. The writer thread builds complete ``HPUB`` frames (reply
subject ``<inbox>.<token>``: one int token per message, or with ``shared_replies`` one per batch,
its first message's) and hands them over in batches:
:meth:`BulkPublisher.send` takes the client lock once per batch, queues the joined frames and
writes them itself when the I/O thread is idle. The I/O thread settles each PubAck under the
client lock (a dict pop and a decode, see :class:`jscore.publish.FrameWindow`); no future, no
callback and no thread hand-off per message.

Whatever is ambiguous or transient is written again as the same frame (the core's
:class:`jscore.publish.PublishPolicy`): a batch with no PubAck after ``ack_timeout``, 503 no
responders, 10008, 10158 "in process", and everything in flight after a reconnect. The
stream's duplicate window (or, in subject mode, the per-subject limit) keeps it stored once.
Those decisions and their timers belong to the core machine
(:class:`jscore.pubmachines.BulkPublishMachine`), which runs on the client's session: the I/O
thread settles acks, fires deadlines and writes re-sends; the writer thread only hands over new
frames and waits. :meth:`BulkPublisher.finish` returns only once every message is settled; the
first failure is raised (:attr:`FrameWindow.failure`).

Compared with ``js.publish_async`` (a :class:`PubAckFuture` per message, a window shared by
threads, callbacks), this path does about a third of the per-message work; it exists for the
writers that publish millions of rows from one thread and only need a count and the first error.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Final

from jscore.errors import ConnectionClosedError, NatsError, PubAckTimeoutError
from jscore.machine import MachineFailed, Stop
from jscore.pubmachines import PROGRESS, BulkPublishMachine, PublisherClosed, WatchLevel
from jscore.publish import DEFAULT_MAX_PENDING_BYTES, FrameWindow

from .client import shell_of

if TYPE_CHECKING:
    from .client import Client

__all__ = ["BulkPublisher"]

_monotonic = time.monotonic
_GUARD: Final = 30.0  # seconds past the machine's own limits before a waiting writer gives up


class BulkPublisher:
    """One writer thread's idempotent publishing on a client (see the module docstring).

    ``reply_prefix`` (bytes, ending in ``.``) is what the frames' reply subjects start with;
    the token follows: each frame's own, or with ``shared_replies`` the first token of the
    batch it is sent in (see :class:`jscore.publish.FrameWindow`). Use as a context manager, or
    call :meth:`close`.
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
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        shared_replies: bool = False,
    ) -> None:
        self.window = FrameWindow(
            max_pending=max_pending,
            max_bytes=max_pending_bytes,
            ack_timeout=ack_timeout,
            retries=retries,
            retry_wait=retry_wait,
            per_subject_dedup=per_subject_dedup,
            shared_replies=shared_replies,
        )
        # With no connection, nothing expires; give up after this long without one.
        stall = stall_timeout if stall_timeout is not None else ack_timeout * (retries + 1) + 30.0
        # The longest a waiting writer can go without news from the machine: its ack deadlines,
        # re-sends and stall timer all end well within this (only a dead I/O thread exceeds it).
        self._guard = max(stall, ack_timeout * (retries + 1), self.window.transient_budget) + _GUARD
        self._shell = shell = shell_of(client)
        self._cond = threading.Condition(shell.lock)
        self._waiting = False
        self._closed = False
        self._ended = False
        self._failed: BaseException | None = None  # why the machine failed (MachineFailed)
        shell.check_fork()
        with shell.lock:
            if client.is_closed:
                raise ConnectionClosedError("the connection is closed; nothing was published")
            self._machine = BulkPublishMachine(self.window, stall_timeout=stall, connected=client.is_connected)
            self._slot = shell.attach_locked(self._machine, self._on_event, wildcard=True)
            prefix = shell.session.inbox_of(self._slot)
            self._machine.set_prefix(prefix)
        self.reply_prefix = prefix.encode()
        self.max_payload = client.max_payload

    # ------------------------------------------------------------------ the machine's sink

    def _on_event(self, e: Any) -> None:
        """Under the client lock (mostly the I/O thread): wake the writer."""
        cls = e.__class__
        if cls is PublisherClosed:
            self._ended = True
        elif cls is MachineFailed:
            # (a frame it asked for could not be queued, or it broke: the writer stops here)
            self._ended = True
            self._failed = e.error
        if self._waiting or self._ended:
            self._waiting = False
            self._cond.notify()

    # ------------------------------------------------------------------ the writer thread

    def send(self, first_token: int, frames: list[bytes]) -> None:
        """Write a batch of new frames whose tokens are ``first_token, first_token + 1, ...``.
        Blocks while the window is full; raises the window's first failure, or
        :class:`ConnectionClosedError`."""
        window = self.window
        shell = self._shell
        with shell.lock:
            if not window.has_room:
                # Wait for half of what is in flight: refills come in large writes, not one per
                # batch. (Full by count or by bytes: the same wait.)
                self._wait_locked(window.room_level())
            else:
                self._check_locked()
            if shell.congested:
                shell.wait_for_room_locked()
            was_idle = window.next_deadline() is None
            window.sent(range(first_token, first_token + len(frames)), frames, _monotonic())
            if shell.session.conn.publish_frames(b"".join(frames), len(frames)):
                shell.kick_locked()
            # (not connected: the frames stay in the window and go out after the reconnect)
            if was_idle:
                shell.touch_locked(self._slot)

    def finish(self) -> FrameWindow:
        """Wait until every message is settled; returns the window (its counters). Raises the
        first failure, :class:`PubAckTimeoutError` when there is no connection for the stall
        timeout, or :class:`ConnectionClosedError`."""
        with self._shell.lock:
            self._wait_locked(0)
        return self.window

    def close(self) -> None:
        """Stop the machine and unsubscribe the reply inbox (late acks go nowhere). Idempotent."""
        if self._closed:
            return
        self._closed = True
        shell = self._shell
        if shell.forked:
            return
        with shell.lock:
            shell.command_locked(self._slot, Stop())

    def __enter__(self) -> BulkPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ under the lock

    def _wait_locked(self, level: int) -> None:
        """Block until at most ``level`` messages are in flight (the I/O thread does the
        re-sends meanwhile)."""
        window = self.window
        shell = self._shell
        self._check_locked()
        while window.in_flight > level:
            seen = window.written
            self._waiting = True
            shell.command_locked(self._slot, WatchLevel(level=level))
            if self._waiting:
                self._cond.wait(self._guard)
            window.wake_level = -1
            if self._waiting and window.written == seen:
                self._waiting = False
                raise PubAckTimeoutError(
                    f"{window.in_flight} publishes unconfirmed and no progress for {self._guard:g} s: "
                    "they may or may not be stored"
                )
            self._waiting = False
            self._check_locked()

    def _check_locked(self) -> None:
        """Raise what ended the window."""
        window = self.window
        if window.failure is not None:
            raise window.failure
        if self._failed is not None:
            failed = PubAckTimeoutError(
                f"the publisher stopped ({self._failed}) with {window.in_flight} publishes unconfirmed: they may "
                "or may not be stored"
            )
            failed.__cause__ = self._failed
            raise failed
        if self._ended or self._machine.finished:
            error = self._machine.closed_error
            err = ConnectionClosedError(
                f"the connection closed with {window.in_flight} publishes unconfirmed (they may or may not be stored)"
            )
            if isinstance(error, NatsError):
                err.__cause__ = error
            raise err

