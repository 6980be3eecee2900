"""The Consumer handle (ADR-37): info and management of one consumer.

A :class:`Consumer` is what ``js.create_consumer(...)``, ``js.consumer(stream, name)`` and the
same methods of a :class:`~jssync.stream.Stream` return. It keeps the info it was made with
(``cached_info``); :meth:`Consumer.info` fetches a fresh one. Messages come with
:meth:`Consumer.fetch`, :meth:`Consumer.next`, :meth:`Consumer.consume` and
:meth:`Consumer.messages` (see :mod:`jssync.pull`).

``js.consumer(stream, name, bind=True)`` makes a handle without asking for the info (ADR-37:
a consumer exported to another account may be pulled from where its info cannot be read).
Such a handle pulls like any other; what needs the configuration is checked once the info is
known (:meth:`Consumer.info` succeeded) and skipped until then.

The handle holds no per-pull state: a priority group's pin (ADR-42) belongs to the consume
or fetch that received it, never to the handle.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from jscore.errors import NoConsumerInfoError
from jscore.jsapi import check_consumer_name, check_stream_name
from jscore.models import ConsumerInfo, PauseResponse

from . import pull as _pull
from .msg import JsMsg
from .pull import ConsumeContext, FetchResult, MessageStream

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["Consumer"]


class Consumer:
    """A handle on one consumer of a stream. Cheap; holds no server resources."""

    __slots__ = ("_js", "_stream", "_name", "_info", "_bound")

    def __init__(self, js: JetStream, info: ConsumerInfo | None, *, stream: str = "", name: str = "") -> None:
        self._js = js
        if info is None:  # bound by name, without CONSUMER.INFO
            self._stream = check_stream_name(stream)
            self._name = check_consumer_name(name)
        else:
            self._stream = info.stream_name
            self._name = info.name
        self._info = info
        self._bound = info is None

    @property
    def name(self) -> str:
        return self._name

    @property
    def stream_name(self) -> str:
        return self._stream

    @property
    def cached_info(self) -> ConsumerInfo:
        """The info from the last fetch (creation, lookup or :meth:`info`), without a request.
        :class:`NoConsumerInfoError` for a handle bound without info (``bind=True``) until
        :meth:`info` succeeded."""
        info = self._info
        if info is None:
            raise NoConsumerInfoError(
                f"consumer {self._name!r} of stream {self._stream!r} was bound without its info; "
                "call info() first (it needs the CONSUMER.INFO permission)"
            )
        return info

    @property
    def bound(self) -> bool:
        """Made with ``bind=True`` (by name, without asking the server for its info)."""
        return self._bound

    @property
    def config_known(self) -> bool:
        """Whether the handle has the consumer's info (always, unless bound and never
        refreshed): the priority-group options are checked against it before a pull."""
        return self._info is not None

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

    def pause(self, until: datetime, *, timeout: float | None = None) -> PauseResponse:
        """Pause the consumer until ``until`` (an aware datetime): the server delivers nothing
        meanwhile (pulls wait, heartbeats go on). A time in the past resumes it."""
        return self._js.pause_consumer(self._stream, self._name, until, timeout=timeout)

    def resume(self, *, timeout: float | None = None) -> PauseResponse:
        """Resume a paused consumer now."""
        return self._js.resume_consumer(self._stream, self._name, timeout=timeout)

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
        expires: float | None = None,
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
        ``expires`` is 30 s by default; on a ``pinned_client`` consumer it is half the
        consumer's ``priority_timeout`` (at most 30 s) and must be shorter than it, since only
        new pulls keep the pin. Priority-group options are checked against the consumer's
        config before anything is sent.
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
        expires: float | None = None,
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
