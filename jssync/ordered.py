"""The ordered consumer on the blocking client: a stream read exactly once and in order.

:class:`jscore.ordered.OrderedConsumerState` decides (cursor, serial, reset schedule, which
configuration to create); this module acts: it creates the throw-away server consumers with
blocking API calls on the caller's thread (never the I/O thread), reads their messages through
the ordinary pull machinery (:mod:`jssync.pull`), checks every delivery against the cursor, and
resets on a gap, missed heartbeats, a deleted consumer, no responders or a reconnect.

``messages()`` does all of that inline, in the reader's ``next()``; ``consume(handler)`` is the
same loop on a dispatcher thread; ``fetch()`` reuses the current server consumer while the
cursor is contiguous (the reference clients create a new consumer for every fetch).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from jscore import pull as P
from jscore.errors import (
    ConsumerDeletedError,
    ConsumerNotFoundError,
    InvalidOptionError,
    NatsError,
    NoHeartbeatError,
    NoMessagesError,
    NoRespondersError,
    PullNoRespondersError,
)
from jscore.models import DeliverPolicy
from jscore.ordered import Delivery, OrderedConsumerOptions, OrderedConsumerState, ResetReason, new_name_prefix

from .consumer import Consumer
from .msg import JsMsg
from .pull import ConsumerReconnected, EventHandler, FetchResult, Handler, MessageStream, _StreamEnded

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["OrderedConsumer", "OrderedConsumeContext", "OrderedMessageStream"]

_log = logging.getLogger("jssync")
_monotonic: Final = time.monotonic
_DELETE_TIMEOUT: Final = 1.0


def _reason_for(error: BaseException) -> ResetReason | None:
    """The reset an inner pull's end calls for; None: the error is the user's."""
    if isinstance(error, (ConsumerDeletedError, ConsumerNotFoundError)):
        return ResetReason.CONSUMER_DELETED
    if isinstance(error, NoHeartbeatError):
        return ResetReason.HEARTBEAT_MISSED
    if isinstance(error, (PullNoRespondersError, NoRespondersError)):
        return ResetReason.NO_RESPONDERS
    return None


class OrderedConsumer:
    """An ordered view of a stream (``js.ordered_consumer(stream, ...)``): ephemeral, ack-less
    server consumers recreated behind the scenes so that every message (of the filter) comes
    once and in stream order. One fetch, consume or messages at a time."""

    def __init__(self, js: JetStream, stream: str, options: OrderedConsumerOptions) -> None:
        self._js = js
        self._stream = stream
        rng = random.Random(os.urandom(16))
        self._state = OrderedConsumerState(stream, options, name_prefix=new_name_prefix(rng))
        self._busy = threading.Lock()
        self._current: Consumer | None = None

    @property
    def stream_name(self) -> str:
        return self._stream

    @property
    def name(self) -> str:
        """The name of the current (or next) server consumer."""
        return self._state.name

    @property
    def state(self) -> OrderedConsumerState:
        """The cursor (``stream_seq``, ``consumer_seq``), serial, resets and state."""
        return self._state

    def __repr__(self) -> str:
        return f"<OrderedConsumer {self._stream!r} {self._state!r}>"

    # ------------------------------------------------------------------ internals

    def _acquire(self) -> None:
        if not self._busy.acquire(blocking=False):
            raise InvalidOptionError("an ordered consumer runs one fetch, consume or messages at a time")

    def _ensure(self, deadline: float) -> Consumer:
        """The active server consumer, created (with backoff) if needed, by ``deadline``."""
        st = self._state
        while True:
            if st.terminated:
                assert st.error is not None or st.state.value == "closed"
                raise st.error or _StreamEnded("the ordered consumer was closed")
            if not st.needs_new_consumer and self._current is not None and self._current.name == st.name:
                return self._current
            now = _monotonic()
            if st.recreate_due(now):
                cfg = st.start_create(now)
                name = cfg.name
                assert name is not None
                try:
                    consumer = self._js.create_consumer(
                        self._stream, cfg, timeout=max(0.5, min(5.0, deadline - now))
                    )
                except NatsError as exc:
                    st.create_failed(_monotonic(), exc, name)
                    continue
                if st.created(_monotonic(), name, consumer.cached_info.delivered.stream_seq):
                    self._current = consumer
                continue
            due = st.next_deadline()
            wait = (due if due is not None else now + 0.05) - now
            if now + wait > deadline:
                raise NoMessagesError("the ordered consumer is waiting to recreate its server consumer")
            time.sleep(max(0.0, wait))

    def _reset(self, reason: ResetReason) -> None:
        dropped = self._state.reset(_monotonic(), reason)
        self._current = None
        if dropped is not None:
            self._delete_quietly(dropped)

    def _delete_quietly(self, name: str) -> None:
        try:
            self._js.delete_consumer(self._stream, name, timeout=_DELETE_TIMEOUT)
        except NatsError:
            pass  # ephemeral with an inactive_threshold: the server removes it anyway

    # ------------------------------------------------------------------ fetch / next

    def fetch(
        self,
        max_messages: int | None = None,
        *,
        max_bytes: int | None = None,
        expires: float | None = 30.0,
        heartbeat: float | None = None,
        no_wait: bool = False,
    ) -> list[JsMsg]:
        """Up to ``max_messages`` next messages in order (a list: the fetch is checked against
        the cursor as a whole). Reuses the server consumer while the cursor is contiguous."""
        self._acquire()
        try:
            deadline = _monotonic() + (expires or P.NO_WAIT_TIMEOUT) + 5.0
            consumer = self._ensure(deadline)
            result: FetchResult = consumer.fetch(
                max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat, no_wait=no_wait
            )
            out: list[JsMsg] = []
            gap = False
            for msg in result:
                if gap:
                    continue
                verdict = self._state.on_delivery(msg.metadata)
                if verdict is Delivery.ACCEPT:
                    out.append(msg)
                elif verdict is Delivery.GAP:
                    gap = True
            st = self._state
            if gap:
                self._reset(ResetReason.GAP)
            elif result.error is not None:
                reason = _reason_for(result.error)
                if reason is None:
                    if not out:
                        raise result.error
                else:
                    self._reset(reason)
            else:
                clean = result.reason not in ("client timer expired", "stopped", "deadline")
                dropped = st.fetch_ended(_monotonic(), clean=clean)
                if dropped is not None:
                    self._current = None
                    self._delete_quietly(dropped)
            return out
        finally:
            self._busy.release()

    def next(self, *, timeout: float = 30.0, heartbeat: float | None = None) -> JsMsg:
        """The next message in order; :class:`NoMessagesError` (a TimeoutError) if none."""
        msgs = self.fetch(1, expires=timeout, heartbeat=heartbeat)
        if msgs:
            return msgs[0]
        raise NoMessagesError(f"no message from the ordered consumer on {self._stream!r} within {timeout} s")

    # ------------------------------------------------------------------ continuous

    def messages(
        self,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        on_event: EventHandler | None = None,
    ) -> OrderedMessageStream:
        """Read the stream in order with ``for msg in stream`` or ``stream.next(timeout)``."""
        opts: dict[str, Any] = dict(
            max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat,
            threshold_messages=threshold_messages, threshold_bytes=threshold_bytes,
        )
        # Validate now, before anything is created (the same rules as a plain consume).
        P.resolve_consume_options(**{k: v for k, v in opts.items() if v is not None})
        self._acquire()
        return OrderedMessageStream(self, opts, on_event)

    def consume(
        self,
        handler: Handler,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        on_event: EventHandler | None = None,
    ) -> OrderedConsumeContext:
        """Call ``handler(msg)`` for every message, in order, on a dispatcher thread."""
        if not callable(handler):
            raise InvalidOptionError("consume needs a callable handler")
        stream = self.messages(
            max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat,
            threshold_messages=threshold_messages, threshold_bytes=threshold_bytes, on_event=on_event,
        )
        return OrderedConsumeContext(stream, handler, on_event)


class OrderedMessageStream:
    """An ordered consume read by the caller; resets happen inside :meth:`next`."""

    def __init__(self, oc: OrderedConsumer, opts: dict[str, Any], on_event: EventHandler | None) -> None:
        self._oc = oc
        self._opts = opts
        self._on_event = on_event
        self._inner: MessageStream | None = None
        self._reset_due: ResetReason | None = None
        self._stopped = False
        self._draining = False
        self._closed = False
        self.error: BaseException | None = None

    def _note(self, event: Any) -> None:
        cls = event.__class__
        if cls is P.HeartbeatMissed:
            self._reset_due = ResetReason.HEARTBEAT_MISSED
        elif cls is ConsumerReconnected:
            self._reset_due = ResetReason.RECONNECT
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # noqa: BLE001
                _log.exception("jssync: on_event handler raised on %s", type(event).__name__)

    def _drop_inner(self) -> None:
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.stop()

    def next(self, timeout: float = 30.0) -> JsMsg:
        """The next message in order: :class:`NoMessagesError` (a TimeoutError) if none came
        within ``timeout``; the terminal error (e.g. ``StreamNotFoundError``) once it failed."""
        oc = self._oc
        st = oc._state
        deadline = _monotonic() + timeout
        while True:
            if self._closed or self._stopped:
                raise self.error or _StreamEnded("the ordered message stream was stopped")
            if self._reset_due is not None:
                reason, self._reset_due = self._reset_due, None
                self._drop_inner()
                oc._reset(reason)
            if self._inner is None:
                if self._draining:
                    self._finish(None)
                    continue
                try:
                    consumer = oc._ensure(deadline)
                except NoMessagesError:
                    raise
                except NatsError as exc:
                    self._finish(exc)
                    raise
                self._inner = consumer.messages(on_event=self._note, **self._opts)
            remaining = deadline - _monotonic()
            if remaining <= 0:
                raise NoMessagesError(f"no message within {timeout} s")
            try:
                msg = self._inner.next(timeout=remaining)
            except NoMessagesError:
                if self._reset_due is not None:
                    continue
                raise
            except _StreamEnded:
                self._inner = None
                if self._draining:
                    self._finish(None)
                continue
            except NatsError as exc:
                self._inner = None
                why = _reason_for(exc)
                if why is None:
                    st.fail(exc)
                    self._finish(exc)
                    raise
                oc._reset(why)
                continue
            if self._reset_due is not None:
                continue  # (a reset was noted while this message was queued: it goes too)
            verdict = st.on_delivery(msg.metadata)
            if verdict is Delivery.ACCEPT:
                return msg
            if verdict is Delivery.GAP:
                self._reset_due = ResetReason.GAP

    def _finish(self, error: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        self.error = error
        self._drop_inner()
        dropped = self._oc._state.close() if error is None else None
        if dropped is not None:
            self._oc._delete_quietly(dropped)
        self._oc._current = None
        self._oc._busy.release()

    def __iter__(self) -> Iterator[JsMsg]:
        while True:
            try:
                yield self.next(timeout=3600.0)
            except NoMessagesError:
                continue
            except _StreamEnded:
                return

    def stop(self) -> None:
        """End now (any thread)."""
        self._stopped = True
        inner = self._inner
        if inner is not None:
            inner.stop()
        if not self._closed:
            self._finish(None)

    def drain(self) -> None:
        """No more pulls; what is buffered is still delivered, then the iteration ends."""
        self._draining = True
        inner = self._inner
        if inner is not None:
            inner.drain()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> OrderedMessageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OrderedConsumeContext:
    """A running ordered consume (the same controls as :class:`~jssync.pull.ConsumeContext`)."""

    def __init__(self, stream: OrderedMessageStream, handler: Handler, on_event: EventHandler | None) -> None:
        self._stream = stream
        self._handler = handler
        self._on_event = on_event
        self._hlock = threading.Lock()
        self._done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="jssync-ordered-consume", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stream = self._stream
        try:
            while True:
                try:
                    msg = stream.next(timeout=3600.0)
                except NoMessagesError:
                    continue
                except _StreamEnded:
                    return
                except BaseException as exc:  # noqa: BLE001 - the terminal error
                    self.error = exc
                    if self._on_event is not None:
                        try:
                            self._on_event(P.ConsumeTerminated(error=exc if isinstance(exc, Exception) else None,
                                                               reason="ordered consumer failed"))
                        except Exception:  # noqa: BLE001
                            _log.exception("jssync: on_event handler raised")
                    return
                with self._hlock:
                    if stream._stopped:
                        return
                    try:
                        self._handler(msg)
                    except Exception as exc:  # noqa: BLE001
                        from .events import CallbackError

                        if self._on_event is not None:
                            try:
                                self._on_event(CallbackError(subject=msg.subject, error=exc))
                            except Exception:  # noqa: BLE001
                                _log.exception("jssync: on_event handler raised")
                        else:
                            _log.error("jssync: ordered consume handler raised", exc_info=exc)
        finally:
            self._done.set()

    def stop(self) -> None:
        self._stream.stop()
        if threading.current_thread() is not self._thread and self._hlock.acquire(timeout=30.0):
            self._hlock.release()

    def drain(self) -> None:
        self._stream.drain()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def closed(self) -> bool:
        return self._done.is_set()

    def __enter__(self) -> OrderedConsumeContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if threading.current_thread() is not self._thread:
            self.wait(5.0)


def ordered_options(
    filter_subjects: str | Sequence[str] | None,
    deliver_policy: DeliverPolicy | str | None,
    opt_start_seq: int | None,
    opt_start_time: datetime | None,
    headers_only: bool,
) -> OrderedConsumerOptions:
    filters: tuple[str, ...]
    if filter_subjects is None:
        filters = ()
    elif isinstance(filter_subjects, str):
        filters = (filter_subjects,)
    else:
        filters = tuple(filter_subjects)
    return OrderedConsumerOptions(
        filter_subjects=filters,
        deliver_policy=deliver_policy,  # type: ignore[arg-type]  # (validated and converted there)
        opt_start_seq=opt_start_seq,
        opt_start_time=opt_start_time,
        headers_only=headers_only,
    )
