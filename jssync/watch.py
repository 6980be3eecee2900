"""A running watch on the blocking client: the key-value store's :class:`~jssync.kv.KeyWatcher`
and the object store's :class:`~jssync.objstore.ObjectWatcher` are this class over their own
:class:`jscore.watch.WatchState`.

The watch is one :class:`jscore.watch.WatchMachine` on the client's session (an ordered
consumer whose deliveries the core turns into items on the I/O thread); this object only reads
the queue its events go to, reports what the application took, and with a callback runs it on
a thread of its own.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from jscore import pull as P
from jscore.validate import check_poll_timeout
from jscore.errors import BucketNotFoundError, InvalidOptionError, NoMessagesError, StreamNotFoundError
from jscore.machine import MachineFailed, Stop
from jscore.models import DeliverPolicy
from jscore.ordered import (
    OrderedConsumerOptions,
    OrderedConsumerState,
    OrderedFinished,
    OrderedMachine,
    new_name_prefix,
)
from jscore.watch import WatchChanged, WatchMachine, WatchSkipped, WatchState, watch_consume_options

from .client import shell_of
from .pull import _StreamEnded

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["Watcher"]

_log = logging.getLogger("jssync")
_monotonic: Final = time.monotonic

T = TypeVar("T")
W = TypeVar("W", bound="Watcher[Any]")


class _End:
    """Queue marker: the watch is over."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class Watcher(Generic[T]):
    """A running watch: ``for item in watcher`` (``None`` once when caught up), or
    ``watcher.next(timeout)``; with a callback, a client thread calls it instead. ``stop()``
    (or leaving a ``with`` block) ends it; the iteration then ends quietly."""

    _what = "watch"

    def __init__(
        self,
        js: JetStream,
        stream: str,
        subjects: Sequence[str],
        state: WatchState[T],
        callback: Callable[[T | None], Any] | None,
        bucket: str,
        request_timeout: float | None = None,
    ) -> None:
        if callback is not None and not callable(callback):
            raise InvalidOptionError("callback must be callable")
        options = state.options
        oc_options = OrderedConsumerOptions(
            filter_subjects=tuple(subjects),
            deliver_policy=DeliverPolicy(options.deliver_policy),
            headers_only=options.meta_only,
            report_created=True,
        )
        consume = watch_consume_options()
        self._batch = max(1, min(64, (consume.max_messages - consume.threshold_messages) // 4 or 1))
        self._taken = self._taken_size = 0
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopped = False
        self._ended: _End | None = None
        self._done = False
        self._callback = callback
        self._bucket = bucket
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self._shell = shell = shell_of(js.client)
        shell.check_fork()
        rng = random.Random(os.urandom(16))
        cursor = OrderedConsumerState(stream, oc_options, name_prefix=new_name_prefix(rng))
        with shell.lock:
            now = _monotonic()
            inner = OrderedMachine(
                cursor, consume, now, api_prefix=js.api_prefix,
                request_timeout=js.timeout if request_timeout is None else request_timeout,
                connected=shell.session.conn.is_connected,
            )
            self._machine: WatchMachine[T] = WatchMachine(inner, state, now)
            self._slot = shell.attach_locked(self._machine, self._on_event, wildcard=True)
        if callback is not None:
            self._thread = threading.Thread(target=self._run, name=f"jssync-watch-{bucket}", daemon=True)
            self._thread.start()

    # -- the sink (under the client lock; only queues) ---------------------------------------

    def _on_event(self, e: Any) -> None:
        cls = e.__class__
        if cls is WatchChanged:
            self._q.put(e)
        elif cls is WatchSkipped:
            _log.warning("jssync: %s skipped the message on %s: %s", self._what, e.subject, e.reason)
        elif cls is OrderedFinished:
            self._end_locked(e.error)
        elif cls is MachineFailed:
            _log.error("jssync: %s machine failed (%s)", self._what, e.reason, exc_info=e.error)
            self._end_locked(e.error)
        # (other notifications: resets, heartbeats, reconnects are the machine's business)

    def _end_locked(self, error: BaseException | None) -> None:
        if isinstance(error, StreamNotFoundError):
            error = BucketNotFoundError.of(error, self._bucket)
        if not self._done:
            self._done = True
            self._q.put(_End(error))

    # -- the reader ------------------------------------------------------------------------

    def _report(self) -> None:
        if self._taken:
            count, size = self._taken, self._taken_size
            self._taken = self._taken_size = 0
            shell = self._shell
            if shell.forked:
                return
            with shell.lock:
                if not self._done:
                    shell.command_locked(self._slot, P.MessagesTaken(count=count, size=size), kick=True)

    def _take(self, deadline: float | None) -> T | None:
        if self._ended is not None or self._stopped:
            raise self._end_error()
        q = self._q
        try:
            item = q.get_nowait()
        except queue.Empty:
            self._report()  # (before blocking)
            try:
                item = q.get() if deadline is None else q.get(timeout=max(0.0, deadline - _monotonic()))
            except queue.Empty:
                raise NoMessagesError(f"no change within the timeout ({self._what})") from None
        if item.__class__ is _End:
            self._ended = item
            self._report()
            raise self._end_error()
        if self._stopped:
            raise self._end_error()
        if item.size:
            self._taken += 1
            self._taken_size += item.size
            if self._taken >= self._batch or q.empty():
                self._report()
        return item.entry  # type: ignore[no-any-return]

    def _end_error(self) -> BaseException:
        end = self._ended
        if end is not None and end.error is not None and not self._stopped:
            return end.error
        return _StreamEnded("the watcher was stopped")

    def next(self, timeout: float = 30.0) -> T | None:
        """The next item (``None``: the initial values are all delivered);
        :class:`NoMessagesError` (a TimeoutError) if nothing came within ``timeout``; after
        ``stop()`` a :class:`ConnectionClosedError`; a terminal error (the bucket was deleted)
        as itself. ``timeout=0`` polls; it must be a finite number >= 0 (not None)."""
        return self._take(_monotonic() + check_poll_timeout(timeout))

    def __iter__(self) -> Iterator[T | None]:
        while True:
            try:
                yield self._take(None)
            except _StreamEnded:
                return

    def _run(self) -> None:
        cb = self._callback
        assert cb is not None
        try:
            for item in self:
                try:
                    cb(item)
                except Exception:  # noqa: BLE001
                    _log.exception("jssync: %s callback raised", self._what)
        except BaseException as exc:  # noqa: BLE001  (a terminal error of the watch)
            self.error = exc
            _log.error("jssync: %s ended: %r", self._what, exc)

    def stop(self) -> None:
        """End the watch (any thread); the server consumer is deleted."""
        self._stopped = True
        shell = self._shell
        if shell.forked:
            return
        with shell.lock:
            if not self._done:
                shell.command_locked(self._slot, Stop())
            self._end_locked(None)

    def wait(self, timeout: float | None = None) -> bool:
        """With a callback: wait until its thread is over (after ``stop()``, or a terminal
        error: then in :attr:`error`); True if it is."""
        t = self._thread
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    @property
    def initialized(self) -> bool:
        """True once the initial values are all delivered (to the queue)."""
        return self._machine.state.initialized

    @property
    def closed(self) -> bool:
        return self._done

    def __enter__(self: W) -> W:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)
