"""The JetStream management API on the wire: subjects, request bodies, validation, paging.

Sans-IO like the rest of jscore: these functions build the subject and the JSON body of each
request and read the replies; jssync sends them. Every name and subject is validated here,
before anything can reach the wire:

* stream and consumer names (ADR-6): not empty, at most 255 bytes, no whitespace or control
  characters and none of ``.`` ``*`` ``>`` ``/`` ``\\`` -> :class:`InvalidOptionError`;
* subjects and filters: the subscription rules of :mod:`jscore.protocol` (wildcards as whole
  tokens, ``>`` last, no empty token, no whitespace) -> :class:`BadSubjectError`;
* priority group names (ADR-42): 1-16 characters of ``A-Z a-z 0-9 - _ / =``.

The API prefix is ``$JS.API.``, ``$JS.<domain>.API.`` with a domain, or a custom prefix that
replaces ``$JS.API.`` entirely (an account import of another account's JetStream API).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Final, TypeVar, Union

import msgspec

from .errors import (
    BadSubjectError,
    InvalidOptionError,
    JetStreamError,
    RemoteProtocolError,
)
from .headers import Headers, headers_of_lines, parse_header_block
from .models import (
    AckPolicy,
    ConsumerConfig,
    RawStoredMsg,
    StoredMsg,
    StreamConfig,
    _Model,
    check_config,
    encode,
)
from .protocol import check_publish_subject, check_subscribe_subject
from . import times as _times
from .times import NatsTime

__all__ = [
    "DEFAULT_API_PREFIX",
    "MAX_NAME_LEN",
    "ACTION_CREATE",
    "ACTION_UPDATE",
    "ACTION_CREATE_OR_UPDATE",
    "api_prefix",
    "check_name",
    "check_stream_name",
    "check_consumer_name",
    "check_filter_subject",
    "check_group_name",
    "has_wildcard",
    "subject_matches",
    "ApiSubjects",
    "stream_config_request",
    "stream_info_request",
    "consumer_create_request",
    "purge_request",
    "msg_get_request",
    "direct_get_request",
    "msg_delete_request",
    "page_request",
    "unpin_request",
    "pause_request",
    "iter_pages",
    "stored_msg_from_get",
    "stored_msg_from_direct",
    "parse_nats_time",
    "DIRECT_GET_HEADERS",
    "stored_msg_and_cursor",
    "DirectCursor",
]

T = TypeVar("T")

DEFAULT_API_PREFIX: Final = "$JS.API."
MAX_NAME_LEN: Final = 255

ACTION_CREATE: Final = "create"
ACTION_UPDATE: Final = "update"
ACTION_CREATE_OR_UPDATE: Final = ""

# Whitespace (ASCII and Unicode), control characters, and the characters ADR-6 forbids.
_BAD_NAME_CHAR: Final = re.compile(r"[\s\x00-\x1f\x7f.*>/\\]")
_GROUP_NAME: Final = re.compile(r"[A-Za-z0-9\-_/=]{1,16}")
_BAD_DOMAIN_CHAR: Final = re.compile(r"[\s\x00-\x1f\x7f.*>]")


# =========================================================================== prefix and names


def api_prefix(domain: str | None = None, api_prefix: str | None = None) -> str:
    """The subject prefix of every API request, ending with a dot."""
    if domain is not None and api_prefix is not None:
        raise InvalidOptionError("give domain or api_prefix, not both")
    if domain is not None:
        if not isinstance(domain, str) or not domain or _BAD_DOMAIN_CHAR.search(domain):
            raise InvalidOptionError(f"invalid JetStream domain {domain!r}")
        return f"$JS.{domain}.API."
    if api_prefix is not None:
        if not isinstance(api_prefix, str) or not api_prefix.strip("."):
            raise InvalidOptionError("api_prefix must not be empty")
        prefix = api_prefix if api_prefix.endswith(".") else api_prefix + "."
        try:
            check_publish_subject(prefix[:-1], "api_prefix")
        except BadSubjectError as exc:
            raise InvalidOptionError(str(exc)) from None
        return prefix
    return DEFAULT_API_PREFIX


def check_name(name: object, what: str = "name") -> str:
    """Validate a stream, consumer or durable name (ADR-6); returns it."""
    if not isinstance(name, str):
        raise InvalidOptionError(f"{what} must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidOptionError(f"{what} must not be empty")
    bad = _BAD_NAME_CHAR.search(name)
    if bad is not None:
        raise InvalidOptionError(
            f"{what} {name[:64]!r} must not contain whitespace, control characters, '.', '*', '>', '/' "
            f"or '\\' (found {bad.group()!r})"
        )
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise InvalidOptionError(f"{what} {name[:64]!r} is not encodable as UTF-8") from None
    if size > MAX_NAME_LEN:
        raise InvalidOptionError(f"{what} is {size} bytes; the limit is {MAX_NAME_LEN}")
    return name


def check_stream_name(name: object) -> str:
    return check_name(name, "stream name")


def check_consumer_name(name: object) -> str:
    return check_name(name, "consumer name")


def check_filter_subject(subject: str, what: str = "filter subject") -> str:
    """Validate a subject filter (wildcards allowed); :class:`BadSubjectError` if invalid."""
    if not isinstance(subject, str):
        raise BadSubjectError(f"{what} must be a str, got {type(subject).__name__}")
    try:
        check_subscribe_subject(subject)
    except BadSubjectError as exc:
        raise BadSubjectError(f"invalid {what} {subject[:64]!r}: {exc}") from None
    return subject


def check_group_name(group: object) -> str:
    """Validate a priority group name (ADR-42): 1-16 characters of A-Z a-z 0-9 - _ / =."""
    if not isinstance(group, str) or _GROUP_NAME.fullmatch(group) is None:
        raise InvalidOptionError(f"invalid priority group {group!r}: 1-16 characters of A-Z a-z 0-9 - _ / =")
    return group


def has_wildcard(subject: str) -> bool:
    return any(tok == "*" or tok == ">" for tok in subject.split("."))


def subject_matches(subject: str, filter_subject: str) -> bool:
    """Whether the literal ``subject`` is matched by ``filter_subject`` (``*`` one token, ``>``
    one or more trailing tokens), as the server matches a stream's subjects."""
    if "*" not in filter_subject and ">" not in filter_subject:
        return subject == filter_subject
    toks = subject.split(".")
    pattern = filter_subject.split(".")
    for i, p in enumerate(pattern):
        if p == ">":
            return len(toks) > i
        if i >= len(toks) or (p != "*" and p != toks[i]):
            return False
    return len(toks) == len(pattern)


# =========================================================================== subjects


class ApiSubjects:
    """The request subject of every API call under one prefix. Names are validated here."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = DEFAULT_API_PREFIX) -> None:
        self.prefix = prefix

    def account_info(self) -> str:
        return self.prefix + "INFO"

    def stream_create(self, stream: str) -> str:
        return f"{self.prefix}STREAM.CREATE.{check_stream_name(stream)}"

    def stream_update(self, stream: str) -> str:
        return f"{self.prefix}STREAM.UPDATE.{check_stream_name(stream)}"

    def stream_info(self, stream: str) -> str:
        return f"{self.prefix}STREAM.INFO.{check_stream_name(stream)}"

    def stream_delete(self, stream: str) -> str:
        return f"{self.prefix}STREAM.DELETE.{check_stream_name(stream)}"

    def stream_purge(self, stream: str) -> str:
        return f"{self.prefix}STREAM.PURGE.{check_stream_name(stream)}"

    def stream_names(self) -> str:
        return self.prefix + "STREAM.NAMES"

    def stream_list(self) -> str:
        return self.prefix + "STREAM.LIST"

    def msg_get(self, stream: str) -> str:
        return f"{self.prefix}STREAM.MSG.GET.{check_stream_name(stream)}"

    def msg_delete(self, stream: str) -> str:
        return f"{self.prefix}STREAM.MSG.DELETE.{check_stream_name(stream)}"

    def direct_get(self, stream: str, last_by_subject: str | None = None) -> str:
        """``DIRECT.GET.<stream>``, or ``DIRECT.GET.<stream>.<subject>`` (last message on a
        literal subject, requested with an empty body)."""
        subject = f"{self.prefix}DIRECT.GET.{check_stream_name(stream)}"
        if last_by_subject is not None:
            check_publish_subject(last_by_subject, "subject")
            subject = f"{subject}.{last_by_subject}"
        return subject

    def consumer_create(self, stream: str, consumer: str, filter_subject: str | None = None) -> str:
        subject = f"{self.prefix}CONSUMER.CREATE.{check_stream_name(stream)}.{check_consumer_name(consumer)}"
        if filter_subject is not None:
            check_publish_subject(filter_subject, "filter subject")
            subject = f"{subject}.{filter_subject}"
        return subject

    def consumer_info(self, stream: str, consumer: str) -> str:
        return f"{self.prefix}CONSUMER.INFO.{check_stream_name(stream)}.{check_consumer_name(consumer)}"

    def consumer_delete(self, stream: str, consumer: str) -> str:
        return f"{self.prefix}CONSUMER.DELETE.{check_stream_name(stream)}.{check_consumer_name(consumer)}"

    def consumer_names(self, stream: str) -> str:
        return f"{self.prefix}CONSUMER.NAMES.{check_stream_name(stream)}"

    def consumer_list(self, stream: str) -> str:
        return f"{self.prefix}CONSUMER.LIST.{check_stream_name(stream)}"

    def consumer_unpin(self, stream: str, consumer: str) -> str:
        return f"{self.prefix}CONSUMER.UNPIN.{check_stream_name(stream)}.{check_consumer_name(consumer)}"

    def consumer_pause(self, stream: str, consumer: str) -> str:
        return f"{self.prefix}CONSUMER.PAUSE.{check_stream_name(stream)}.{check_consumer_name(consumer)}"


# =========================================================================== request bodies


class _PageRequest(_Model, kw_only=True):
    offset: int
    subject: str | None = None


class _StreamInfoRequest(_Model, kw_only=True):
    deleted_details: bool | None = None
    subjects_filter: str | None = None
    offset: int | None = None


class _PurgeRequest(_Model, kw_only=True):
    filter: str | None = None
    seq: int | None = None
    keep: int | None = None


class _MsgGetRequest(_Model, kw_only=True):
    seq: int | None = None
    last_by_subj: str | None = None
    next_by_subj: str | None = None


class _DirectGetRequest(_Model, kw_only=True):
    """The body of every direct get (ADR-31): single, batch (``batch``, ``max_bytes``) and
    multi_last (``multi_last``, ``up_to_seq``, ``up_to_time``); see :mod:`jscore.directget`."""

    seq: int | None = None
    last_by_subj: str | None = None
    next_by_subj: str | None = None
    start_time: datetime | None = None
    batch: int | None = None
    max_bytes: int | None = None
    multi_last: list[str] | None = None
    up_to_seq: int | None = None
    up_to_time: datetime | None = None


class _MsgDeleteRequest(_Model, kw_only=True):
    seq: int
    no_erase: bool | None = None


class _ConsumerCreateRequest(_Model, kw_only=True):
    stream_name: str
    config: ConsumerConfig
    action: str


class _UnpinRequest(_Model, kw_only=True):
    group: str


class _PauseRequest(_Model, kw_only=True):
    pause_until: datetime | None = None


def _check_seq(seq: object, what: str = "seq") -> int:
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise InvalidOptionError(f"{what} must be an int >= 1, got {seq!r}")
    return seq


def _check_stream_config(cfg: StreamConfig) -> bytes:
    """The body of a stream config once it is checked (types first, then names and subjects)."""
    if not isinstance(cfg, StreamConfig):
        raise InvalidOptionError(f"expected a StreamConfig, got {type(cfg).__name__}")
    body = check_config(cfg)
    check_stream_name(cfg.name)
    for subject in cfg.subjects or ():
        check_filter_subject(subject, "stream subject")
    for source in ([cfg.mirror] if cfg.mirror is not None else []) + list(cfg.sources or ()):
        check_name(source.name, "source stream name")
        if source.filter_subject:
            check_filter_subject(source.filter_subject, "source filter subject")
    return body


def stream_config_request(cfg: StreamConfig) -> bytes:
    """The body of ``STREAM.CREATE`` / ``STREAM.UPDATE``: the config, unset fields omitted.
    A field of the wrong type is an :class:`InvalidOptionError` naming it."""
    return _check_stream_config(cfg)


def stream_info_request(*, deleted_details: bool = False, subjects_filter: str | None = None, offset: int = 0) -> bytes:
    """The body of ``STREAM.INFO`` (empty when no option is given)."""
    if subjects_filter is not None:
        check_filter_subject(subjects_filter, "subjects_filter")
    if not deleted_details and subjects_filter is None and not offset:
        return b""
    return encode(
        _StreamInfoRequest(
            deleted_details=deleted_details or None, subjects_filter=subjects_filter, offset=offset or None
        )
    )


def consumer_create_request(
    subjects: ApiSubjects,
    stream: str,
    cfg: ConsumerConfig,
    action: str,
    *,
    ephemeral_name: str | None = None,
) -> tuple[str, bytes, str]:
    """``(subject, body, consumer name)`` of ``CONSUMER.CREATE.<stream>.<name>[.<filter>]``.

    The name is ``name`` or ``durable_name`` (equal when both are given); without either the
    consumer is ephemeral and gets ``ephemeral_name`` (the caller makes a random one; not for
    ``update``). The filter goes into the subject (for subject-based permissions, as nats.go
    does) when there is exactly one ``filter_subject`` without wildcards; a wildcard filter stays
    in the body only, since this client never publishes to a wildcard subject. ``ack_policy``
    left unset is sent as ``explicit``.
    """
    if not isinstance(cfg, ConsumerConfig):
        raise InvalidOptionError(f"expected a ConsumerConfig, got {type(cfg).__name__}")
    if action not in (ACTION_CREATE, ACTION_UPDATE, ACTION_CREATE_OR_UPDATE):
        raise InvalidOptionError(f"invalid consumer action {action!r}")
    check_stream_name(stream)
    check_config(cfg)  # (every field of the model's type, before the names and subjects in it)
    if cfg.durable_name is not None:
        check_name(cfg.durable_name, "durable name")
    if cfg.name is not None:
        check_consumer_name(cfg.name)
    if cfg.durable_name and cfg.name and cfg.durable_name != cfg.name:
        raise InvalidOptionError(f"durable_name {cfg.durable_name!r} and name {cfg.name!r} must be equal")
    name = cfg.name or cfg.durable_name
    changes: dict[str, object] = {}
    if not name:
        if action == ACTION_UPDATE:
            raise InvalidOptionError("updating a consumer needs its name (name or durable_name)")
        if ephemeral_name is None:
            raise InvalidOptionError("an ephemeral consumer needs a generated name")
        name = check_consumer_name(ephemeral_name)
        changes["name"] = name
    if cfg.filter_subject is not None:
        check_filter_subject(cfg.filter_subject)
    for f in cfg.filter_subjects or ():
        check_filter_subject(f)
    if cfg.deliver_subject is not None:
        check_publish_subject(cfg.deliver_subject, "deliver subject")
    for group in cfg.priority_groups or ():
        check_group_name(group)
    if cfg.ack_policy is None:
        changes["ack_policy"] = AckPolicy.EXPLICIT
    if changes:
        cfg = msgspec.structs.replace(cfg, **changes)
    in_subject = cfg.filter_subject
    if not in_subject or cfg.filter_subjects or has_wildcard(in_subject):
        in_subject = None
    subject = subjects.consumer_create(stream, name, in_subject)
    body = encode(_ConsumerCreateRequest(stream_name=stream, config=cfg, action=action))
    return subject, body, name


def purge_request(*, subject: str | None = None, seq: int | None = None, keep: int | None = None) -> bytes:
    """The body of ``STREAM.PURGE``: everything, or only ``subject`` (wildcards allowed), up to
    (not including) ``seq``, or all but the last ``keep`` messages. ``seq`` and ``keep``
    exclude each other."""
    if seq is not None and keep is not None:
        raise InvalidOptionError("purge: give seq or keep, not both")
    if subject is not None:
        check_filter_subject(subject, "purge subject")
    if seq is not None:
        _check_seq(seq)
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
        raise InvalidOptionError(f"keep must be an int >= 0, got {keep!r}")
    if subject is None and seq is None and keep is None:
        return b""
    return encode(_PurgeRequest(filter=subject, seq=seq, keep=keep))


def msg_get_request(
    seq: int | None = None, *, last_by_subject: str | None = None, next_by_subject: str | None = None
) -> bytes:
    """The body of ``STREAM.MSG.GET``: by ``seq``; the last message on ``last_by_subject``; the
    first message on ``next_by_subject`` (at or after ``seq`` when both are given)."""
    if last_by_subject is not None:
        if seq is not None or next_by_subject is not None:
            raise InvalidOptionError("last_by_subject excludes seq and next_by_subject")
        check_filter_subject(last_by_subject, "last_by_subject")
        return encode(_MsgGetRequest(last_by_subj=last_by_subject))
    if next_by_subject is not None:
        check_filter_subject(next_by_subject, "next_by_subject")
    if seq is not None:
        _check_seq(seq)
    elif next_by_subject is None:
        raise InvalidOptionError("give seq, last_by_subject or next_by_subject")
    return encode(_MsgGetRequest(seq=seq, next_by_subj=next_by_subject))


def direct_get_request(
    subjects: ApiSubjects,
    stream: str,
    seq: int | None = None,
    *,
    last_by_subject: str | None = None,
    next_by_subject: str | None = None,
    start_time: datetime | None = None,
) -> tuple[str, bytes]:
    """``(subject, body)`` of a single direct get (ADR-31). A literal ``last_by_subject`` uses
    the subject-appended form ``DIRECT.GET.<stream>.<subject>`` with an empty body; a wildcard
    one goes in the body. ``next_by_subject`` may start at ``seq`` or ``start_time``."""
    if last_by_subject is not None:
        if seq is not None or next_by_subject is not None or start_time is not None:
            raise InvalidOptionError("last_by_subject excludes seq, next_by_subject and start_time")
        check_filter_subject(last_by_subject, "last_by_subject")
        if not has_wildcard(last_by_subject):
            return subjects.direct_get(stream, last_by_subject), b""
        return subjects.direct_get(stream), encode(_DirectGetRequest(last_by_subj=last_by_subject))
    if seq is not None and start_time is not None:
        raise InvalidOptionError("give seq or start_time, not both")
    if seq is not None:
        _check_seq(seq)
    if next_by_subject is not None:
        check_filter_subject(next_by_subject, "next_by_subject")
    if seq is None and start_time is None and next_by_subject is None:
        raise InvalidOptionError("give seq, last_by_subject, next_by_subject or start_time")
    body = encode(_DirectGetRequest(seq=seq, next_by_subj=next_by_subject, start_time=start_time))
    return subjects.direct_get(stream), body


def msg_delete_request(seq: int, *, erase: bool = False) -> bytes:
    """The body of ``STREAM.MSG.DELETE``: without ``erase`` the message is only marked deleted
    (``no_erase``); with it the server overwrites its bytes (slower)."""
    _check_seq(seq)
    return encode(_MsgDeleteRequest(seq=seq, no_erase=None if erase else True))


def page_request(offset: int, subject: str | None = None) -> bytes:
    """The body of a ``NAMES`` / ``LIST`` request for the page starting at ``offset``."""
    if subject is not None:
        check_filter_subject(subject, "subject")
    return encode(_PageRequest(offset=offset, subject=subject))


def unpin_request(group: str) -> bytes:
    return encode(_UnpinRequest(group=check_group_name(group)))


def pause_request(until: datetime | None) -> bytes:
    """The body of ``CONSUMER.PAUSE``: ``{"pause_until": <RFC 3339>}``, or ``{}`` to resume (what
    nats.go sends). ``until`` must be an aware datetime."""
    if until is None:
        return b"{}"
    if not isinstance(until, datetime):
        raise InvalidOptionError(f"until must be a datetime, got {type(until).__name__}")
    if until.tzinfo is None or until.utcoffset() is None:
        raise InvalidOptionError(f"until must be timezone-aware, got {until!r}")
    return encode(_PauseRequest(pause_until=until))


# =========================================================================== paging


def iter_pages(fetch: Callable[[int], tuple[int, Sequence[T]]]) -> Iterator[T]:
    """Iterate over a paged listing. ``fetch(offset)`` returns ``(total, items)`` of the page
    starting at ``offset``; pages are requested lazily until ``total`` items were seen or a page
    comes back empty (the listing shrank meanwhile)."""
    offset = 0
    while True:
        total, items = fetch(offset)
        yield from items
        offset += len(items)
        if not items or offset >= total:
            return


# =========================================================================== stored messages

# The headers the server adds to a direct get reply; they are not the message's own.
DIRECT_GET_HEADERS: Final = frozenset(
    h.lower()
    for h in (
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
        "Nats-UpTo-Sequence",
    )
)

def parse_nats_time(text: str) -> NatsTime:
    """Parse a server timestamp (RFC 3339 with up to nanoseconds, or Go's ``time.String()``
    form of older servers) into an exact :class:`~jscore.times.NatsTime`: its datetime value
    is truncated to microseconds and it keeps the nanoseconds, so ``start_time=`` with it
    finds the same message again. :class:`JetStreamError` if it is neither form."""
    try:
        return _times.parse_nats_time(text)
    except (ValueError, OverflowError) as exc:  # (an offset of 24 h or more, a year 0 ...)
        raise _time_error(text, exc) from None


def _time_error(text: str, exc: Exception) -> JetStreamError:
    message = str(exc)
    if not message.startswith("invalid timestamp"):
        message = f"invalid timestamp {text[:64]!r}: {message}"
    return JetStreamError(message)


def stored_msg_from_get(raw: RawStoredMsg, stream: str) -> StoredMsg:
    """A :class:`StoredMsg` from the ``message`` of a ``STREAM.MSG.GET`` response."""
    headers: Headers | None = None
    if raw.hdrs:
        try:
            parsed, _, _ = parse_header_block(raw.hdrs)
        except RemoteProtocolError as exc:  # keep the error JetStream-typed
            raise JetStreamError(f"invalid headers in stored message {raw.seq}: {exc}") from exc
        headers = parsed if parsed else None
    return StoredMsg(
        subject=raw.subject, seq=raw.seq, data=raw.data or b"", headers=headers, time=raw.time, stream=stream
    )


def stored_msg_from_direct(
    headers: Headers | None, data: bytes, status: int | None, description: str | None
) -> StoredMsg:
    """A :class:`StoredMsg` from a direct get reply, or the typed error of a status reply, as
    the single-get column of :data:`jscore.directget.DIRECT_GET_STATUS_TABLE` says:
    404 -> :class:`MsgNotFoundError` (err_code 10037, as ``STREAM.MSG.GET`` answers),
    408 -> :class:`BadRequestError`, 413 -> :class:`TooManySubjectsError`, others ->
    :class:`JetStreamAPIError`."""
    if status is not None:
        from .directget import classify_direct_status, direct_status_error  # (directget imports this module)

        raise direct_status_error(classify_direct_status(status, description), status, description)
    return stored_msg_and_cursor(headers, data, batch=False)[0]


# The headers the server appends to a single get's reply (a batch's replies get the cursor
# headers too).
_SINGLE_GET_HEADERS: Final = frozenset(("nats-stream", "nats-subject", "nats-sequence", "nats-time-stamp"))

# Exact spellings of the server's headers, so that the common reply needs no str.lower().
_DIRECT_GET_SPELLING: Final = {
    name: name.lower()
    for name in (
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
        "Nats-UpTo-Sequence",
    )
}


DirectCursor = tuple[Union[str, None], Union[str, None], Union[str, None]]
"""The texts of a reply's ``Nats-Num-Pending``, ``Nats-Last-Sequence`` and
``Nats-UpTo-Sequence`` headers (None where absent)."""


StoredRow = tuple[str, int, bytes, Union[str, Headers, None], Union[str, datetime], str]
"""A direct get reply as plain values, for bulk readers that build columns
(:func:`stored_row_and_cursor`): subject, sequence, payload, the message's own headers, the time
stored and the stream. When the reply was in the server's layout (the common case) the headers
are the text of the own header lines (``""``: none; see
:func:`jscore.headers.header_lines_dict`) and the time its RFC 3339 text in UTC
(``2026-11-28T11:15:52.794341572Z``, checked); else a :class:`Headers` or None, and a
:class:`~jscore.times.NatsTime`."""


def _direct_seq(text: str) -> int:
    """A direct get reply's Nats-Sequence (:class:`JetStreamError` unless ASCII digits)."""
    if not (text.isascii() and text.isdigit()):
        raise JetStreamError(f"invalid direct get reply: Nats-Sequence {text!r}")
    return int(text)


def stored_row_and_cursor(headers: Headers | None, data: bytes) -> tuple[StoredRow, DirectCursor]:
    """:func:`stored_msg_and_cursor` as a :data:`StoredRow`: the same checks, and the same
    errors, but no datetime, :class:`Headers` or :class:`StoredMsg` is made for a reply in the
    server's layout (the common case: the time stamp and the own headers stay text)."""
    layout = headers._direct_layout() if headers is not None else None
    if layout is None:
        msg, cursor = stored_msg_and_cursor(headers, data)
        assert msg.time is not None
        return (msg.subject, msg.seq, data, msg.headers, msg.time, msg.stream), cursor
    own, stream, subject, seq_text, stamp, pending, last, up_to = layout
    assert own is not None and stream and subject and seq_text and stamp  # (the layout's groups)
    row = stored_of_layout(stream, subject, _direct_seq(seq_text), stamp, data, own, True)
    assert isinstance(row, tuple)
    return row, (pending, last, up_to)


def stored_of_layout(
    stream: str, subject: str, seq: int, stamp: str, data: bytes, own: str, row: bool
) -> StoredMsg | StoredRow:
    """The :class:`StoredMsg` (or, with ``row``, the :data:`StoredRow`) of a direct get reply in
    the server's layout (:meth:`jscore.headers.Headers._direct_layout`, or read whole by the
    connection's lane): ``own`` the text of the message's own header lines, ``stamp`` checked
    for its form. :class:`JetStreamError` when the stamp's date or time does not exist."""
    try:
        if row:
            _times.check_server_stamp(stamp)
            return (subject, seq, data, own, stamp, stream)
        time = _times.parse_server_stamp(stamp)
    except (ValueError, OverflowError) as exc:
        raise _time_error(stamp, exc) from None
    return StoredMsg(subject=subject, seq=seq, data=data, headers=headers_of_lines(own) if own else None,
                     time=time, stream=stream)


def stored_msg_and_cursor(
    headers: Headers | None, data: bytes, *, batch: bool = True
) -> tuple[StoredMsg, DirectCursor]:
    """The :class:`StoredMsg` of a direct get reply that is not a status, and the texts of its
    batch cursor headers (:data:`DirectCursor`). Header names are matched case-insensitively;
    the server appends its headers to the message's own, so the last value of each of its names
    is the server's, and an earlier one stays among the message's own headers. The server
    appends the cursor headers (``Nats-Num-Pending``, ``Nats-Last-Sequence``,
    ``Nats-UpTo-Sequence``) only to a batch's replies: with ``batch=False`` (a single get) they
    are the message's own. :class:`JetStreamError` when a header the message needs is missing
    or malformed."""
    if headers is None:
        raise JetStreamError("invalid direct get reply: no headers")
    own_headers: Headers | None = None
    layout = headers._direct_layout()  # (the server's layout, read when the block was checked)
    if layout is not None and not batch and (layout[5] is not None or layout[6] is not None or layout[7] is not None):
        layout = None  # (cursor headers after a single get's: not the server's, read pair by pair)
    if layout is not None:
        own_lines, stream, subject, seq_text, stamp, pending, last, up_to = layout
        assert own_lines is not None and stream and subject and seq_text and stamp  # (the layout's groups)
        stored = stored_of_layout(stream, subject, _direct_seq(seq_text), stamp, data, own_lines, False)
        assert isinstance(stored, StoredMsg)
        return stored, (pending, last, up_to)
    # The server appends its headers to the message's own: the LAST of each of its names is
    # the server's, an earlier one the message's own (a republished message carries the
    # origin's Nats-Sequence, Nats-Subject, ...).
    items = headers.items()
    last_at: dict[str, int] = {}
    spelling = _DIRECT_GET_SPELLING
    names = DIRECT_GET_HEADERS if batch else _SINGLE_GET_HEADERS
    for i, item in enumerate(items):
        key = spelling.get(item[0])
        if key is None:
            key = item[0].lower()
        if key in names:
            last_at[key] = i
    server = {key: items[i][1] for key, i in last_at.items()}
    if len(last_at) < len(items):
        servers = set(last_at.values())
        own = [item for i, item in enumerate(items) if i not in servers]
        own_headers = Headers(own)
    stream = server.get("nats-stream")
    subject = server.get("nats-subject")
    seq_text = server.get("nats-sequence")
    stamp = server.get("nats-time-stamp")
    pending = server.get("nats-num-pending")
    last = server.get("nats-last-sequence")
    up_to = server.get("nats-upto-sequence")
    if not stream or not subject or not seq_text or not stamp:
        raise JetStreamError(f"invalid direct get reply: missing Nats-* headers in {headers!r}")
    seq = _direct_seq(seq_text)
    try:
        time = _times.parse_nats_time(stamp)
    except (ValueError, OverflowError) as exc:
        raise _time_error(stamp, exc) from None
    msg = StoredMsg(subject=subject, seq=seq, data=data, headers=own_headers, time=time, stream=stream)
    return msg, (pending, last, up_to)
