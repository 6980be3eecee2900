"""Pull consumers on the blocking client: fetch, next, consume and messages (ADR-37).

The decisions live in :mod:`jscore.pull` (the fetch and consume machines, the status table).
This module only drives them:

- Each operation's machine is attached to the client's core session, which subscribes its
  inbox, feeds it its messages on the I/O thread under the client lock (no queue, no thread in
  between), fires its timers (client timer, heartbeat watchdog, held pulls), tells it about
  disconnects and reconnects, and writes the pulls and flow-control replies it asks for.
- The machine's other events come to the operation's sink, still under the lock: delivered
  messages and notifications go to one queue per operation, read by the caller (fetch, next,
  messages) or by a dispatcher thread (consume). User code never runs on the I/O thread or
  under the lock.
- A consume's dispatcher reports the messages it took (``MessagesTaken``) in small batches,
  which is what lets the machine keep ``pending + buffered`` under max_messages / max_bytes:
  memory stays flat however slow the handler.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

import msgspec

from jscore import events as ev
from jscore import pull as P
from jscore.validate import check_poll_timeout
from jscore.errors import (
    ConnectionClosedError,
    ConsumerNotFoundError,
    InvalidOptionError,
    NatsError,
    NoMessagesError,
    StreamNotFoundError,
    TimeoutError,
)
from jscore.jsmsg import HandlerFinished, HandlerStarted, ProgressMachine
from jscore.machine import MachineFailed, Stop

from .client import shell_of
from .events import CallbackError
from .msg import JsMsg, _ack_defer

if TYPE_CHECKING:
    from .client import Client
    from .consumer import Consumer

__all__ = ["ConsumeContext", "FetchResult", "MessageStream", "ConsumerReconnected"]

_log = logging.getLogger("jssync")
_monotonic: Final = time.monotonic
_INF: Final = float("inf")

# How long past its own client timer a caller waits for the machine to say it finished
# before giving up (the I/O thread fires that timer; this only guards against a dead one).
_SAFETY: Final = 5.0
# The longest a consume handler's ack waits to be written with others (see ConsumeContext._run).
_ACK_DELAY: Final = 0.002
_FETCH_LEAD: Final = 0.005  # how long the first wait of a fetch reads the socket itself (s)
HANDLER_FINISHED: Final = HandlerFinished()
_DELIVERED: Final = P.MessageDelivered  # (bound once: the sinks test it per message)
_DELIVERED_RUN: Final = P.MessagesDelivered
_new_jsmsg: Final = JsMsg._from_event


def _ignore(event: Any) -> None:
    """The sink of a machine whose events are all written by the session."""


class _End:
    """Queue marker: the operation is over (``error`` None for a normal end)."""

    __slots__ = ("error", "reason")

    def __init__(self, error: BaseException | None, reason: str) -> None:
        self.error = error
        self.reason = reason


ConsumerReconnected = P.ConsumerReconnected  # (a notification of consume and messages())


class _Driver:
    """One pull operation on the client: its machine runs on the client's core session (which
    feeds it its inbox, fires its timers and writes its pulls, on the I/O thread); this is the
    sink of its events. Every method but :meth:`_start` runs under the client lock."""

    def __init__(self, consumer: Consumer, machine: P.FetchMachine | P.ConsumeMachine) -> None:
        js = consumer.jetstream
        self._consumer = consumer
        self._client: Client = js.client
        self._shell = shell_of(self._client)
        self._machine = machine
        self._pull_subject = P.pull_subject(js.api_prefix, consumer.stream_name, consumer.name)
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._slot = 0
        self._done = False
        self.error: BaseException | None = None

    def _start(self) -> None:
        shell = self._shell
        shell.check_fork()
        with shell.lock:
            self._slot = shell.attach_locked(self._machine, self._on_event, target=self._pull_subject)

    # -- the sink of the machine's events (under the lock) -----------------------------------

    def _on_event(self, e: Any) -> None:
        cls = e.__class__
        if cls is _DELIVERED_RUN:
            # One queue item for the run: one wake-up of a waiting reader, not one per message.
            client = self._client
            self._q.put([_new_jsmsg(m, client) for m in e.msgs])
        elif cls is _DELIVERED:
            self._q.put(_new_jsmsg(e.msg, self._client))
        elif cls is P.FetchFinished or cls is P.ConsumeTerminated:
            self._finish(e.error, e.reason)
        elif cls is MachineFailed:
            _log.error("jssync: pull machine failed (%s)", e.reason, exc_info=e.error)
            self._finish(e.error, e.reason)
        else:
            self._on_notification(e)

    def _on_notification(self, e: Any) -> None:
        self._q.put(e)

    def _command(self, cmd: Any) -> None:
        if not self._done:
            self._shell.command_locked(self._slot, cmd)

    def _finish(self, error: BaseException | None, reason: str) -> None:
        if self._done:
            return
        self._done = True
        self.error = error
        self._q.put(_End(error, reason))


# ====================================================================================== fetch


class FetchResult:
    """The messages of one fetch, as they arrive: iterate it (each step waits, at most until
    the fetch's own deadline). After the iteration ``error`` tells why it ended early, if it
    did (None for a normal end: batch or bytes reached, the pull expired, nothing left)."""

    def __init__(self, driver: _Driver, client_timeout: float) -> None:
        self._driver = driver
        self._msgs: list[JsMsg] = []
        self._ended = False
        self._deadline = _monotonic() + client_timeout + _SAFETY
        self.error: BaseException | None = None
        self.reason: str | None = None

    def __iter__(self) -> Iterator[JsMsg]:
        yield from list(self._msgs)
        q = self._driver._q
        lead = True
        while not self._ended:
            try:
                item = q.get_nowait()  # (the common case: the batch arrived ahead of the reader)
            except queue.Empty:
                if lead:
                    # The first wait is the pull's round trip when messages wait: read the
                    # socket on this thread (see Shell.lead) until something is queued or for
                    # _FETCH_LEAD at most (an empty stream makes it a long poll, which must not
                    # keep the socket from other callers), then let the I/O thread read the
                    # rest while this one hands messages over (and acks them).
                    lead = False
                    self._lead()
                    continue
                try:
                    item = q.get(timeout=max(0.0, self._deadline - _monotonic()))
                except queue.Empty:
                    self._end(TimeoutError("the fetch did not finish by its deadline"), "deadline")
                    return
            if item.__class__ is list:  # (a run of messages)
                self._msgs += item
                yield from item
            elif item.__class__ is JsMsg:
                self._msgs.append(item)
                yield item
            elif item.__class__ is _End:
                self._ended = True
                self.error = item.error
                self.reason = item.reason
            # (pin notifications are handled by the driver; nothing else reaches a fetch)

    def _lead(self) -> None:
        shell = self._driver._shell
        q = self._driver._q
        sock = None
        try:
            with shell.lock:
                if not q.empty():
                    return
                sock = shell.take_read_locked(round_trip=False)
            if sock is not None:
                shell.lead(sock, q.empty, min(self._deadline, _monotonic() + _FETCH_LEAD), round_trip=False)
        finally:
            if sock is not None:
                shell.give_back()

    def _end(self, error: BaseException, reason: str) -> None:
        self._ended = True
        self.error = error
        self.reason = reason
        d = self._driver
        with d._shell.lock:
            d._command(P.Stop())

    def messages(self) -> list[JsMsg]:
        """Wait for the end and return every message."""
        for _ in self:
            pass
        return list(self._msgs)

    def __len__(self) -> int:
        return len(self.messages())

    @property
    def done(self) -> bool:
        return self._ended

    def __repr__(self) -> str:
        state = f"done, error={self.error!r}" if self._ended else "in progress"
        return f"<FetchResult {len(self._msgs)} messages, {state}>"


class _FetchDriver(_Driver):
    def _on_notification(self, e: Any) -> None:
        pass  # a fetch's queue takes messages and its end only (its pin, if any, dies with it)


def _check_priority(consumer: Consumer, operation: str, options: dict[str, Any]) -> None:
    """The priority-group options against the consumer's cached config (skipped for a handle
    bound without info): :class:`InvalidOptionError` before anything is sent."""
    P.check_priority(
        consumer._info.config if consumer._info is not None else None,
        consumer.name,
        operation,
        group=options.get("group"),
        min_pending=options.get("min_pending"),
        min_ack_pending=options.get("min_ack_pending"),
        priority=options.get("priority"),
    )


def fetch(consumer: Consumer, _operation: str = "fetch", **options: Any) -> FetchResult:
    """``Consumer.fetch``: ``options`` are the keywords of
    :func:`jscore.pull.resolve_fetch_options`, handed over unchanged."""
    opts = P.resolve_fetch_options(**options)
    _check_priority(consumer, _operation, options)
    driver = _FetchDriver(consumer, P.FetchMachine(opts, _monotonic()))
    driver._start()
    return FetchResult(driver, opts.client_timeout)


def next_msg(consumer: Consumer, timeout: float, **options: Any) -> JsMsg:
    """``Consumer.next``: a fetch of 1 that expires after ``timeout``."""
    result = fetch(consumer, "next", max_messages=1, expires=timeout, **options)
    for msg in result:
        return msg
    if result.error is not None:
        raise result.error
    raise NoMessagesError(f"no message from consumer {consumer.name!r} within {timeout} s")


# ====================================================================================== consume

Handler = Callable[[JsMsg], None]
EventHandler = Callable[[Any], None]


class _ConsumeDriver(_Driver):
    """A consume: the machine plus the accounting of what the user took. The machine keeps
    the priority group's pin (ADR-42); its changes (``PinIdChanged`` / ``PinIdCleared``) reach
    the user as notifications, like the other non-message events."""

    def __init__(self, consumer: Consumer, machine: P.ConsumeMachine) -> None:
        super().__init__(consumer, machine)
        self._checking = False

    def _on_notification(self, e: Any) -> None:
        cls = e.__class__
        if cls is P.ConsumerCheckRequested:
            # K 503s in a row, or a heartbeat late by one interval: does the consumer still
            # exist? (asked off the I/O thread; the machine decides what the answer means)
            if not self._checking:
                self._checking = True
                threading.Thread(target=self._verify, args=(e.error,), name="jssync-consume-check",
                                 daemon=True).start()
            return
        self._q.put(e)

    def _verify(self, cause: BaseException) -> None:
        """Off the I/O thread: does the consumer still exist? (ADR-37 allows the check.)"""
        answer: P.ConsumerGone | P.ConsumerPresent | None = None
        try:
            self._consumer.info(timeout=2.0)
            answer = P.ConsumerPresent()
        except (ConsumerNotFoundError, StreamNotFoundError) as exc:
            exc.__cause__ = cause
            answer = P.ConsumerGone(error=exc)
        except (NatsError, TimeoutError):
            pass  # JetStream unreachable or electing: the machine keeps retrying / watching
        finally:
            # Whatever the check ended with (even an unexpected error on this thread), the
            # next late heartbeat or run of 503s may ask again.
            shell = self._shell
            with shell.lock:
                self._checking = False
                if answer is not None:
                    self._command(answer)

    def took(self, count: int, size: int) -> None:
        """A reader took ``count`` messages of ``size`` bytes from the queue (any thread);
        deferred acks go out with the pull this may send."""
        shell = self._shell
        with shell.lock:
            shell.clear_deferred_locked()
            if not self._done:
                shell.command_locked(self._slot, P.MessagesTaken(count=count, size=size), kick=True)
            else:
                shell.kick_locked()

    def flush_acks(self) -> None:
        shell = self._shell
        with shell.lock:
            shell.flush_deferred_locked()

    def ack_next(self, reply: str) -> None:
        """``JsMsg.ack_next`` of one of our messages: the machine sends ``+NXT`` (a pull of one,
        counted) or ``+ACK``; once it has ended, a plain ``+ACK``."""
        shell = self._shell
        shell.check_fork()
        with shell.lock:
            if not self._done and shell.session.running(self._slot):
                shell.command_locked(self._slot, P.AckNext(reply=reply), kick=True)
                return
        shell.publish_to_reply(reply, P.ACK_BODY, False)

    def _on_event(self, e: Any) -> None:
        if e.__class__ is _DELIVERED_RUN:
            client = self._client
            self._q.put([_new_jsmsg(m, client, self) for m in e.msgs])  # (a run: one item)
        elif e.__class__ is _DELIVERED:
            self._q.put(_new_jsmsg(e.msg, self._client, self))
        else:
            super()._on_event(e)

    def stop(self) -> None:
        with self._shell.lock:
            self._command(P.Stop())

    def drain(self) -> None:
        # (the session unsubscribes the inbox: only what is in flight may still come)
        with self._shell.lock:
            self._command(P.Drain())


def _consume_options(consumer: Consumer, **options: Any) -> P.ConsumeOptions:
    """``options`` are the keywords of :func:`jscore.pull.resolve_consume_options`; ``expires``
    None is the default (shorter on a pinned_client consumer: :func:`jscore.pull.consume_expires`)."""
    config = consumer._info.config if consumer._info is not None else None
    options["expires"] = P.consume_expires(config, consumer.name, options.get("expires"))
    # After K 503s in a row the machine asks us to check the consumer (_ConsumeDriver._verify)
    # instead of ending: a cluster without quorum or electing a leader is not a lost consumer.
    # A heartbeat late by one interval is checked the same way (a leader change the server
    # did not announce to our pulls is recovered in one heartbeat, not two).
    return P.resolve_consume_options(no_responders_check=True, heartbeat_check=True, **options)


class _Taker:
    """Reports taken messages to the machine in small batches (a lock round trip per message
    would cost more than the message), always before the queue runs dry."""

    __slots__ = ("_driver", "_q", "_ready", "_batch", "count", "size")

    def __init__(self, driver: _ConsumeDriver, opts: P.ConsumeOptions, ready: deque[JsMsg] | None = None) -> None:
        self._driver = driver
        self._q = driver._q
        self._ready = ready if ready is not None else deque()  # (the reader's rest of a run)
        if opts.max_bytes:
            self._batch = 16
        else:
            self._batch = max(1, min(64, (opts.max_messages - opts.threshold_messages) // 4 or 1))
        self.count = 0
        self.size = 0

    def took(self, msg: JsMsg) -> None:
        self.count += 1
        self.size += msg.size
        if self.count >= self._batch or (not self._ready and self._q.empty()):
            self.flush()

    def flush(self) -> None:
        if self.count:
            count, size = self.count, self.size
            self.count = self.size = 0
            self._driver.took(count, size)
        elif self._driver._shell.has_deferred:
            self._driver.flush_acks()


class ConsumeContext:
    """A running consume: messages go to the handler on a dispatcher thread.

    ``stop()`` ends it now (the handler is not called after ``stop()`` returns, unless
    ``stop()`` was called by the handler itself, which returns at once); ``drain()`` sends no
    more pulls, hands what is buffered to the handler, then ends. ``wait(timeout)`` waits for
    the end; ``closed`` and ``error`` (None after a user stop or drain) describe it. A
    ``with`` block stops it on exit.
    """

    def __init__(
        self,
        driver: _ConsumeDriver,
        opts: P.ConsumeOptions,
        handler: Handler,
        on_event: EventHandler | None,
    ) -> None:
        self._driver = driver
        self._handler = handler
        self._on_event = on_event
        self._taker = _Taker(driver, opts)
        self._stopped = False
        self._handler_lock = threading.Lock()
        self._progress_slot = 0  # auto_progress: the slot of its timer machine on the session
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"jssync-consume-{driver._consumer.name}", daemon=True
        )

    def _run(self) -> None:
        q = self._driver._q
        taker = self._taker
        handler = self._handler
        hlock = self._handler_lock
        batch = taker._batch
        driver = self._driver
        shell = driver._shell
        flushed = _monotonic()
        _ack_defer.client = driver._client  # this thread's acks go out in batches, with the take reports
        try:
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    # About to block: the machine must know what was taken first, or it
                    # keeps counting it as buffered and sends no pull (a notification
                    # after the last message would otherwise stall the consume); and the
                    # acks of the handler calls so far must leave now.
                    taker.flush()
                    item = q.get()
                cls = item.__class__
                if cls is list or cls is JsMsg:  # (a run of messages, or one)
                    for msg in item if cls is list else (item,):
                        # Taken when handed to the handler (a slow handler must not hold back
                        # the pull that lets the server redeliver what it did not ack in time).
                        taker.count += 1
                        taker.size += msg.size
                        if taker.count >= batch:
                            taker.flush()
                            flushed = _monotonic()
                        with hlock:
                            if not self._stopped:
                                progress = self._progress_slot
                                if progress:
                                    self._progress(HandlerStarted(reply=msg.reply or ""))
                                try:
                                    handler(msg)
                                except Exception as exc:  # noqa: BLE001 - reported, the consume goes on
                                    self._report(CallbackError(subject=msg.subject, error=exc))
                                if progress:
                                    self._progress(HANDLER_FINISHED)
                        # The handler's acks were queued without waking the I/O thread; they
                        # leave with the next take report, or after 2 ms at the latest.
                        if shell.has_deferred:
                            now = _monotonic()
                            if now - flushed > _ACK_DELAY:
                                driver.flush_acks()
                                flushed = now
                elif cls is _End:
                    if isinstance(item.error, Exception):
                        self._report(P.ConsumeTerminated(error=item.error, reason=item.reason))
                    return
                else:
                    self._report(item)
        finally:
            taker.flush()
            if self._progress_slot:
                self._progress(Stop())
            self._closed.set()

    def _start_progress(self, interval: float) -> None:
        """auto_progress: a core timer (:class:`jscore.jsmsg.ProgressMachine`, fired by the I/O
        thread) sends ``+WPI`` for a message whose handler has run for ``interval`` seconds (a
        fraction of ack_wait), and again every ``interval``."""
        shell = self._driver._shell
        with shell.lock:
            self._progress_slot = shell.attach_locked(ProgressMachine(interval), _ignore, inbox=False)

    def _progress(self, command: Any) -> None:
        shell = self._driver._shell
        with shell.lock:
            shell.command_locked(self._progress_slot, command, kick=True)

    def _report(self, event: Any) -> None:
        cb = self._on_event
        if cb is None:
            if isinstance(event, CallbackError):
                _log.error("jssync: consume handler raised", exc_info=event.error)
            return
        try:
            cb(event)
        except Exception:  # noqa: BLE001
            _log.exception("jssync: consume on_event handler raised on %s", type(event).__name__)

    # -- public ---------------------------------------------------------------------------

    def stop(self) -> None:
        """End the consume now; no handler call starts after this returns."""
        self._stopped = True
        self._driver.stop()
        if threading.current_thread() is not self._thread:
            if self._handler_lock.acquire(timeout=30.0):  # let a running handler call finish
                self._handler_lock.release()

    def drain(self) -> None:
        """No more pulls; deliver what is already buffered or in flight, then end."""
        self._driver.drain()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the consume ended; True if it did within ``timeout``."""
        if threading.current_thread() is self._thread:
            raise InvalidOptionError("wait() called from the consume's own handler would deadlock")
        ended = self._closed.wait(timeout)
        if ended:
            self._thread.join(1.0)
        return ended

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def error(self) -> BaseException | None:
        return self._driver.error if self._driver._done else None

    def __enter__(self) -> ConsumeContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if threading.current_thread() is not self._thread:
            self.wait(5.0)

    def __repr__(self) -> str:
        return f"<ConsumeContext {self._driver._consumer.name!r} {'closed' if self.closed else 'running'}>"


def consume(
    consumer: Consumer,
    handler: Handler,
    on_event: EventHandler | None,
    auto_progress: float | None = None,
    **options: Any,
) -> ConsumeContext:
    if not callable(handler):
        raise InvalidOptionError("consume needs a callable handler")
    interval = None
    opts = _consume_options(consumer, **options)
    _check_priority(consumer, "consume", options)
    if auto_progress is not None:
        if isinstance(auto_progress, bool) or not isinstance(auto_progress, (int, float)) or not 0 < auto_progress < 1:
            raise InvalidOptionError(f"auto_progress must be a fraction of ack_wait in (0, 1), got {auto_progress!r}")
        if consumer._info is None:
            # Bound without info: the interval needs ack_wait, so ask for the info now.
            try:
                consumer.info()
            except NatsError as exc:
                raise InvalidOptionError(
                    f"auto_progress needs the ack_wait of consumer {consumer.name!r}, whose info cannot be read"
                ) from exc
        ack_wait = consumer.cached_info.config.ack_wait or 30.0
        interval = float(ack_wait) * auto_progress
    machine = P.ConsumeMachine(opts, _monotonic(), connected=consumer.jetstream.client.is_connected)
    driver = _ConsumeDriver(consumer, machine)
    cc = ConsumeContext(driver, opts, handler, on_event)
    cc._thread.start()
    if interval is not None:
        cc._start_progress(interval)
    driver._start()
    return cc


class MessageStream:
    """A consume read by the caller: ``for msg in stream`` or ``stream.next(timeout)``.

    Notifications (heartbeats missed, status warnings, pin changes, reconnects) go to
    ``on_event`` if given and are kept in :meth:`notifications`. The iteration ends after
    ``stop()`` or once a ``drain()`` delivered what was buffered; a terminal error ends it by
    raising that error. A ``with`` block stops it on exit.
    """

    def __init__(self, driver: _ConsumeDriver, opts: P.ConsumeOptions, on_event: EventHandler | None) -> None:
        self._driver = driver
        self._ready: deque[JsMsg] = deque()  # the rest of a run of messages taken from the queue
        self._taker = _Taker(driver, opts, self._ready)
        self._on_event = on_event
        self._notes: list[Any] = []
        self._ended: _End | None = None
        self._stopped = False

    def next(self, timeout: float = 30.0) -> JsMsg:
        """The next message; :class:`NoMessagesError` (a TimeoutError) if none came within
        ``timeout``; :class:`ConnectionClosedError` or the terminal error once it ended.
        ``timeout=0`` polls; it must be a finite number >= 0 (not None)."""
        if timeout.__class__ is not float or not 0.0 <= timeout < _INF:  # (the common case first)
            timeout = check_poll_timeout(timeout)
        if self._ended is not None or self._stopped:
            raise self._end_error()
        ready = self._ready
        if ready:
            msg = ready.popleft()
            self._taker.took(msg)
            return msg
        q = self._driver._q
        deadline = _monotonic() + timeout
        while True:
            try:
                item = q.get_nowait()
            except queue.Empty:
                self._taker.flush()  # before blocking (see ConsumeContext._run)
                try:
                    item = q.get(timeout=max(0.0, deadline - _monotonic()))
                except queue.Empty:
                    raise NoMessagesError(f"no message within {timeout} s") from None
            if item.__class__ is list:  # (a run of messages: the first now, the rest next)
                if self._stopped:
                    raise self._end_error()
                ready.extend(item)
                item = ready.popleft()
                self._taker.took(item)
                return item
            if item.__class__ is JsMsg:
                if self._stopped:
                    raise self._end_error()
                self._taker.took(item)
                return item
            if item.__class__ is _End:
                self._ended = item
                self._taker.flush()
                raise self._end_error()
            self._notes.append(item)
            if self._on_event is not None:
                try:
                    self._on_event(item)
                except Exception:  # noqa: BLE001
                    _log.exception("jssync: on_event handler raised on %s", type(item).__name__)

    def _end_error(self) -> BaseException:
        end = self._ended
        if end is not None and end.error is not None:
            return end.error
        return _StreamEnded("the message stream was stopped")

    def __iter__(self) -> Iterator[JsMsg]:
        while True:
            try:
                yield self.next(timeout=3600.0)
            except NoMessagesError:
                continue
            except _StreamEnded:
                return

    def notifications(self) -> list[Any]:
        """The notifications seen so far (and clears them)."""
        notes, self._notes = self._notes, []
        return notes

    def stop(self) -> None:
        self._stopped = True
        self._driver.stop()

    def drain(self) -> None:
        self._driver.drain()

    @property
    def closed(self) -> bool:
        return self._driver._done

    @property
    def error(self) -> BaseException | None:
        return self._driver.error if self._driver._done else None

    def __enter__(self) -> MessageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<MessageStream {self._driver._consumer.name!r} {'closed' if self.closed else 'running'}>"


class _StreamEnded(ConnectionClosedError):
    """The message stream was stopped or drained to its end."""


def messages(consumer: Consumer, on_event: EventHandler | None, **options: Any) -> MessageStream:
    opts = _consume_options(consumer, **options)
    _check_priority(consumer, "messages", options)
    machine = P.ConsumeMachine(opts, _monotonic(), connected=consumer.jetstream.client.is_connected)
    driver = _ConsumeDriver(consumer, machine)
    stream = MessageStream(driver, opts, on_event)
    driver._start()
    return stream
