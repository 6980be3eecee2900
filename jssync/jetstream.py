"""The JetStream context (ADR-37): stream and consumer management, and publishing.

``nc.jetstream()`` returns a :class:`JetStream`. Management requests go to
``$JS.API.<...>`` (``$JS.<domain>.API.<...>`` with a domain, or a custom API prefix); the
subjects and bodies are built (and every name validated) by :mod:`jscore.jsapi`. Publishing
lives in :mod:`jssync.publish` and is reached through the same context.

Every method takes ``timeout`` (seconds, default: the context's); a :class:`TimeoutError`
subclass is raised when the server does not answer in time, a typed
:class:`~jscore.errors.JetStreamAPIError` when it answers with an error.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from jscore import jsapi, status
from jscore.errors import (
    BucketNotFoundError,
    InvalidOptionError,
    JetStreamError,
    NoRespondersError,
    StreamNotFoundError,
)
from jscore.headers import HeadersInput
from jscore.models import (
    DeliverPolicy,
    AccountInfo,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerListResponse,
    ConsumerNamesResponse,
    PauseResponse,
    PubAck,
    ConsumerConfigFields,
    StreamConfig,
    StreamConfigFields,
    StreamInfo,
    StreamListResponse,
    StreamNamesResponse,
    SuccessResponse,
    config_from_fields,
    decode_response,
    spell_out_fields,
)

from jscore.validate import check_bool, check_timeout

from .client import shell_of
from .consumer import Consumer
from .ordered import OrderedConsumer, ordered_options
from .stream import Stream

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from jscore.kv import KeyValueFields, KeyValueStatus
    from jscore.objstore import ObjectStoreFields

    from .client import Client
    from .kv import KeyValue
    from jscore.objstore import ObjectStoreStatus

    from .msg import Msg
    from .objstore import ObjectStore
    from .publish import Publisher, PubAckFuture

__all__ = ["JetStream", "DEFAULT_API_PREFIX"]

DEFAULT_API_PREFIX = jsapi.DEFAULT_API_PREFIX

T = TypeVar("T")

# What a bucket call does with its stream.
_CREATE, _UPDATE, _UPSERT = "create", "update", "create_or_update"


def _ephemeral_name() -> str:
    return secrets.token_urlsafe(16)  # 22 characters of A-Z a-z 0-9 - _


class JetStream:
    """A JetStream context bound to one client. Cheap to create; thread-safe."""

    def __init__(
        self,
        client: Client,
        *,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        timeout = check_timeout(timeout)
        prefix = jsapi.api_prefix(domain, api_prefix)
        self._nc = client
        self.domain = domain
        self.api_prefix = prefix
        self.timeout = timeout
        self._subjects = jsapi.ApiSubjects(prefix)
        self._publisher: Publisher | None = None

    @property
    def client(self) -> Client:
        return self._nc

    def __repr__(self) -> str:
        return f"<JetStream api_prefix={self.api_prefix!r}>"

    # ------------------------------------------------------------------ requests

    def _request(self, subject: str, payload: bytes = b"", *, timeout: float | None = None) -> Msg:
        """One JetStream API request on a full subject. A 503 no-responders answer means
        JetStream is not enabled (or not reachable) for this account/domain/prefix."""
        try:
            return self._nc.request(subject, payload, timeout=timeout if timeout is not None else self.timeout)
        except NoRespondersError as exc:  # (the 503 of a request: the status table's API row says what it means)
            error = status.request_error(status.Context.API, 503, None, subject)
            assert error is not None
            raise error from exc

    def _api(self, suffix: str, payload: bytes = b"", *, timeout: float | None = None) -> bytes:
        """One JetStream API request on ``<api_prefix><suffix>``; returns the raw reply body."""
        return self._request(self.api_prefix + suffix, payload, timeout=timeout).data

    def _call(self, subject: str, payload: bytes, type_: type[T], timeout: float | None) -> T:
        """Request and decode the reply into ``type_``; an error body raises its typed error."""
        return decode_response(self._request(subject, payload, timeout=timeout).data, type_)

    # ------------------------------------------------------------------ ordered consumer

    def ordered_consumer(
        self,
        stream: str,
        *,
        filter_subjects: str | Sequence[str] | None = None,
        deliver_policy: DeliverPolicy | str | None = None,
        opt_start_seq: int | None = None,
        opt_start_time: datetime | None = None,
        headers_only: bool = False,
    ) -> OrderedConsumer:
        """An ordered consumer of ``stream``: every message (of the filters) once, in stream
        order, with no acks, surviving gaps, lost consumers and reconnects. Nothing is created
        on the server before the first fetch, next, consume or messages."""
        jsapi.check_stream_name(stream)
        opts = ordered_options(filter_subjects, deliver_policy, opt_start_seq, opt_start_time, headers_only)
        return OrderedConsumer(self, stream, opts)

    # ------------------------------------------------------------------ key-value store

    def create_key_value(
        self, bucket: str, *, timeout: float | None = None, **fields: Unpack[KeyValueFields]
    ) -> KeyValue:
        """Create the key-value bucket ``bucket`` (the stream ``KV_<bucket>``). ``fields``:
        ``description``, ``history`` (1..64, default 1), ``ttl`` (seconds), ``max_value_size``,
        ``max_bytes``, ``storage`` (file), ``replicas`` (1), ``limit_marker_ttl``, ``metadata``,
        ``compression`` (False), ``placement``. An identical bucket is not an error; another
        configuration under that name raises :class:`StreamNameInUseError`."""
        from .kv import key_value_bucket

        return key_value_bucket(self, bucket, _CREATE, timeout, fields)

    def update_key_value(
        self, bucket: str, *, timeout: float | None = None, **fields: Unpack[KeyValueFields]
    ) -> KeyValue:
        """Replace the bucket's configuration with the one the ``fields`` of
        :meth:`create_key_value` make (fields not given take their defaults, not the current
        values); :class:`BucketNotFoundError`, or the server's typed error for a change it
        refuses (the storage type, for one)."""
        from .kv import key_value_bucket

        return key_value_bucket(self, bucket, _UPDATE, timeout, fields)

    def create_or_update_key_value(
        self, bucket: str, *, timeout: float | None = None, **fields: Unpack[KeyValueFields]
    ) -> KeyValue:
        """:meth:`update_key_value`, or :meth:`create_key_value` when there is no such bucket."""
        from .kv import key_value_bucket

        return key_value_bucket(self, bucket, _UPSERT, timeout, fields)

    def key_value(self, bucket: str, *, timeout: float | None = None) -> KeyValue:
        """A handle on an existing bucket (:class:`BucketNotFoundError`)."""
        from .kv import bind_key_value

        return bind_key_value(self, bucket, timeout)

    def delete_key_value(self, bucket: str, *, timeout: float | None = None) -> None:
        """Delete the bucket and everything in it (:class:`BucketNotFoundError`)."""
        from .kv import delete_key_value

        delete_key_value(self, bucket, timeout)

    def key_value_names(self, *, timeout: float | None = None) -> Iterator[str]:
        """The names of every bucket."""
        from .kv import key_value_names

        return key_value_names(self, timeout)

    def key_values(self, *, timeout: float | None = None) -> Iterator[KeyValueStatus]:
        """The status of every bucket."""
        from .kv import key_values

        return key_values(self, timeout)

    # ------------------------------------------------------------------ account

    def account_info(self, *, timeout: float | None = None) -> AccountInfo:
        """Usage, limits and API statistics of this account (``$JS.API.INFO``)."""
        return self._call(self._subjects.account_info(), b"", AccountInfo, timeout)

    # ------------------------------------------------------------------ streams

    def _upsert_stream(self, subject_of: Any, cfg: StreamConfig, timeout: float | None) -> Stream:
        body = jsapi.stream_config_request(cfg)
        info = self._call(subject_of(cfg.name), body, StreamInfo, timeout)
        return Stream(self, info)

    def _bucket_stream(self, cfg: StreamConfig, action: str, bucket: str, timeout: float | None) -> Stream:
        """The stream of a bucket (key-value or object store), created, updated or either;
        an update of a missing one raises :class:`BucketNotFoundError`."""
        if action == _CREATE:
            return self.create_stream(cfg, timeout=timeout)
        if action == _UPSERT:
            return self.create_or_update_stream(cfg, timeout=timeout)
        try:
            return self.update_stream(cfg, timeout=timeout)
        except StreamNotFoundError as exc:
            raise BucketNotFoundError.of(exc, bucket) from exc

    @spell_out_fields(StreamConfigFields)
    def create_stream(
        self,
        config: StreamConfig | None = None,
        *,
        timeout: float | None = None,
        **fields: Unpack[StreamConfigFields],
    ) -> Stream:
        """Create a stream from a :class:`StreamConfig` and/or its fields as keywords.
        Creating a stream that exists with the same config succeeds; with a different one it
        raises :class:`StreamNameInUseError`."""
        cfg = config_from_fields(StreamConfig, config, fields, "create_stream")
        return self._upsert_stream(self._subjects.stream_create, cfg, timeout)

    @spell_out_fields(StreamConfigFields)
    def update_stream(
        self,
        config: StreamConfig | None = None,
        *,
        timeout: float | None = None,
        **fields: Unpack[StreamConfigFields],
    ) -> Stream:
        """Update an existing stream (:class:`StreamNotFoundError` if there is none). Send the
        whole config: fields left unset take the server's defaults, not the current values."""
        cfg = config_from_fields(StreamConfig, config, fields, "update_stream")
        return self._upsert_stream(self._subjects.stream_update, cfg, timeout)

    @spell_out_fields(StreamConfigFields)
    def create_or_update_stream(
        self,
        config: StreamConfig | None = None,
        *,
        timeout: float | None = None,
        **fields: Unpack[StreamConfigFields],
    ) -> Stream:
        """Update the stream, or create it when it does not exist."""
        cfg = config_from_fields(StreamConfig, config, fields, "create_or_update_stream")
        try:
            return self._upsert_stream(self._subjects.stream_update, cfg, timeout)
        except StreamNotFoundError:
            return self._upsert_stream(self._subjects.stream_create, cfg, timeout)

    def stream_info(
        self,
        name: str,
        *,
        subjects_filter: str | None = None,
        deleted_details: bool = False,
        timeout: float | None = None,
    ) -> StreamInfo:
        """The info of one stream. ``subjects_filter`` (wildcards allowed) fills
        ``state.subjects`` with the message count per subject (all pages);
        ``deleted_details`` fills ``state.deleted``."""
        subject = self._subjects.stream_info(name)
        body = jsapi.stream_info_request(deleted_details=deleted_details, subjects_filter=subjects_filter)
        if subjects_filter is None:
            return self._call(subject, body, StreamInfo, timeout)
        from jscore.models import StreamInfoResponse

        info = self._call(subject, body, StreamInfoResponse, timeout)
        subjects: dict[str, int] = dict(info.state.subjects or {})
        while len(subjects) < info.total:
            body = jsapi.stream_info_request(
                deleted_details=deleted_details, subjects_filter=subjects_filter, offset=len(subjects)
            )
            page = self._call(subject, body, StreamInfoResponse, timeout)
            new = page.state.subjects or {}
            if not new or new.keys() <= subjects.keys():
                break
            subjects.update(new)
            info = page
        if subjects:
            msgspec.structs.force_setattr(info.state, "subjects", subjects)
        return info

    def stream(self, name: str, *, timeout: float | None = None) -> Stream:
        """A handle on an existing stream (its info is fetched: :class:`StreamNotFoundError`)."""
        return Stream(self, self.stream_info(name, timeout=timeout))

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        """Delete a stream and its messages and consumers (:class:`StreamNotFoundError`)."""
        r = self._call(self._subjects.stream_delete(name), b"", SuccessResponse, timeout)
        if not r.success:
            raise JetStreamError(f"stream {name!r} was not deleted")

    def streams(self, subject: str | None = None, *, timeout: float | None = None) -> Iterator[StreamInfo]:
        """Iterate over the info of every stream (only those capturing ``subject`` when given),
        page by page (the server sends 256 per page)."""
        list_subject = self._subjects.stream_list()
        if subject is not None:
            jsapi.check_filter_subject(subject, "subject")

        def fetch(offset: int) -> tuple[int, list[StreamInfo]]:
            page = self._call(list_subject, jsapi.page_request(offset, subject), StreamListResponse, timeout)
            return page.total, page.streams or []

        return jsapi.iter_pages(fetch)

    def stream_names(self, subject: str | None = None, *, timeout: float | None = None) -> Iterator[str]:
        """Iterate over the names of every stream (only those capturing ``subject`` when given)."""
        names_subject = self._subjects.stream_names()
        if subject is not None:
            jsapi.check_filter_subject(subject, "subject")

        def fetch(offset: int) -> tuple[int, list[str]]:
            page = self._call(names_subject, jsapi.page_request(offset, subject), StreamNamesResponse, timeout)
            return page.total, page.streams or []

        return jsapi.iter_pages(fetch)

    def stream_name_by_subject(self, subject: str, *, timeout: float | None = None) -> str:
        """The name of the stream that captures ``subject`` (:class:`StreamNotFoundError`)."""
        jsapi.check_filter_subject(subject, "subject")
        page = self._call(self._subjects.stream_names(), jsapi.page_request(0, subject), StreamNamesResponse, timeout)
        if not page.streams:
            raise StreamNotFoundError(404, 10059, f"no stream captures subject {subject!r}")
        return page.streams[0]

    # ------------------------------------------------------------------ consumers

    def _upsert_consumer(
        self,
        stream: str,
        config: ConsumerConfig | None,
        fields: ConsumerConfigFields,
        action: str,
        timeout: float | None,
        call: str,
    ) -> Consumer:
        cfg = config_from_fields(ConsumerConfig, config, fields, call)
        subject, body, _ = jsapi.consumer_create_request(
            self._subjects, stream, cfg, action, ephemeral_name=_ephemeral_name()
        )
        info = self._call(subject, body, ConsumerInfo, timeout)
        return Consumer(self, info)

    @spell_out_fields(ConsumerConfigFields)
    def create_consumer(
        self,
        stream: str,
        config: ConsumerConfig | None = None,
        *,
        timeout: float | None = None,
        **fields: Unpack[ConsumerConfigFields],
    ) -> Consumer:
        """Create a consumer (durable with ``durable_name`` or ``name``; ephemeral without,
        with a random name). Creating an identical consumer again succeeds; a different one
        under the same name raises :class:`ConsumerExistsError`. ``ack_policy`` defaults to
        explicit."""
        return self._upsert_consumer(stream, config, fields, jsapi.ACTION_CREATE, timeout, "create_consumer")

    @spell_out_fields(ConsumerConfigFields)
    def update_consumer(
        self,
        stream: str,
        config: ConsumerConfig | None = None,
        *,
        timeout: float | None = None,
        **fields: Unpack[ConsumerConfigFields],
    ) -> Consumer:
        """Update an existing consumer (:class:`ConsumerDoesNotExistError`, a
        :class:`ConsumerNotFoundError`, when there is none)."""
        return self._upsert_consumer(stream, config, fields, jsapi.ACTION_UPDATE, timeout, "update_consumer")

    @spell_out_fields(ConsumerConfigFields)
    def create_or_update_consumer(
        self,
        stream: str,
        config: ConsumerConfig | None = None,
        *,
        timeout: float | None = None,
        **fields: Unpack[ConsumerConfigFields],
    ) -> Consumer:
        """Create the consumer, or update it when it exists."""
        return self._upsert_consumer(stream, config, fields, jsapi.ACTION_CREATE_OR_UPDATE, timeout, "create_or_update_consumer")

    def consumer_info(self, stream: str, name: str, *, timeout: float | None = None) -> ConsumerInfo:
        return self._call(self._subjects.consumer_info(stream, name), b"", ConsumerInfo, timeout)

    def consumer(self, stream: str, name: str, *, bind: bool = False, timeout: float | None = None) -> Consumer:
        """A handle on an existing consumer: its info is fetched (:class:`ConsumerNotFoundError`,
        :class:`StreamNotFoundError`).

        ``bind=True`` makes the handle from the names alone, without any request (ADR-37: the
        info of a consumer exported from another account cannot be read there). It pulls like
        any other; a consumer that does not exist shows up on the first pull (a consume
        retries 503 no responders, then asks for the info; a fetch ends with the error). What
        needs the configuration is checked only once :meth:`Consumer.info` succeeded:
        priority-group options go to the server unchecked until then, and ``cached_info``
        raises :class:`NoConsumerInfoError`."""
        check_bool(bind, "bind")
        if bind:
            return Consumer(self, None, stream=stream, name=name)
        return Consumer(self, self.consumer_info(stream, name, timeout=timeout))

    def delete_consumer(self, stream: str, name: str, *, timeout: float | None = None) -> None:
        r = self._call(self._subjects.consumer_delete(stream, name), b"", SuccessResponse, timeout)
        if not r.success:
            raise JetStreamError(f"consumer {name!r} of stream {stream!r} was not deleted")

    def consumers(self, stream: str, *, timeout: float | None = None) -> Iterator[ConsumerInfo]:
        """Iterate over the info of every consumer of ``stream``, page by page."""
        subject = self._subjects.consumer_list(stream)

        def fetch(offset: int) -> tuple[int, list[ConsumerInfo]]:
            page = self._call(subject, jsapi.page_request(offset), ConsumerListResponse, timeout)
            return page.total, page.consumers or []

        return jsapi.iter_pages(fetch)

    def consumer_names(self, stream: str, *, timeout: float | None = None) -> Iterator[str]:
        """Iterate over the names of every consumer of ``stream``."""
        subject = self._subjects.consumer_names(stream)

        def fetch(offset: int) -> tuple[int, list[str]]:
            page = self._call(subject, jsapi.page_request(offset), ConsumerNamesResponse, timeout)
            return page.total, page.consumers or []

        return jsapi.iter_pages(fetch)

    def unpin_consumer(self, stream: str, name: str, group: str, *, timeout: float | None = None) -> None:
        """Unpin the pinned client of priority ``group`` (ADR-42): the next pull gets the pin.
        ``$JS.API.CONSUMER.UNPIN.<stream>.<consumer>`` with ``{"group": ...}`` (nats-server 2.15;
        ADR-42 names the group as a subject token instead, which the server does not serve).
        :class:`PriorityGroupNotFoundError` for a group the consumer does not have."""
        body = jsapi.unpin_request(group)
        self._call(self._subjects.consumer_unpin(stream, name), body, SuccessResponse, timeout)

    def pause_consumer(
        self, stream: str, name: str, until: datetime, *, timeout: float | None = None
    ) -> PauseResponse:
        """Pause consumer ``name`` until ``until`` (an aware datetime; a time in the past
        resumes it): ``$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`` with ``{"pause_until": ...}``.
        While paused, pulls wait and get heartbeats but no messages."""
        if until is None:
            raise InvalidOptionError("until must be a datetime (use resume_consumer to resume)")
        body = jsapi.pause_request(until)
        return self._call(self._subjects.consumer_pause(stream, name), body, PauseResponse, timeout)

    def resume_consumer(self, stream: str, name: str, *, timeout: float | None = None) -> PauseResponse:
        """Resume a paused consumer now (``CONSUMER.PAUSE`` with ``{}``)."""
        return self._call(self._subjects.consumer_pause(stream, name), jsapi.pause_request(None), PauseResponse, timeout)

    # ------------------------------------------------------------------ publishing

    def _pub(self) -> Publisher:
        p = self._publisher
        if p is None:
            from .publish import Publisher

            with shell_of(self._nc).lock:  # one Publisher (one async window) per context, even when racing
                p = self._publisher
                if p is None:
                    p = self._publisher = Publisher(self)
                    # From now on js.publish_async IS the publisher's method (same signature): one
                    # Python call less per message on the async hot path.
                    self.publish_async = p.publish_async  # type: ignore[method-assign]
        return p

    def configure_publish(
        self,
        *,
        max_pending: int | None = None,
        ack_timeout: float | None = None,
        retry_attempts: int | None = None,
        retry_wait: float | None = None,
        auto_msg_id: bool | None = None,
    ) -> None:
        """Publishing settings of this context (see :meth:`jssync.publish.Publisher.configure`):
        ``max_pending`` async publishes in flight (4000), their ``ack_timeout`` (the context's
        timeout), the re-send budget ``ack_timeout * (retry_attempts + 1)`` (``retry_attempts``
        2) with re-sends backing off from ``retry_wait`` (0.25 s), and ``auto_msg_id`` (a msg id
        for every async publish, so all are re-sent after a reconnect)."""
        self._pub().configure(
            max_pending=max_pending,
            ack_timeout=ack_timeout,
            retry_attempts=retry_attempts,
            retry_wait=retry_wait,
            auto_msg_id=auto_msg_id,
        )

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: HeadersInput | None = None,
        timeout: float | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_subject_seq_subject: str | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
    ) -> PubAck:
        """Publish and wait for the PubAck (see :meth:`jssync.publish.Publisher.publish`).

        ``timeout``: how long to wait for the PubAck (default: the context's). The options
        become headers the stream checks: ``msg_id`` (``Nats-Msg-Id``, deduplication within the
        stream's duplicate window), ``expected_stream``, ``expected_last_seq``,
        ``expected_last_subject_seq`` (with ``expected_last_subject_seq_subject`` to check a
        filter subject instead), ``expected_last_msg_id``, ``ttl`` (whole seconds >= 1, or
        ``"never"``). A wrong value raises :class:`InvalidOptionError` naming the option,
        before anything is sent."""
        return self._pub().publish(
            subject, payload, headers=headers, timeout=timeout, msg_id=msg_id, expected_stream=expected_stream,
            expected_last_seq=expected_last_seq, expected_last_subject_seq=expected_last_subject_seq,
            expected_last_subject_seq_subject=expected_last_subject_seq_subject,
            expected_last_msg_id=expected_last_msg_id, ttl=ttl,
        )

    def publish_async(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: HeadersInput | None = None,
        timeout: float | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_subject_seq_subject: str | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        auto_msg_id: bool | None = None,
    ) -> PubAckFuture:
        """Publish without waiting; the future resolves to the PubAck or raises (see
        :meth:`jssync.publish.Publisher.publish_async`). The options are those of
        :meth:`publish`; ``timeout`` is the wait for room in a full window, and ``auto_msg_id``
        gives this publish a unique msg id (default: the context's setting)."""
        return self._pub().publish_async(
            subject, payload, headers=headers, timeout=timeout, msg_id=msg_id, expected_stream=expected_stream,
            expected_last_seq=expected_last_seq, expected_last_subject_seq=expected_last_subject_seq,
            expected_last_subject_seq_subject=expected_last_subject_seq_subject,
            expected_last_msg_id=expected_last_msg_id, ttl=ttl, auto_msg_id=auto_msg_id,
        )

    @property
    def publish_async_pending(self) -> int:
        return 0 if self._publisher is None else self._publisher.pending

    def publish_async_complete(self, timeout: float = 30.0) -> None:
        """Wait until every async publish is acknowledged or failed."""
        if self._publisher is not None:
            self._publisher.complete(timeout)

    # ------------------------------------------------------------------ object store

    def create_object_store(
        self, bucket: str, *, timeout: float | None = None, **fields: Unpack[ObjectStoreFields]
    ) -> ObjectStore:
        """Create the object store ``bucket`` (the stream ``OBJ_<bucket>``). ``fields``:
        ``description``, ``ttl`` (seconds), ``max_bytes``, ``storage`` (file), ``replicas`` (1),
        ``metadata``, ``compression`` (s2 on the server; False), ``placement``. Creating it
        again with the same options succeeds; with different ones it raises
        :class:`StreamNameInUseError`."""
        from .objstore import object_store_bucket

        return object_store_bucket(self, bucket, _CREATE, timeout, fields)

    def update_object_store(
        self, bucket: str, *, timeout: float | None = None, **fields: Unpack[ObjectStoreFields]
    ) -> ObjectStore:
        """Replace the bucket's configuration with the one the ``fields`` of
        :meth:`create_object_store` make (fields not given take their defaults, not the current
        values); the objects stay. :class:`BucketNotFoundError`, or the server's typed error
        for a change it refuses (the storage type, replicas beyond the cluster, unsealing)."""
        from .objstore import object_store_bucket

        return object_store_bucket(self, bucket, _UPDATE, timeout, fields)

    def create_or_update_object_store(
        self, bucket: str, *, timeout: float | None = None, **fields: Unpack[ObjectStoreFields]
    ) -> ObjectStore:
        """:meth:`update_object_store`, or :meth:`create_object_store` when there is no such
        bucket."""
        from .objstore import object_store_bucket

        return object_store_bucket(self, bucket, _UPSERT, timeout, fields)

    def object_store(self, bucket: str, *, timeout: float | None = None) -> ObjectStore:
        """An existing object store (:class:`BucketNotFoundError`)."""
        from . import objstore

        return objstore.object_store(self, bucket, timeout=timeout)

    def delete_object_store(self, bucket: str, *, timeout: float | None = None) -> None:
        """Delete an object store and every object in it (:class:`BucketNotFoundError`)."""
        from . import objstore

        objstore.delete_object_store(self, bucket, timeout=timeout)

    def object_store_names(self, *, timeout: float | None = None) -> Iterator[str]:
        """The names of every object store of the account."""
        from . import objstore

        return objstore.object_store_names(self, timeout=timeout)

    def object_stores(self, *, timeout: float | None = None) -> Iterator[ObjectStoreStatus]:
        """The status of every object store of the account."""
        from . import objstore

        return objstore.object_stores(self, timeout=timeout)
