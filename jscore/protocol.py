"""The NATS client wire protocol: a streaming parser for server frames and the client encoders.

The parser is strict: exact CRLF framing, a bounded control line (INFO has its own, larger cap),
sizes checked before any payload is buffered, and a header block parsed by
:func:`jscore.headers.parse_header_block`. Whatever bytes it is fed, the only exception that
leaves :meth:`Parser.feed` is :class:`RemoteProtocolError`; after one, the parser is poisoned and
every later call raises again.

Subject validation and frame encoding for the client side live here too; each raises its typed
error before any byte is produced.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Union

import msgspec

from . import bulk
from .errors import BadSubjectError, MaxPayloadError, RemoteProtocolError
from .headers import (
    DIRECT_STAMP_RE,
    Headers,
    checked_block_headers,
    common_block_re,
    direct_own_lines_re,
    parse_header_block,
)

__all__ = [
    "MAX_CONTROL_LINE",
    "MAX_INFO_LINE",
    "PAYLOAD_MARGIN",
    "DEFAULT_MAX_PAYLOAD",
    "InfoReceived",
    "MsgReceived",
    "AcksReceived",
    "MsgsReceived",
    "DirectRepliesReceived",
    "AckLane",
    "PUBACK_DUPLICATE",
    "PingReceived",
    "PongReceived",
    "OkReceived",
    "ErrReceived",
    "ParserEvent",
    "Parser",
    "CONNECT_FIELDS",
    "encode_connect",
    "PUB_FMT",
    "PUB_REPLY_FMT",
    "HPUB_FMT",
    "HPUB_REPLY_FMT",
    "MSG_ID_BLOCK_FMT",
    "encode_pub",
    "encode_hpub",
    "msg_id_frame_encoder",
    "encode_sub",
    "encode_unsub",
    "split_frames",
    "PING",
    "PONG",
    "check_publish_subject",
    "validated_subject",
    "pub_head",
    "size_line",
    "cached_size_line",
    "pub_tail",
    "cached_pub_tail",
    "check_subscribe_subject",
    "check_queue_group",
]

MAX_CONTROL_LINE: Final = 4096
"""Longest control line (without CRLF) accepted from the server; the server's own default."""
MAX_INFO_LINE: Final = 1024 * 1024
"""INFO may carry a long connect_urls list; it gets its own cap."""
PAYLOAD_MARGIN: Final = 64 * 1024
"""Slack above max_payload for server-added headers (JetStream adds some to stored messages)."""
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024
MAX_MAX_PAYLOAD: Final = 64 * 1024 * 1024
"""The server refuses max_payload above 64 MiB; an INFO claiming more is malformed."""

PING: Final = b"PING\r\n"
PONG: Final = b"PONG\r\n"

_MIN_HEADER_BLOCK = len(b"NATS/1.0\r\n\r\n")
_MAX_SIZE_DIGITS = 10  # enough for any size we accept; longer digit strings are rejected early


# --- events -------------------------------------------------------------------------------


class InfoReceived(msgspec.Struct, frozen=True, kw_only=True):
    """An ``INFO`` frame. ``info`` is the decoded JSON object, uninterpreted."""

    info: dict[str, Any]


class MsgReceived(msgspec.Struct, frozen=True, gc=False):
    """A ``MSG`` or ``HMSG`` frame.

    ``size`` is the message size as the server accounts it: subject + reply + header block +
    payload (the unit of JetStream's pending-bytes accounting). ``status`` and ``description``
    come from a ``NATS/1.0 <code> <description>`` header line, if there is one.
    """

    subject: str
    sid: int
    reply: str | None
    data: bytes
    headers: Headers | None
    status: int | None = None
    description: str | None = None
    size: int = 0


class PingReceived(msgspec.Struct, frozen=True):
    """``PING``: the connection machine answers with ``PONG``."""


class PongReceived(msgspec.Struct, frozen=True):
    """``PONG``."""


class OkReceived(msgspec.Struct, frozen=True):
    """``+OK`` (only sent in verbose mode, which this client does not ask for)."""


class ErrReceived(msgspec.Struct, frozen=True):
    """``-ERR``; ``text`` has the message without its quotes."""

    text: str


class AcksReceived(msgspec.Struct, frozen=True, gc=False):
    """A run of PubAcks on one reply inbox armed in the :class:`AckLane`, in the order they
    arrived: each ``(token, stream, seq, duplicate)``, ``token`` being the last token of the
    subject. ``size`` is the run's size as the server accounts it (each message's subject and
    payload), as for :class:`MsgReceived`."""

    sid: int
    acks: list[tuple[str, str, int, bool]]
    size: int


class MsgsReceived(msgspec.Struct, gc=False):
    """A run of messages in a row on one subscription armed for delivery runs
    (:meth:`AckLane.arm_runs`: a fetch's, a consume's or an ordered consumer's inbox), each exactly the
    :class:`MsgReceived` the frame gives, in order. Status messages are never in a run (they
    come alone, as :class:`MsgReceived`). ``size`` is the sum of the messages' sizes."""

    sid: int
    msgs: list[MsgReceived]
    size: int
    cursors: Union[list[tuple[str, int, int, int]], None] = None
    """On a subscription armed for deliveries (:meth:`AckLane.arm_runs` with ``cursors``), a run
    the delivery lane read: per message ``(consumer, stream sequence, consumer sequence, time
    stamp in ns)`` from its v1 ack subject, what :func:`jscore.jsmsg.ack_cursor` gives for it.
    None for a run read the general way."""
    columns: Any = None
    """On a subscription armed for columns (:meth:`AckLane.arm_runs` with ``columns``), a run
    read in bulk: a :class:`jscore.bulk.DeliveryColumns` (``msgs`` is then empty; its
    :meth:`~jscore.bulk.DeliveryColumns.messages` gives the messages and cursors the
    frame-by-frame reading gives for the same frames). None otherwise."""


class DirectRepliesReceived(msgspec.Struct, frozen=True, gc=False):
    """A run of direct get replies in a row on one inbox armed for them
    (:meth:`AckLane.arm_direct`: a batched direct get's), each in the exact form nats-server
    writes (the message's own header lines, printable ASCII, then the server's headers in its
    order, a 1 to 9 digit fraction in the time stamp, both cursor headers, numbers of at most 19
    digits), read by one match each: ``(stream, subject, seq, stamp, num_pending, last_seq,
    up_to_seq or None, own, payload)``, ``own`` the text of the own header lines (``""``: none,
    as :meth:`jscore.headers.Headers._direct_layout` gives it). ``size`` as for
    :class:`MsgsReceived`."""

    sid: int
    replies: list[tuple[str, str, int, str, int, int, Union[int, None], str, bytes]]
    size: int


PUBACK_DUPLICATE: Final = b',"duplicate": true'
"""How nats-server marks a duplicate in a PubAck (with that space): the form the lane reads."""


class AckLane:
    """The PubAck lane of one connection's parsers, and its delivery runs.

    A ``MSG`` on an armed reply inbox (a publish window's ``<inbox_prefix>.<22 chars>.*``)
    whose payload is exactly the form nats-server writes for a stored message,
    ``{"stream":"<name>","seq":<n>}`` or the same with :data:`PUBACK_DUPLICATE`, is read by one
    match of one regular expression, and a run of them on the same inbox is one
    :class:`AcksReceived` event. Anything else (a PubAck with a domain or another field, an
    error, a status, a size that does not match, a stream name that is not printable ASCII)
    is read the general way as a :class:`MsgReceived`. What the lane gives is exactly what the
    general way and the PubAck decoder would (a hypothesis test holds the two equal).

    Only frames that start ``MSG <an armed inbox>.`` are tried (:attr:`heads`), so replies to
    requests and other inboxes cost one failed ``startswith``, not a failed match.

    Delivery runs: the messages (not statuses) arriving in a row on a subscription in
    :attr:`runs` (:meth:`arm_runs`) come as one :class:`MsgsReceived`, so what each message
    costs after the parse (routing, the machine's accounting, its event) is paid once per run.
    The messages are parsed the general way, whatever their form.

    Deliveries (:meth:`arm_runs` with ``cursors``: an ordered consumer's inbox): a run of
    JetStream deliveries in the form nats-server writes them (a v1 ack subject with numbers of at
    most 19 digits; no headers, or header lines of the common form in printable ASCII and tabs
    that do not start with ``Nats-Stream: ``) is read by
    one match per frame into one :class:`MsgsReceived` with :attr:`MsgsReceived.cursors`; the
    messages are the ones the general way makes of the same frames. Anything else (a status, a
    v2 ack subject, a subject outside ASCII, other spacing, a size that does not add up) goes
    the general way. A frame is only tried once the general way read its sid as armed, so other
    subscriptions pay one set lookup per message.

    Direct get replies: on an inbox armed with :meth:`arm_direct`, an ``HMSG`` whose header
    block is exactly the server's (see :class:`DirectRepliesReceived`) is read by one match, and
    a run of them is one :class:`DirectRepliesReceived`; any other frame (a status, an own header
    value outside printable ASCII, other spacing, a size that does not add up, a reply to
    another inbox) goes the general way. What the run
    gives is what the general way and the direct get reader make of the same frames.
    """

    __slots__ = ("heads", "match", "sids", "read", "runs", "direct_heads", "direct_head", "direct_match",
                 "direct_sids", "direct_read", "_heads", "deliveries", "delivery_sids", "delivery_read", "columns", "bulk_min", "bulk_read")

    def __init__(self, inbox_prefix: str) -> None:
        prefix = inbox_prefix.encode()
        self.match = re.compile(
            rb"MSG " + re.escape(prefix) + rb"\.[0-9A-Za-z]{22}\.([0-9A-Za-z]{1,32}) ([0-9]{1,10}) ([0-9]{1,4})\r\n"
            rb'(\{"stream":"([!#-\[\]-~]{1,255})","seq":([1-9][0-9]{0,18})(' + re.escape(PUBACK_DUPLICATE) + rb")?\})\r\n"
        ).match
        self.sids: dict[bytes, int] = {}
        self._heads: dict[int, bytes] = {}
        self.heads: tuple[bytes, ...] = ()  # ``MSG <inbox>.`` of every armed inbox
        self.read = 0  # PubAcks read in the lane so far
        self.runs: set[int] = set()  # sids whose messages come in runs
        num = rb"([0-9]{1,19})\r\n"
        self.direct_match = re.compile(
            rb"HMSG " + re.escape(prefix) + rb"\.[0-9A-Za-z]{22} ([0-9]{1,10}) ([0-9]{1,7}) ([0-9]{1,10})\r\n"
            rb"NATS/1\.0\r\n" + _DIRECT_OWN_LINES
            + rb"Nats-Stream: ([!-~]+)\r\nNats-Subject: ([!-~]+)\r\nNats-Sequence: " + num
            + rb"Nats-Time-Stamp" + DIRECT_STAMP_RE.encode()
            + rb"Nats-Num-Pending: " + num + rb"Nats-Last-Sequence: " + num + rb"(?:Nats-UpTo-Sequence: " + num
            + rb")?\r\n"
        ).match
        self.direct_sids: dict[bytes, int] = {}
        self.direct_head: dict[int, bytes] = {}  # sid -> ``HMSG <its inbox> ``
        self.direct_heads: tuple[bytes, ...] = ()  # all of them
        self.direct_read = 0  # direct get replies read in the lane so far
        self.deliveries: set[int] = set()  # sids whose deliveries the lane reads (a subset of runs)
        self.delivery_sids: dict[bytes, int] = {}
        self.delivery_read = 0  # deliveries read in the lane so far
        # Deliveries read in bulk, as columns (jscore.bulk), on these sids (a subset of the
        # delivery sids), from a buffer with at least bulk_min bytes left.
        self.columns: set[int] = set()
        self.bulk_min = bulk.MIN_BYTES
        self.bulk_read = 0  # deliveries read in bulk so far

    def arm(self, sid: int, inbox: str) -> None:
        """Read the PubAcks of subscription ``sid`` to ``<inbox>*`` (``inbox`` ends with a dot)."""
        self.sids[str(sid).encode()] = sid
        self._heads[sid] = b"MSG " + inbox.encode()
        self.heads = tuple(self._heads.values())

    def arm_runs(self, sid: int, cursors: bool = False, columns: bool = False) -> None:
        """Deliver the messages of subscription ``sid`` in :class:`MsgsReceived` runs; with
        ``cursors``, JetStream deliveries in the server's form by the delivery lane, each run
        with its :attr:`MsgsReceived.cursors`; with ``columns`` too (and NumPy and PyArrow
        installed: :data:`jscore.bulk.AVAILABLE`), a long run of them may come as
        :attr:`MsgsReceived.columns` instead."""
        self.runs.add(sid)
        if cursors:
            self.deliveries.add(sid)
            self.delivery_sids[str(sid).encode()] = sid
            if columns and bulk.AVAILABLE:
                self.columns.add(sid)

    def arm_direct(self, sid: int, inbox: str) -> None:
        """Read the direct get replies of subscription ``sid`` to ``inbox`` in
        :class:`DirectRepliesReceived` runs."""
        self.direct_sids[str(sid).encode()] = sid
        self.direct_head[sid] = b"HMSG " + inbox.encode() + b" "
        self.direct_heads = tuple(self.direct_head.values())

    def disarm(self, sid: int) -> None:
        self.runs.discard(sid)
        self.deliveries.discard(sid)
        self.delivery_sids.pop(str(sid).encode(), None)
        self.columns.discard(sid)
        self.direct_sids.pop(str(sid).encode(), None)
        if self.direct_head.pop(sid, None) is not None:
            self.direct_heads = tuple(self.direct_head.values())
        self.sids.pop(str(sid).encode(), None)
        if self._heads.pop(sid, None) is not None:
            self.heads = tuple(self._heads.values())


ParserEvent = Union[InfoReceived, MsgReceived, MsgsReceived, AcksReceived, DirectRepliesReceived, PingReceived, PongReceived, OkReceived, ErrReceived]

_PING_EVENT: Final = PingReceived()
_PONG_EVENT: Final = PongReceived()
_OK_EVENT: Final = OkReceived()
_info_decoder: Final = msgspec.json.Decoder(dict[str, Any])


_subject_cache: dict[bytes, str] = {}
_SUBJECT_CACHE_LIMIT: Final = 4096


def _decode_subject(raw: bytes) -> str:
    subject = _text(raw, "subject")
    if len(_subject_cache) >= _SUBJECT_CACHE_LIMIT:
        _subject_cache.clear()
    _subject_cache[raw] = subject
    return subject


_stream_cache: dict[bytes, str] = {}
"""Stream names of PubAcks read in the :class:`AckLane` (printable ASCII, checked by its match)."""

_DIRECT_BLOCK_HEAD: Final = len(b"NATS/1.0\r\n")
# The message's own header lines before the server's, as jscore.headers' direct layout reads
# them, with values of printable ASCII (and tabs) only: a line it takes is one that layout
# takes, with the same text.
_DIRECT_OWN_LINES: Final = direct_own_lines_re(r"[ -~\t]").encode()

# A JetStream delivery as nats-server writes it: the subject, the sid, a v1 ack subject (its
# consumer and three numbers as groups; every number 0 or 1 to 19 digits without a leading zero,
# so below 2**64), then for HMSG the two sizes and a header block of the common form in
# printable ASCII. The groups: subject, sid, ack subject, consumer, stream sequence, consumer
# sequence, time stamp, then (HMSG) header size, total size, header block; (MSG) size.
# The _REST patterns are the same from the ack subject's delivery count on (the groups from the
# stream sequence on). Each piece before it ends at a delimiter it cannot hold, so the rest
# matched where a frame's delivery count starts gives what a match of the whole frame would: a
# run's frame that starts as the one before it did, up to there, is matched from there on.
_ACK_TOKEN: Final = rb"[!-\-/-~]+"  # (printable ASCII but the dot)
_ACK_NUM: Final = rb"(?:0|[1-9][0-9]{0,18})"
_DELIVERY_HEAD: Final = rb"([!-~]+) ([0-9]{1,10}) (\$JS\.ACK\." + _ACK_TOKEN + rb"\.(" + _ACK_TOKEN + rb")\."
_DELIVERY_NUMS: Final = _ACK_NUM + rb"\.(" + _ACK_NUM + rb")\.(" + _ACK_NUM + rb")\.(" + _ACK_NUM + rb")\." + _ACK_NUM
_DELIVERY_HMSG_SIZES: Final = (
    rb" ([0-9]{1,7}) ([0-9]{1,10})\r\n(" + common_block_re(r"[ -~\t]").encode() + rb")"
)
_DELIVERY_MSG_SIZE: Final = rb" ([0-9]{1,10})\r\n"
_DELIVERY_HMSG: Final = re.compile(rb"HMSG " + _DELIVERY_HEAD + _DELIVERY_NUMS + rb")" + _DELIVERY_HMSG_SIZES).match
_DELIVERY_MSG: Final = re.compile(rb"MSG " + _DELIVERY_HEAD + _DELIVERY_NUMS + rb")" + _DELIVERY_MSG_SIZE).match
_BULK_TRIES: Final = 2  # bulk reads of deliveries in a row that may read fewer than _BULK_SHORT
_BULK_SHORT: Final = 128  # (a bulk read costs about 0.2 ms however few it reads: about what 128 frames save)
_BULK_WINDOW_MAX: Final = 8192  # frames a bulk read looks at, at most
_BULK_REST: Final = 64  # buffers then read frame by frame before a bulk read is tried again
_DELIVERY_HMSG_REST: Final = re.compile(_DELIVERY_NUMS + _DELIVERY_HMSG_SIZES).match
_DELIVERY_MSG_REST: Final = re.compile(_DELIVERY_NUMS + _DELIVERY_MSG_SIZE).match
_BULK_PATTERNS: Final = bulk.Patterns(
    hmsg=_DELIVERY_HMSG,
    msg=_DELIVERY_MSG,
    hmsg_rests=bulk.run_matcher(_DELIVERY_NUMS + _DELIVERY_HMSG_SIZES),
    msg_rests=bulk.run_matcher(_DELIVERY_NUMS + _DELIVERY_MSG_SIZE),
    subjects=re.compile(rb"[!-~]+").fullmatch,  # (as the frame's subject group)
    consumer_name=lambda raw: _consumer_cache.get(raw) or _consumer_name(raw),
)
# The rest of a run's MSG frame that starts as the one before it did, up to its ack subject's
# numbers (see Parser._parse): those numbers (no white space, so the general way's split gives the
# same four arguments) and the size.
_RUN_REST: Final = re.compile(rb"([0-9.]{1,100}) ([0-9]{1,10})\r\n").match
_consumer_cache: dict[bytes, str] = {}
"""Consumer names of deliveries read in the :class:`AckLane` (printable ASCII, checked by its match)."""


def _consumer_name(raw: bytes) -> str:
    """A consumer name the lane's match checked, decoded and kept in the (bounded) cache."""
    if len(_consumer_cache) >= _SUBJECT_CACHE_LIMIT:
        _consumer_cache.clear()
    name = _consumer_cache[raw] = raw.decode()
    return name


_sid_cache: dict[bytes, int] = {}
"""The sids seen, as the digits arrive: a dict hit costs less than checking and converting."""


def _decode_sid(raw: bytes, frame: str) -> int:
    if not raw.isdigit():
        raise RemoteProtocolError(f"bad {frame} sid {raw[:24]!r}")
    sid = int(raw)
    if len(_sid_cache) >= _SUBJECT_CACHE_LIMIT:
        _sid_cache.clear()
    _sid_cache[raw] = sid
    return sid


def _text(arg: bytes, what: str) -> str:
    try:
        return arg.decode()
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"{what} is not valid UTF-8") from exc


class Parser:
    """Streaming parser of server-to-client frames.

    ``feed(data)`` returns the complete frames found so far, in order; a partial frame stays
    buffered. Buffered bytes never exceed the control-line cap plus the largest accepted message.
    """

    __slots__ = ("_buf", "_chunks", "_have", "_need", "_max_msg", "_error", "_lane", "_bulk_left", "_bulk_rest",
                 "_bulk_scan", "_bulk_window")

    def __init__(self, max_payload: int = DEFAULT_MAX_PAYLOAD, lane: AckLane | None = None) -> None:
        self._lane = lane
        self._buf = b""
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 0  # bytes needed before parsing can make progress (0: unknown)
        self._max_msg = max_payload + PAYLOAD_MARGIN
        self._error: RemoteProtocolError | None = None
        self._bulk_left = 1  # bulk reads of deliveries that may still read little (at first one: a probe)
        self._bulk_rest = 0  # buffers still to read frame by frame once they did
        self._bulk_scan: bulk.Scan | None = None  # the bulk reads' scan of the buffer being read
        self._bulk_window = 256  # frames the next bulk read looks at, at most

    @property
    def max_payload(self) -> int:
        return self._max_msg - PAYLOAD_MARGIN

    @max_payload.setter
    def max_payload(self, value: int) -> None:
        self._max_msg = value + PAYLOAD_MARGIN

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf) + self._have

    @property
    def poisoned(self) -> bool:
        return self._error is not None

    def feed(self, data: bytes) -> list[ParserEvent]:
        if self._error is not None:
            raise RemoteProtocolError(f"parser is poisoned by an earlier error: {self._error}")
        if self._need:
            # Waiting for a large payload: collect without re-joining on every chunk.
            self._chunks.append(bytes(data))
            self._have += len(data)
            if len(self._buf) + self._have < self._need:
                return []
            buf = self._buf + b"".join(self._chunks)
            self._chunks.clear()
            self._have = 0
            self._need = 0
        elif self._buf:
            buf = self._buf + data
        else:
            buf = bytes(data)
        try:
            events, pos = self._parse(buf)
        except RemoteProtocolError as exc:
            self._poison(exc)
            raise
        except Exception as exc:  # defensive: nothing but RemoteProtocolError may escape
            err = RemoteProtocolError(f"malformed input: {type(exc).__name__}: {exc}")
            self._poison(err)
            raise err from exc
        self._buf = buf[pos:] if pos < len(buf) else b""
        return events

    def _ack_run(self, buf: bytes, pos: int, append: Callable[[ParserEvent], None]) -> int:
        """Read the run of PubAcks at ``pos`` on one armed inbox (see :class:`AckLane`) into one
        :class:`AcksReceived`; returns where the run ends (``pos`` when there is none)."""
        lane = self._lane
        assert lane is not None
        match = lane.match
        streams = _stream_cache
        acks: list[tuple[str, str, int, bool]] = []
        add = acks.append
        run_sid = b""
        size = 0
        # The frame the pattern read last, up to its sequence number (``MSG <inbox><token> <sid>
        # <size>\r\n{"stream":"<name>","seq":``), and what it gave. A next frame that starts
        # with the same bytes has a sequence number of as many digits (its size is the same):
        # it is read by a comparison and a slice (the acks of a batch that shares its reply
        # token, in a row), not by the pattern.
        stem = last_token = b""
        stem_len = digits = ack_size = 0
        token_s = stream = ""
        while True:
            if stem and buf.startswith(stem, pos):
                start = pos + stem_len
                end = start + digits
                seq_b = buf[start:end]
                if buf.startswith(b"}\r\n", end) and seq_b.isdigit() and buf[start] != 48:  # (48: "0")
                    add((token_s, stream, int(seq_b), False))
                    size += ack_size
                    pos = end + 3
                    continue
            m = match(buf, pos)
            if m is None:
                break
            token, sid_b, size_b, body, stream_b, seq_b, dup = m.groups()
            if sid_b != run_sid:
                if run_sid or sid_b not in lane.sids:
                    break
                run_sid = sid_b
            if int(size_b) != len(body):
                break
            cached = streams.get(stream_b)
            if cached is None:
                if len(streams) >= _SUBJECT_CACHE_LIMIT:
                    streams.clear()
                cached = streams[stream_b] = stream_b.decode()
            stream = cached
            token_s = token.decode()
            add((token_s, stream, int(seq_b), dup is not None))
            ack_size = m.end(1) - pos - 4 + len(body)
            size += ack_size
            if dup is None and token == last_token:  # (a token per message never gets here)
                stem = buf[pos : m.start(6)]
                stem_len = len(stem)
                digits = len(seq_b)
            else:
                stem = b""
            last_token = token
            pos = m.end()
        if acks:
            lane.read += len(acks)
            append(AcksReceived(lane.sids[run_sid], acks, size))
        return pos

    def _direct_run(self, buf: bytes, pos: int, append: Callable[[ParserEvent], None]) -> int:
        """Read the run of direct get replies at ``pos`` on one armed inbox (see :class:`AckLane`)
        into one :class:`DirectRepliesReceived`; returns where the run ends (``pos`` when there is
        none)."""
        lane = self._lane
        assert lane is not None
        match = lane.direct_match
        sids = lane.direct_sids
        streams = _stream_cache
        subjects = _subject_cache
        max_msg = self._max_msg
        n = len(buf)
        replies: list[tuple[str, str, int, str, int, int, int | None, str, bytes]] = []
        add = replies.append
        run_sid = b""
        head = b""  # ``HMSG <inbox> `` of the run's sid: every reply of the run is to that inbox
        size = 0
        while True:
            m = match(buf, pos)
            if m is None:
                break
            sid_b, hdr_b, total_b, own_b, stream_b, subject_b, seq_b, stamp_b, pending_b, last_b, up_to_b = m.groups()
            if sid_b != run_sid:
                if run_sid or sid_b not in sids:
                    break
                run_sid = sid_b
                head = lane.direct_head[sids[sid_b]]
            if not buf.startswith(head, pos):
                break
            block_at = m.start(4) - _DIRECT_BLOCK_HEAD  # (where "NATS/1.0" starts)
            total = int(total_b)
            after = m.end()
            if int(hdr_b) != after - block_at or total > max_msg:
                break
            stop = block_at + total
            if stop < after or stop + 2 > n or not buf.startswith(b"\r\n", stop):
                break  # (a payload still to come, or a size that does not add up: the general way)
            stream = streams.get(stream_b)
            if stream is None:
                if len(streams) >= _SUBJECT_CACHE_LIMIT:
                    streams.clear()
                stream = streams[stream_b] = stream_b.decode()
            subject = subjects.get(subject_b)
            if subject is None:
                subject = _decode_subject(subject_b)
            add((stream, subject, int(seq_b), stamp_b.decode(), int(pending_b), int(last_b),
                 None if up_to_b is None else int(up_to_b), own_b.decode() if own_b else "", buf[after:stop]))
            size += block_at - pos - 5 - len(sid_b) - len(hdr_b) - len(total_b) - 5 + total
            pos = stop + 2
        if replies:
            lane.direct_read += len(replies)
            append(DirectRepliesReceived(sids[run_sid], replies, size))
        return pos

    def _delivery_run(self, buf: bytes, pos: int, append: Callable[[ParserEvent], None], first_sid: int) -> int:
        """Read the run of deliveries at ``pos`` on one subscription armed for them (see
        :class:`AckLane`) into one :class:`MsgsReceived` with cursors; returns where the run ends
        (``pos`` when there is none). While each frame starts as the one before it did (the
        same kind, subject, sid and consumer), it is matched from its delivery count on (see
        :data:`_DELIVERY_HMSG_REST`); after one that does not, the run's frames are matched whole."""
        lane = self._lane
        assert lane is not None
        sids = lane.delivery_sids
        subjects = _subject_cache
        names = _consumer_cache
        max_msg = self._max_msg
        n = len(buf)
        msgs: list[MsgReceived] = []
        add = msgs.append
        cursors: list[tuple[str, int, int, int]] = []
        add_cursor = cursors.append
        run_sid = b""
        sid = 0
        size = 0
        prefix = b""  # how the frame before started, up to its delivery count (b"": not looked for)
        same = True  # every frame so far started as the one before it
        rest = _DELIVERY_MSG_REST
        headed = False
        plen = reply_at = subject_len = 0
        subject = name = ""
        if first_sid in lane.columns and self._bulk_left > 0 and n - pos >= lane.bulk_min:
            scan = self._bulk_scan
            if scan is None or scan.buf is not buf:
                scan = self._bulk_scan = bulk.Scan(buf) if bulk.load() else None
            window = self._bulk_window
            got = bulk.read_deliveries(
                buf, pos, first_sid, max_msg, MAX_CONTROL_LINE, _BULK_PATTERNS, scan, window
            )
            read = 0 if got is None else got.count
            # The window grows with the runs: four times as wide after a run that filled it (a
            # bulk read's work is in proportion to it; runs that stay short rest the reader).
            if read == window:
                self._bulk_window = min(window * 4, _BULK_WINDOW_MAX)
            if read < _BULK_SHORT and (got is None or n - got.end >= lane.bulk_min):
                # A bulk read of few deliveries, not cut short by the buffer's end, costs more than
                # it saves: after the first, or two in a row after a long one, the next _BULK_REST
                # buffers are read frame by frame, then one is tried again.
                self._bulk_left -= 1
                if self._bulk_left <= 0:
                    self._bulk_rest = _BULK_REST
            else:
                self._bulk_left = _BULK_TRIES
            if got is not None:
                lane.delivery_read += got.count
                lane.bulk_read += got.count
                append(MsgsReceived(got.sid, [], got.size, None, got))
                return got.end
        while True:
            if prefix and buf.startswith(prefix, pos):
                m = rest(buf, pos + plen)
                if m is None:
                    break
                if headed:
                    seq_b, cseq_b, stamp_b, hdr_b, total_b, block_b = m.groups()
                    block_at = m.start(6)
                else:
                    seq_b, cseq_b, stamp_b, total_b = m.groups()
                reply_b = buf[pos + reply_at : m.start(4) - 1]
            else:
                headed = buf.startswith(b"HMSG ", pos)
                if headed:
                    m = _DELIVERY_HMSG(buf, pos)
                    if m is None:
                        break
                    subject_b, sid_b, reply_b, name_b, seq_b, cseq_b, stamp_b, hdr_b, total_b, block_b = m.groups()
                    block_at = m.start(10)
                elif buf.startswith(b"MSG ", pos):
                    m = _DELIVERY_MSG(buf, pos)
                    if m is None:
                        break
                    subject_b, sid_b, reply_b, name_b, seq_b, cseq_b, stamp_b, total_b = m.groups()
                else:
                    break
                if sid_b != run_sid:
                    if run_sid or sid_b not in sids:
                        break
                    run_sid = sid_b
                    sid = sids[sid_b]
                known = subjects.get(subject_b)
                subject = known if known is not None else _decode_subject(subject_b)
                known = names.get(name_b)
                name = known if known is not None else _consumer_name(name_b)
                subject_len = len(subject_b)
                if same:
                    if prefix:  # (this frame started otherwise than the one before it: no more looking)
                        same = False
                        prefix = b""
                    else:
                        reply_at = m.start(3) - pos
                        plen = m.end(4) + 1 - pos
                        prefix = buf[pos : pos + plen]
                        rest = _DELIVERY_HMSG_REST if headed else _DELIVERY_MSG_REST
            after = m.end()
            total = int(total_b)
            if headed:
                if int(hdr_b) != after - block_at or total > max_msg:
                    break
                stop = block_at + total
                if stop < after or block_at - 2 - pos > MAX_CONTROL_LINE:
                    break
                headers: Headers | None = checked_block_headers(block_b.decode())
            else:
                if total > max_msg or after - 2 - pos > MAX_CONTROL_LINE:
                    break
                stop = after + total
                headers = None
            if stop + 2 > n or not buf.startswith(b"\r\n", stop):
                break  # (a payload still to come, or a size that does not add up: the general way)
            one = total + subject_len + len(reply_b)
            add(MsgReceived(subject, sid, reply_b.decode(), buf[after:stop], headers, None, None, one))
            add_cursor((name, int(seq_b), int(cseq_b), int(stamp_b)))
            size += one
            pos = stop + 2
        if msgs:
            lane.delivery_read += len(msgs)
            append(MsgsReceived(sid, msgs, size, cursors))
        return pos

    def _poison(self, exc: RemoteProtocolError) -> None:
        self._error = exc
        self._buf = b""
        self._chunks.clear()
        self._have = 0
        self._need = 0

    def _parse(self, buf: bytes) -> tuple[list[ParserEvent], int]:
        self._bulk_scan = None
        if self._bulk_left <= 0:
            self._bulk_rest -= 1
            if self._bulk_rest <= 0:
                self._bulk_left = 1  # (a bulk read tried again)
        events: list[ParserEvent] = []
        append = events.append
        pos = 0
        n = len(buf)
        max_msg = self._max_msg
        subjects = _subject_cache
        sids = _sid_cache
        lane = self._lane
        # (the frames the lane may read start with one of these: MSG to a publish window's
        # inbox, HMSG to a batched direct get's)
        lane_heads = (lane.heads + lane.direct_heads) if lane is not None else ()
        runs = lane.runs if lane is not None else None
        deliveries = lane.deliveries if lane is not None else None
        run: MsgsReceived | None = None  # the run the last event appended is (see AckLane)
        # A run's MSG frames that start alike, up to their ack subject's numbers (a consume's or a
        # fetch's deliveries of one subject): that start, as bytes, and what it holds. A next
        # frame of the same run that starts with it is read from there on; one that does not
        # ends the looking for the rest of this read.
        looking = bool(runs)
        fast = b""
        fast_run: MsgsReceived | None = None
        fast_len = fast_base = 0
        fast_subject = fast_reply = ""
        while pos < n:
            if fast and run is fast_run and buf.startswith(fast, pos):
                m = _RUN_REST(buf, pos + fast_len)
                if m is not None:
                    nums_b, size_b = m.groups()
                    start = m.end()
                    size = int(size_b)
                    stop = start + size
                    if (
                        start - 2 - pos <= MAX_CONTROL_LINE and size <= max_msg
                        and stop + 2 <= n and buf.startswith(b"\r\n", stop)
                    ):  # fmt: skip
                        assert run is not None
                        size += fast_base + len(nums_b)
                        ack = fast_reply + nums_b.decode()
                        run.msgs.append(MsgReceived(fast_subject, run.sid, ack, buf[start:stop], None, None, None, size))
                        run.size += size
                        pos = stop + 2
                        continue
                # (else the general way reads it, with its errors)
            end = buf.find(b"\r\n", pos, pos + MAX_INFO_LINE + 2)
            if end < 0:
                self._check_partial_line(buf, pos, n)
                break
            if end - pos > MAX_CONTROL_LINE and buf[pos : pos + 4].upper() != b"INFO":
                raise RemoteProtocolError("control line too long")
            if lane_heads and buf.startswith(lane_heads, pos):
                if buf.startswith(b"M", pos):
                    after = self._ack_run(buf, pos, append)
                else:
                    after = self._direct_run(buf, pos, append)
                if after != pos:
                    pos = after
                    run = None
                    continue
            if buf.startswith(b"MSG ", pos):
                # The hot path: inlined checks, no slices but the ones we keep.
                args = buf[pos + 4 : end].split()
                nargs = len(args)
                if nargs == 3:
                    subject_b, sid_b, size_b = args
                    reply_b = b""
                elif nargs == 4:
                    subject_b, sid_b, reply_b, size_b = args
                else:
                    raise RemoteProtocolError(f"MSG needs 3 or 4 arguments, got {nargs}")
                if not size_b.isdigit() or len(size_b) > _MAX_SIZE_DIGITS:
                    raise RemoteProtocolError(f"bad MSG size: {size_b[:24]!r}")
                size = int(size_b)
                if size > max_msg:
                    raise RemoteProtocolError(f"MSG size {size} exceeds max_payload")
                sid = sids.get(sid_b)
                if sid is None:
                    sid = _decode_sid(sid_b, "MSG")
                if deliveries and sid in deliveries and (after := self._delivery_run(buf, pos, append, sid)) != pos:
                    pos, run = after, None  # (the delivery lane read this frame and those after it)
                    continue
                start = end + 2
                stop = start + size
                if stop + 2 > n:
                    self._need = stop + 2 - pos
                    break
                if not buf.startswith(b"\r\n", stop):
                    raise RemoteProtocolError("MSG payload is not followed by CRLF")
                subject = subjects.get(subject_b)
                if subject is None:
                    subject = _decode_subject(subject_b)
                if reply_b:
                    try:  # (inlined _text: a call per message costs about 25 ns here)
                        reply: str | None = reply_b.decode()
                    except UnicodeDecodeError as exc:
                        raise RemoteProtocolError("reply subject is not valid UTF-8") from exc
                else:
                    reply = None
                size += len(subject_b) + len(reply_b)
                msg = MsgReceived(subject, sid, reply, buf[start:stop], None, None, None, size)
                status = None
            elif buf.startswith(b"HMSG ", pos):
                # The other hot path (JetStream messages, replies with status), inlined the same way.
                args = buf[pos + 5 : end].split()
                nargs = len(args)
                if nargs == 4:
                    subject_b, sid_b, hdr_b, size_b = args
                    reply_b = b""
                elif nargs == 5:
                    subject_b, sid_b, reply_b, hdr_b, size_b = args
                else:
                    raise RemoteProtocolError(f"HMSG needs 4 or 5 arguments, got {nargs}")
                if not hdr_b.isdigit() or len(hdr_b) > _MAX_SIZE_DIGITS:
                    raise RemoteProtocolError(f"bad HMSG header size: {hdr_b[:24]!r}")
                if not size_b.isdigit() or len(size_b) > _MAX_SIZE_DIGITS:
                    raise RemoteProtocolError(f"bad HMSG total size: {size_b[:24]!r}")
                hdr = int(hdr_b)
                size = int(size_b)
                if size > max_msg:
                    raise RemoteProtocolError(f"HMSG size {size} exceeds max_payload")
                if hdr > size:
                    raise RemoteProtocolError(f"HMSG header size {hdr} > total size {size}")
                if hdr < _MIN_HEADER_BLOCK:
                    raise RemoteProtocolError(f"HMSG header size {hdr} is too small for a header block")
                sid = sids.get(sid_b)
                if sid is None:
                    sid = _decode_sid(sid_b, "HMSG")
                if deliveries and sid in deliveries and (after := self._delivery_run(buf, pos, append, sid)) != pos:
                    pos, run = after, None  # (the delivery lane read this frame and those after it)
                    continue
                start = end + 2
                stop = start + size
                if stop + 2 > n:
                    self._need = stop + 2 - pos
                    break
                if not buf.startswith(b"\r\n", stop):
                    raise RemoteProtocolError("HMSG payload is not followed by CRLF")
                headers, status, description = parse_header_block(buf[start : start + hdr])
                subject = subjects.get(subject_b)
                if subject is None:
                    subject = _decode_subject(subject_b)
                if reply_b:
                    try:
                        reply = reply_b.decode()
                    except UnicodeDecodeError as exc:
                        raise RemoteProtocolError("reply subject is not valid UTF-8") from exc
                else:
                    reply = None
                size += len(subject_b) + len(reply_b)
                msg = MsgReceived(subject, sid, reply, buf[start + hdr : stop], headers, status, description, size)
            else:
                line = buf[pos:end]
                pos = end + 2
                self._parse_control(line, append)
                run = None
                continue
            # A message (MSG or HMSG): alone, or into the run of its sid (see AckLane).
            if status is None and runs and sid in runs:
                if run is not None and run.sid == sid:
                    run.msgs.append(msg)
                    run.size += size
                else:
                    run = MsgsReceived(sid, [msg], size)
                    append(run)
                if looking and not (deliveries and sid in deliveries):  # (the delivery lane's own: not here)
                    if fast and fast_run is run:  # (it did not start as the one before it)
                        looking = False
                        fast = b""
                    elif reply_b.startswith(b"$JS.ACK.") and reply_b.count(b".") == 8:  # (a v1 ack subject)
                        cut = reply_b.find(b".", reply_b.find(b".", 8) + 1) + 1  # (after the consumer)
                        want = b"MSG " + subject_b + b" " + sid_b + b" " + reply_b[:cut]
                        if not any(want.startswith(h) or h.startswith(want) for h in lane_heads):  # (no lane's)
                            fast, fast_run, fast_len = want, run, len(want)
                            fast_subject, fast_reply = subject, reply_b[:cut].decode()
                            fast_base = len(subject_b) + cut
            else:
                append(msg)
                run = None
            pos = stop + 2
        return events, pos

    def _check_partial_line(self, buf: bytes, pos: int, n: int) -> None:
        # Length of the unterminated line so far; a trailing CR may be the start of its CRLF.
        pending = n - pos - (buf[n - 1] == 0x0D)
        if pending > MAX_CONTROL_LINE:
            head = buf[pos : pos + 5].upper()
            if not head.startswith(b"INFO") or pending > MAX_INFO_LINE:
                raise RemoteProtocolError("control line too long (no CRLF)")

    def _parse_control(self, line: bytes, append: Any) -> None:
        head, _, rest = line.partition(b" ")
        op = head.upper()
        if op == b"PING" and not rest.strip(b" \t"):
            append(_PING_EVENT)
        elif op == b"PONG" and not rest.strip(b" \t"):
            append(_PONG_EVENT)
        elif op == b"+OK" and not rest.strip(b" \t"):
            append(_OK_EVENT)
        elif op == b"-ERR":
            text = rest.strip(b" \t").decode(errors="replace")
            if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
                text = text[1:-1]
            append(ErrReceived(text))
        elif op == b"INFO":
            body = rest.strip(b" \t")
            if not body:
                raise RemoteProtocolError("INFO without a JSON body")
            try:
                info = _info_decoder.decode(body)
            except msgspec.DecodeError as exc:
                raise RemoteProtocolError(f"INFO is not a JSON object: {exc}") from exc
            append(InfoReceived(info=info))
        elif op in (b"MSG", b"HMSG"):
            # Lowercase or tab-separated forms of MSG/HMSG are not sent by any server.
            raise RemoteProtocolError(f"malformed {op.decode()} control line")
        else:
            raise RemoteProtocolError(f"unknown protocol operation {line[:16]!r}")


# --- encoders -----------------------------------------------------------------------------

CONNECT_FIELDS: Final = frozenset(
    {
        "verbose",
        "pedantic",
        "tls_required",
        "auth_token",
        "user",
        "pass",
        "name",
        "lang",
        "version",
        "protocol",
        "echo",
        "sig",
        "jwt",
        "nkey",
        "no_responders",
        "headers",
    }
)
"""The only keys a CONNECT may carry (never a pass-through of user dicts: CVE-2020-26149)."""

_json_encoder: Final = msgspec.json.Encoder()


def encode_connect(fields: Mapping[str, Any]) -> bytes:
    unknown = set(fields) - CONNECT_FIELDS
    if unknown:
        raise ValueError(f"CONNECT fields not in the allow-list: {sorted(unknown)}")
    return b"CONNECT " + _json_encoder.encode(dict(fields)) + b"\r\n"


# --- PUB / HPUB: the one place client message frames are laid out -------------------------
#
# Every PUB/HPUB frame the client writes is built from the formats below: by the encoders
# here, or, on the hottest paths (the publish fast paths, acks, publish_async), by the call
# site applying the format with ``%`` itself, because a Python call there costs a measurable
# share of the whole publish (docs/design.md, "Frames"). Subjects and replies are already
# validated and encoded (:func:`check_publish_subject`, :func:`validated_subject`); a header
# block comes from :func:`jscore.headers.encode_headers` (or :data:`MSG_ID_BLOCK_FMT`).

PUB_FMT: Final = b"PUB %s %d\r\n%s\r\n"
"""``PUB_FMT % (subject, len(payload), payload)``"""
PUB_REPLY_FMT: Final = b"PUB %s %s %d\r\n%s\r\n"
"""``PUB_REPLY_FMT % (subject, reply, len(payload), payload)``"""
HPUB_FMT: Final = b"HPUB %s %d %d\r\n%s%s\r\n"
"""``HPUB_FMT % (subject, len(hdr), len(hdr) + len(payload), hdr, payload)``"""
HPUB_REPLY_FMT: Final = b"HPUB %s %s %d %d\r\n%s%s\r\n"
"""``HPUB_REPLY_FMT % (subject, reply, len(hdr), len(hdr) + len(payload), hdr, payload)``"""
MSG_ID_BLOCK_FMT: Final = b"NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n"
"""``MSG_ID_BLOCK_FMT % msg_id``: the header block of a message whose only header is a msg id
(checked by :func:`jscore.publish.check_msg_id`); the same bytes :func:`encode_headers` gives."""
_MSG_ID_BLOCK_HEAD: Final = len(b"NATS/1.0\r\nNats-Msg-Id: \r\n\r\n")


def encode_pub(subject: bytes, reply: bytes | None, payload: bytes) -> bytes:
    """``PUB`` frame from an already validated, encoded subject (and reply, if any)."""
    if reply:
        return PUB_REPLY_FMT % (subject, reply, len(payload), payload)
    return PUB_FMT % (subject, len(payload), payload)


def encode_hpub(subject: bytes, reply: bytes | None, header_block: bytes, payload: bytes) -> bytes:
    """``HPUB`` frame; ``header_block`` comes from :func:`jscore.headers.encode_headers`."""
    hl = len(header_block)
    if reply:
        return HPUB_REPLY_FMT % (subject, reply, hl, hl + len(payload), header_block, payload)
    return HPUB_FMT % (subject, hl, hl + len(payload), header_block, payload)


def _frame_too_big(index: int, size: int, limit: int) -> BaseException:
    return MaxPayloadError(f"frame {index}: msg id header + payload = {size} bytes > max_payload {limit}")


def msg_id_frame_encoder(
    subject: bytes,
    reply_prefix: bytes,
    msg_id_prefix: bytes,
    max_payload: int,
    too_big: Callable[[int, int, int], BaseException] = _frame_too_big,
) -> Callable[..., bytes]:
    """The frame encoder of a bulk publisher: ``encode(n, payload)`` is the ``HPUB`` to
    ``subject`` replying to ``reply_prefix + n`` whose one header is
    ``Nats-Msg-Id: msg_id_prefix + n``, as :func:`encode_hpub` with :data:`MSG_ID_BLOCK_FMT`
    would build it; ``encode(n, payload, token)`` replies to ``reply_prefix + token`` instead
    (a batch's shared token, as bytes). Subject, reply prefix and msg id prefix go into a
    format string once, so each frame costs one ``%`` with five arguments. A frame whose header
    block + payload exceeds ``max_payload`` raises ``too_big(n, size, max_payload)`` instead.

    ``subject`` and ``reply_prefix + n`` (or ``+ token``) must be valid publish subjects and
    ``msg_id_prefix + n`` a valid msg id; the caller checks them once."""
    fmt = (
        b"HPUB %s %s" % (subject.replace(b"%", b"%%"), reply_prefix.replace(b"%", b"%%"))
        + b"%s %d %d\r\nNATS/1.0\r\nNats-Msg-Id: "
        + msg_id_prefix.replace(b"%", b"%%")
        + b"%s\r\n\r\n%s\r\n"
    )
    base = _MSG_ID_BLOCK_HEAD + len(msg_id_prefix)  # the header block's size, but the index digits

    def encode(index: int, payload: bytes, token: bytes | None = None) -> bytes:
        ib = b"%d" % index
        hl = base + len(ib)
        size = hl + len(payload)
        if size > max_payload:
            raise too_big(index, size, max_payload)
        return fmt % (token or ib, hl, size, ib, payload)

    return encode


def encode_sub(subject: bytes, queue: bytes | None, sid: int) -> bytes:
    if queue:
        return b"SUB %s %s %d\r\n" % (subject, queue, sid)
    return b"SUB %s %d\r\n" % (subject, sid)


def encode_unsub(sid: int, max_msgs: int | None = None) -> bytes:
    if max_msgs is not None:
        return b"UNSUB %d %d\r\n" % (sid, max_msgs)
    return b"UNSUB %d\r\n" % sid


def split_frames(data: bytes | bytearray) -> list[bytes]:
    """The whole frames of the client's own output, in order: the inverse of joining what the
    encoders above (and :func:`encode_connect`, ``PING``, ``PONG``) build. A ``PUB``/``HPUB``
    frame runs from its control line to the CRLF after its payload, whose size is the line's
    last field; every other frame is one line. Raises ``ValueError`` on bytes that are not
    such frames (the client never queues any)."""
    frames: list[bytes] = []
    pos, end = 0, len(data)
    while pos < end:
        stop = data.index(b"\r\n", pos) + 2
        if data.startswith((b"PUB ", b"HPUB "), pos):
            size = int(data[pos : stop - 2].rsplit(b" ", 1)[1])
            stop += size + 2
            if size < 0 or stop > end or data[stop - 2 : stop] != b"\r\n":
                raise ValueError(f"a frame at offset {pos} is cut or malformed")
        frames.append(bytes(data[pos:stop]))
        pos = stop
    return frames


# --- subject validation -------------------------------------------------------------------

# Whitespace (ASCII and Unicode) and control characters are never allowed in a subject.
_BAD_SUBJECT_CHAR: Final = re.compile(r"[\s\x00-\x1f\x7f]")
# Room left on a 4096-byte control line for "HPUB <subject> <reply> <hdr> <total>\r\n".
MAX_SUBJECT_BYTES: Final = 1800
_CACHE_LIMIT: Final = 8192
_pub_cache: dict[str, bytes] = {}
_sub_cache: dict[str, bytes] = {}

validated_subject: Final[Callable[[str], bytes | None]] = _pub_cache.get
"""``validated_subject(subject)``: the encoded subject if :func:`check_publish_subject` has
accepted it before (and it is still cached), else ``None``; the hot paths' shortcut past
validation. (The cache's own ``get``: no Python call of its own on those paths. The cache is
only ever cleared, never replaced, so this stays bound to it.)"""

_pub_heads: dict[str, bytes] = {}  # (the same keys as _pub_cache: filled and cleared with it)
pub_head: Final[Callable[[str], bytes | None]] = _pub_heads.get
"""``pub_head(subject)``: ``b"PUB <subject> "`` for a subject :func:`check_publish_subject`
accepted before (as :func:`validated_subject`), else ``None``. With :func:`size_line` a
``PUB`` frame is one join of bytes already made, not a format."""

_size_lines: dict[int, bytes] = {}
cached_size_line: Final[Callable[[int], bytes | None]] = _size_lines.get
"""``cached_size_line(n)``: :func:`size_line` if it was made before, else ``None``."""


_pub_tails: dict[bytes, bytes] = {}
cached_pub_tail: Final[Callable[[bytes], bytes | None]] = _pub_tails.get
"""``cached_pub_tail(payload)``: :func:`pub_tail` if it was made before, else ``None``."""


def pub_tail(payload: bytes) -> bytes:
    """``b" <size>\\r\\n<payload>\\r\\n"``: what follows the subject in a ``PUB`` frame
    without reply. Remembered for short payloads (the acks: ``+ACK``, ``-NAK`` ...), so an
    ack's frame is ``b"PUB " + subject + tail``."""
    tail = _pub_tails.get(payload)
    if tail is None:
        tail = b" %d\r\n%s\r\n" % (len(payload), payload)
        if len(payload) <= 64:
            if len(_pub_tails) >= 64:
                _pub_tails.clear()
            _pub_tails[payload] = tail
    return tail


def size_line(n: int) -> bytes:
    """``b"<n>\\r\\n"``: the end of a ``PUB`` control line for a payload of ``n`` bytes
    (remembered: a publisher's sizes repeat)."""
    line = _size_lines.get(n)
    if line is None:
        if len(_size_lines) >= _CACHE_LIMIT:
            _size_lines.clear()
        line = _size_lines[n] = b"%d\r\n" % n
    return line


def _check_common(subject: object, what: str) -> tuple[str, list[str]]:
    if not isinstance(subject, str):
        raise BadSubjectError(f"{what} must be a str, got {type(subject).__name__}")
    if not subject:
        raise BadSubjectError(f"{what} must not be empty")
    bad = _BAD_SUBJECT_CHAR.search(subject)
    if bad is not None:
        raise BadSubjectError(f"{what} {subject[:64]!r} has whitespace or a control character {bad.group()!r}")
    tokens = subject.split(".")
    if "" in tokens:
        raise BadSubjectError(f"{what} {subject[:64]!r} has an empty token")
    return subject, tokens


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (e.g. from surrogateescape)
        raise BadSubjectError(f"{what} {text[:64]!r} is not encodable as UTF-8") from None


def _remember(cache: dict[str, bytes], subject: str, encoded: bytes) -> bytes:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[subject] = encoded
    return encoded


def check_publish_subject(subject: str, what: str = "subject") -> bytes:
    """Validate a subject to publish to (or a reply subject) and return it encoded."""
    cached = _pub_cache.get(subject)
    if cached is not None:
        if subject not in _pub_heads:  # (two threads clearing the caches at once: put it back)
            _remember(_pub_heads, subject, b"PUB " + cached + b" ")
        return cached
    subject, tokens = _check_common(subject, what)
    for tok in tokens:
        if tok == "*" or tok == ">":
            raise BadSubjectError(f"{what} {subject[:64]!r} has a wildcard; publish subjects must be literal")
    encoded = _utf8(subject, what)
    if len(encoded) > MAX_SUBJECT_BYTES:
        raise BadSubjectError(f"{what} is {len(encoded)} bytes; the limit is {MAX_SUBJECT_BYTES}")
    _remember(_pub_heads, subject, b"PUB " + encoded + b" ")
    return _remember(_pub_cache, subject, encoded)


def check_subscribe_subject(subject: str) -> bytes:
    """Validate a subscription subject (wildcards allowed as whole tokens, ``>`` last)."""
    cached = _sub_cache.get(subject)
    if cached is not None:
        return cached
    subject, tokens = _check_common(subject, "subject")
    for i, tok in enumerate(tokens):
        if tok == ">" and i != len(tokens) - 1:
            raise BadSubjectError(f"subject {subject[:64]!r}: '>' must be the last token")
    encoded = _utf8(subject, "subject")
    if len(encoded) > MAX_SUBJECT_BYTES:
        raise BadSubjectError(f"subject is {len(encoded)} bytes; the limit is {MAX_SUBJECT_BYTES}")
    return _remember(_sub_cache, subject, encoded)


def check_queue_group(queue: str) -> bytes:
    if not isinstance(queue, str):
        raise BadSubjectError(f"queue group must be a str, got {type(queue).__name__}")
    if not queue or _BAD_SUBJECT_CHAR.search(queue):
        raise BadSubjectError(f"invalid queue group {queue[:64]!r}")
    encoded = _utf8(queue, "queue group")
    if len(encoded) > MAX_SUBJECT_BYTES:
        raise BadSubjectError("queue group name is too long")
    return encoded
