"""The Stream handle (ADR-37): stream info, purge, single-message get / delete, direct get, and
the stream's consumers.

A :class:`Stream` is what ``js.create_stream(...)`` and ``js.stream(name)`` return. It keeps the
info it was made with (``cached_info``); :meth:`Stream.info` fetches a fresh one. Messages are
read with ``STREAM.MSG.GET`` (through the stream leader: read-after-write consistent) or, when
the stream allows it, with direct get (ADR-31: any replica or mirror may answer, so a message
just written may not be visible yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jscore import jsapi
from jscore.errors import JetStreamError, NoRespondersError
from jscore.models import (
    ConsumerConfig,
    ConsumerInfo,
    MsgGetResponse,
    PurgeResponse,
    StoredMsg,
    StreamInfo,
    SuccessResponse,
)

if TYPE_CHECKING:
    from .ordered import OrderedConsumer
    from .consumer import Consumer
    from .jetstream import JetStream

__all__ = ["Stream"]


class Stream:
    """A handle on one stream. Cheap; holds no server resources."""

    __slots__ = ("_js", "_name", "_info")

    def __init__(self, js: JetStream, info: StreamInfo) -> None:
        self._js = js
        self._name = info.config.name
        self._info = info

    @property
    def name(self) -> str:
        return self._name

    @property
    def cached_info(self) -> StreamInfo:
        """The info from the last fetch (creation, lookup or :meth:`info`), without a request."""
        return self._info

    @property
    def jetstream(self) -> JetStream:
        return self._js

    def __repr__(self) -> str:
        return f"<Stream {self._name!r}>"

    def info(
        self, *, subjects_filter: str | None = None, deleted_details: bool = False, timeout: float | None = None
    ) -> StreamInfo:
        """Fetch the stream's info (and refresh ``cached_info``). See
        :meth:`JetStream.stream_info` for the options."""
        info = self._js.stream_info(
            self._name, subjects_filter=subjects_filter, deleted_details=deleted_details, timeout=timeout
        )
        self._info = info
        return info

    # ------------------------------------------------------------------ contents

    def purge(
        self,
        *,
        subject: str | None = None,
        seq: int | None = None,
        keep: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """Remove messages; returns how many were purged. Without options: all of them.
        ``subject`` (wildcards allowed) limits the purge to that subject; ``seq`` purges every
        message below that sequence; ``keep`` keeps the last ``keep`` messages (``seq`` and
        ``keep`` exclude each other)."""
        body = jsapi.purge_request(subject=subject, seq=seq, keep=keep)
        r = self._js._call(self._js._subjects.stream_purge(self._name), body, PurgeResponse, timeout)
        if not r.success:
            raise JetStreamError(f"purge of stream {self._name!r} did not succeed")
        return r.purged

    def get_msg(
        self,
        seq: int | None = None,
        *,
        last_by_subject: str | None = None,
        next_by_subject: str | None = None,
        direct: bool | None = None,
        timeout: float | None = None,
    ) -> StoredMsg:
        """One stored message: by ``seq``, the last one on ``last_by_subject``, or the first one
        on ``next_by_subject`` (at or after ``seq`` when both are given).

        ``direct=None`` uses direct get when the stream's (cached) config has ``allow_direct``
        and ``STREAM.MSG.GET`` otherwise; ``True`` / ``False`` force one or the other.
        :class:`MsgNotFoundError` when there is no such message."""
        if direct is None:
            direct = bool(self._info.config.allow_direct)
        if direct:
            return self.direct_get(
                seq, last_by_subject=last_by_subject, next_by_subject=next_by_subject, timeout=timeout
            )
        body = jsapi.msg_get_request(seq, last_by_subject=last_by_subject, next_by_subject=next_by_subject)
        r = self._js._call(self._js._subjects.msg_get(self._name), body, MsgGetResponse, timeout)
        return jsapi.stored_msg_from_get(r.message, self._name)

    def direct_get(
        self,
        seq: int | None = None,
        *,
        last_by_subject: str | None = None,
        next_by_subject: str | None = None,
        start_time: datetime | None = None,
        timeout: float | None = None,
    ) -> StoredMsg:
        """One message through direct get (ADR-31; the stream needs ``allow_direct``): by
        ``seq``; the last one on ``last_by_subject`` (a literal subject uses the subject-appended
        form ``DIRECT.GET.<stream>.<subject>``); the first one on ``next_by_subject`` at or
        after ``seq`` or ``start_time``; or the first one at or after ``start_time``.
        :class:`MsgNotFoundError` (a 404) when there is none. No read-after-write guarantee."""
        subject, body = jsapi.direct_get_request(
            self._js._subjects,
            self._name,
            seq,
            last_by_subject=last_by_subject,
            next_by_subject=next_by_subject,
            start_time=start_time,
        )
        t = timeout if timeout is not None else self._js.timeout
        try:
            reply = self._js.client.request(subject, body, timeout=t)
        except NoRespondersError as exc:
            raise JetStreamError(
                f"direct get on stream {self._name!r} has no responders: the stream does not exist or "
                "does not allow direct get (allow_direct)"
            ) from exc
        return jsapi.stored_msg_from_direct(reply.headers, reply.data, reply.status, reply.description)

    def delete_msg(self, seq: int, *, erase: bool = False, timeout: float | None = None) -> None:
        """Delete the message at ``seq`` (:class:`MsgNotFoundError` if there is none). With
        ``erase`` its bytes are overwritten on disk too (slower)."""
        body = jsapi.msg_delete_request(seq, erase=erase)
        r = self._js._call(self._js._subjects.msg_delete(self._name), body, SuccessResponse, timeout)
        if not r.success:
            raise JetStreamError(f"message {seq} of stream {self._name!r} was not deleted")

    # ------------------------------------------------------------------ consumers

    def create_consumer(
        self, config: ConsumerConfig | None = None, *, timeout: float | None = None, **fields: Any
    ) -> Consumer:
        return self._js.create_consumer(self._name, config, timeout=timeout, **fields)

    def update_consumer(
        self, config: ConsumerConfig | None = None, *, timeout: float | None = None, **fields: Any
    ) -> Consumer:
        return self._js.update_consumer(self._name, config, timeout=timeout, **fields)

    def create_or_update_consumer(
        self, config: ConsumerConfig | None = None, *, timeout: float | None = None, **fields: Any
    ) -> Consumer:
        return self._js.create_or_update_consumer(self._name, config, timeout=timeout, **fields)

    def consumer(self, name: str, *, timeout: float | None = None) -> Consumer:
        return self._js.consumer(self._name, name, timeout=timeout)

    def delete_consumer(self, name: str, *, timeout: float | None = None) -> None:
        self._js.delete_consumer(self._name, name, timeout=timeout)

    def consumers(self, *, timeout: float | None = None) -> Iterator[ConsumerInfo]:
        return self._js.consumers(self._name, timeout=timeout)

    def consumer_names(self, *, timeout: float | None = None) -> Iterator[str]:
        return self._js.consumer_names(self._name, timeout=timeout)

    def ordered_consumer(self, **options: Any) -> OrderedConsumer:
        """An ordered consumer of this stream (see :meth:`JetStream.ordered_consumer`)."""
        return self._js.ordered_consumer(self._name, **options)
