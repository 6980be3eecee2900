"""The Consumer handle (ADR-37): info and management of one consumer.

A :class:`Consumer` is what ``js.create_consumer(...)``, ``js.consumer(stream, name)`` and the
same methods of a :class:`~jssync.stream.Stream` return. It keeps the info it was made with
(``cached_info``); :meth:`Consumer.info` fetches a fresh one. Receiving messages (fetch, next,
consume) comes with the pull engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jscore.models import ConsumerInfo

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["Consumer"]


class Consumer:
    """A handle on one consumer of a stream. Cheap; holds no server resources."""

    __slots__ = ("_js", "_stream", "_name", "_info")

    def __init__(self, js: JetStream, info: ConsumerInfo) -> None:
        self._js = js
        self._stream = info.stream_name
        self._name = info.name
        self._info = info

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
