"""The Consumer handle (ADR-37): info and management of one consumer.

A :class:`Consumer` is what ``js.create_consumer(...)``, ``js.consumer(stream, name)`` and the
same methods of a :class:`~jssync.stream.Stream` return. It keeps the info it was made with
(``cached_info``); :meth:`Consumer.info` fetches a fresh one. Messages come with
:meth:`Consumer.fetch`, :meth:`Consumer.next`, :meth:`Consumer.consume` and
:meth:`Consumer.messages` (see :mod:`jssync.pull`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jscore.models import ConsumerInfo

from . import pull as _pull
from .msg import JsMsg
from .pull import ConsumeContext, FetchResult, MessageStream

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["Consumer"]


class Consumer:
    """A handle on one consumer of a stream. Cheap; holds no server resources."""

    __slots__ = ("_js", "_stream", "_name", "_info", "_pins")

    def __init__(self, js: JetStream, info: ConsumerInfo) -> None:
        self._js = js
        self._stream = info.stream_name
        self._name = info.name
        self._info = info
        self._pins: dict[str | None, str] = {}  # priority group -> Nats-Pin-Id (ADR-42)

    @property
    def name(self) -> str:
        return self._name

    @property
    def stream_name(self) -> str:
        return self._stream

    @property
    def cached_info(self) -> ConsumerInfo:
        """The info from the last fetch (creation, lookup or :meth:`info`), without a request."""
        return self._info

    @property
    def jetstream(self) -> JetStream:
        return self._js

    def __repr__(self) -> str:
        return f"<Consumer {self._name!r} of stream {self._stream!r}>"

    def info(self, *, timeout: float | None = None) -> ConsumerInfo:
        """Fetch the consumer's info (and refresh ``cached_info``): :class:`ConsumerNotFoundError`
        once it is gone."""
        info = self._js.consumer_info(self._stream, self._name, timeout=timeout)
        self._info = info
        return info

    def delete(self, *, timeout: float | None = None) -> None:
        """Delete this consumer on the server."""
        self._js.delete_consumer(self._stream, self._name, timeout=timeout)

    def unpin(self, group: str, *, timeout: float | None = None) -> None:
        """Unpin the pinned client of priority ``group`` (ADR-42, ``pinned_client`` policy)."""
        self._js.unpin_consumer(self._stream, self._name, group, timeout=timeout)

    # ------------------------------------------------------------------ receiving messages

    def fetch(
        self,
        max_messages: int | None = None,
        *,
        max_bytes: int | None = None,
        expires: float | None = None,
        heartbeat: float | None = None,
        no_wait: bool = False,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> FetchResult:
        """One pull for up to ``max_messages`` messages (or ``max_bytes`` bytes).

        Returns at once; iterate the :class:`FetchResult` to get the messages as they come.
        The fetch ends when the batch is complete, the pull expires (``expires`` seconds,
        the server answers 408), the consumer has nothing (``no_wait``), heartbeats stop, or
        a status ends it; then ``result.error`` says why if it was an error. Invalid options
        raise :class:`InvalidOptionError` before anything is sent. ``expires`` defaults to
        30 s, except with ``no_wait``: then the pull is sent without expires (``{"batch": n,
        "no_wait": true}``) and the server answers at once.
        """
        return _pull.fetch(
            self, max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat,
            no_wait=no_wait, group=group, min_pending=min_pending, min_ack_pending=min_ack_pending,
            priority=priority,
        )

    def next(
        self,
        *,
        timeout: float = 30.0,
        heartbeat: float | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> JsMsg:
        """The next message (a fetch of 1 that expires after ``timeout`` seconds):
        :class:`NoMessagesError` (a TimeoutError) when none came."""
        return _pull.next_msg(
            self, timeout, heartbeat=heartbeat, group=group, min_pending=min_pending,
            min_ack_pending=min_ack_pending, priority=priority,
        )

    def consume(
        self,
        handler: _pull.Handler,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        on_event: _pull.EventHandler | None = None,
        auto_progress: float | None = None,
    ) -> ConsumeContext:
        """Call ``handler(msg)`` for every message, on a dispatcher thread, keeping a buffer
        of ``max_messages`` (default 500) or ``max_bytes`` filled with pulls (ADR-37).
        Notifications (heartbeats missed, warnings, pin changes, reconnects, handler errors,
        the terminal error) go to ``on_event``. ``auto_progress`` (off by default): a fraction
        of the consumer's ack_wait after which a still-running handler's message gets an
        automatic ``+WPI`` (and again every such interval), so long work is not redelivered."""
        opts: dict[str, Any] = dict(
            max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat,
            threshold_messages=threshold_messages, threshold_bytes=threshold_bytes, group=group,
            min_pending=min_pending, min_ack_pending=min_ack_pending, priority=priority,
        )
        return _pull.consume(self, handler, on_event, auto_progress, **opts)

    def messages(
        self,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        on_event: _pull.EventHandler | None = None,
    ) -> MessageStream:
        """Like :meth:`consume`, read by the caller: ``for msg in stream`` or
        ``stream.next(timeout)``; ``stop()`` / ``drain()``; a context manager."""
        opts: dict[str, Any] = dict(
            max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat,
            threshold_messages=threshold_messages, threshold_bytes=threshold_bytes, group=group,
            min_pending=min_pending, min_ack_pending=min_ack_pending, priority=priority,
        )
        return _pull.messages(self, on_event, **opts)
