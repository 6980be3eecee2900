"""Fuzz target: the server-to-client wire parser (:class:`jscore.protocol.Parser`).

Invariant (see fuzz/README.md): the same bytes fed whole, byte by byte, or split at
arbitrary points yield the same event list, or every feeding raises ``RemoteProtocolError`` and
nothing else. Byte by byte means every byte of an input up to :data:`BYTEWISE_MAX` bytes; a
longer one is fed one byte at a time over its first bytes, over a window whose place the input
decides, and around every CR and LF, in one piece elsewhere (a full byte-by-byte feeding costs
a parse of the pending line per byte, quadratic in the input: the target ran 14 times slower).
Also checked:

* the events returned before an error are a prefix of the events of the feeding that got
  furthest (a parser never emits a frame that another split would have rejected);
* after an error the parser is poisoned: the next ``feed`` raises ``RemoteProtocolError`` again;
* ``buffered`` never exceeds the control-line cap plus the largest accepted message (INFO has
  its own cap), plus a few bytes of framing;
* a parser with an armed :class:`jscore.protocol.AckLane` (sids 1 and 2, one ``_INBOX`` inbox) gives
  the same messages, whole and split: each PubAck of an :class:`AcksReceived` run is the
  ``MSG`` the plain parser read (token, payload, size), and everything else is equal, errors
  included;
* the same parser has delivery runs armed for sid 3 (:data:`RUN_SIDS`): every message of a
  :class:`MsgsReceived` run is the plain parser's, no run is empty, holds a status or another
  sid, and its size is its messages' sum; a message on sid 3 that is not a status never comes
  alone;
* the same for sid 5 armed for deliveries (:data:`DELIVERY_SIDS`, runs with ack cursors): every
  message of a run is the plain parser's, and the run's cursors are what
  :func:`jscore.jsmsg.ack_cursor` reads from each message's reply;
* and direct get replies armed for sid 4 (:data:`DIRECT_SIDS`, :data:`DIRECT_INBOX`): every reply
  of a :class:`DirectRepliesReceived` run is what the plain parser's message gives when its
  header block is in the lane's form (its values, payload and size), and the plain parser's
  other messages are unchanged.

``one_input`` raises ``AssertionError`` when the invariant breaks, and lets any exception other
than ``RemoteProtocolError`` escape: both are crashes for a coverage-guided fuzzer.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python fuzz/fuzz_wire.py fuzz/corpus/wire -max_total_time=3600
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Sequence
from typing import Any
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz._runner import run
from jscore.errors import RemoteProtocolError
from jscore.jsmsg import ack_cursor
import re

from jscore.protocol import (
    MAX_CONTROL_LINE,
    MAX_INFO_LINE,
    PAYLOAD_MARGIN,
    PUBACK_DUPLICATE,
    AckLane,
    AcksReceived,
    MsgReceived,
    DirectRepliesReceived,
    MsgsReceived,
    Parser,
    ParserEvent,
)

__all__ = [
    "FeedResult",
    "feed",
    "buffer_bound",
    "derived_cuts",
    "bytewise_cuts",
    "check_wire",
    "check_lane",
    "lane_view",
    "one_input",
    "FUZZ_MAX_PAYLOAD",
    "LANE_SIDS",
    "LANE_INBOX",
    "RUN_SIDS",
    "DELIVERY_SIDS",
    "DIRECT_SIDS",
    "DIRECT_INBOX",
]

FUZZ_MAX_PAYLOAD = 1024
"""A small max_payload so that the size checks are reachable with short inputs."""
SLACK = 8
"""Framing bytes around a message: two CRLFs and a trailing CR."""
BYTEWISE_MAX = 256
"""Inputs up to this length are fed one byte at a time in full."""
WINDOW = 64
"""Longer inputs: the first WINDOW bytes and a derived window of WINDOW bytes go one at a time."""
MAX_DELIMITER_CUTS = 64
"""Longer inputs: cuts before and after the first MAX_DELIMITER_CUTS CRs and LFs."""


class FeedResult:
    """What one way of feeding produced: the events, the error (if any), the peak of ``buffered``."""

    __slots__ = ("events", "error", "max_buffered")

    def __init__(self, events: list[ParserEvent], error: RemoteProtocolError | None, max_buffered: int) -> None:
        self.events = events
        self.error = error
        self.max_buffered = max_buffered

    def __repr__(self) -> str:
        return f"FeedResult(events={self.events!r}, error={self.error!r}, max_buffered={self.max_buffered})"


def buffer_bound(max_payload: int) -> int:
    """The most a parser may hold for an incomplete frame."""
    return max(MAX_INFO_LINE, MAX_CONTROL_LINE + max_payload + PAYLOAD_MARGIN) + SLACK


LANE_SIDS = (1, 2)
"""The sids armed in the ack lane of :func:`check_lane` (inbox prefix ``_INBOX``)."""
LANE_INBOX = "_INBOX.AbCdEfGhIjKlMnOpQrStUv."
"""Their inbox (a message to another inbox on those sids goes the general way in both)."""
RUN_SIDS = (3,)
"""The sids armed for delivery runs in the lane of :func:`check_lane`."""
DELIVERY_SIDS = (5,)
"""The sids armed for delivery runs with ack cursors (the delivery lane) in :func:`check_lane`."""
DIRECT_SIDS = (4,)
"""The sids armed for direct get replies in the lane of :func:`check_lane`, to :data:`DIRECT_INBOX`."""
DIRECT_INBOX = "_INBOX.AbCdEfGhIjKlMnOpQrSt44"
_LANE_SUBJECT = re.compile(r"_INBOX\.[0-9A-Za-z]{22}\.([^.]*)")


def feed(
    data: bytes, cuts: Iterable[int] = (), max_payload: int = FUZZ_MAX_PAYLOAD, lane: bool = False
) -> FeedResult:
    """Feed ``data`` to a fresh parser in chunks split at ``cuts`` (positions into ``data``);
    with ``lane``, the parser has an :class:`AckLane` with :data:`LANE_SIDS` armed.

    Only ``RemoteProtocolError`` is caught; anything else propagates to the caller.
    """
    ack_lane = None
    if lane:
        ack_lane = AckLane("_INBOX")
        for sid in LANE_SIDS:
            ack_lane.arm(sid, LANE_INBOX)
        for sid in RUN_SIDS:
            ack_lane.arm_runs(sid)
        for sid in DELIVERY_SIDS:
            ack_lane.arm_runs(sid, cursors=True)
        for sid in DIRECT_SIDS:
            ack_lane.arm_direct(sid, DIRECT_INBOX)
    parser = Parser(max_payload, ack_lane)
    events: list[ParserEvent] = []
    peak = 0
    prev = 0
    points = sorted({c for c in cuts if 0 < c < len(data)})
    points.append(len(data))
    for cut in points:
        try:
            events.extend(parser.feed(data[prev:cut]))
        except RemoteProtocolError as exc:
            assert parser.poisoned, "parser raised but is not poisoned"
            assert parser.buffered == 0, "a poisoned parser must drop its buffer"
            try:
                parser.feed(b"PING\r\n")
            except RemoteProtocolError:
                pass
            else:
                raise AssertionError("a poisoned parser accepted more input") from exc
            return FeedResult(events, exc, peak)
        peak = max(peak, parser.buffered)
        prev = cut
    return FeedResult(events, None, peak)


def derived_cuts(data: bytes, limit: int = 16) -> list[int]:
    """Split points derived from the input itself, so a fuzzer can steer them."""
    if len(data) < 2:
        return []
    rng = random.Random(data[:16])  # a private generator seeded by the data: deterministic
    k = 1 + data[0] % limit
    return sorted(rng.randrange(1, len(data)) for _ in range(k))


def bytewise_cuts(data: bytes) -> list[int]:
    """The cuts of the one-byte-at-a-time feeding: every position of a short input; for a
    longer one, every position of its first :data:`WINDOW` bytes and of a window of
    :data:`WINDOW` bytes at an offset derived from the input (so the fuzzer moves it), and the
    positions around every CR and LF (up to :data:`MAX_DELIMITER_CUTS` of them): a chunk that
    ends between CR and LF is where a framing bug hides. The rest goes in one piece."""
    n = len(data)
    if n <= BYTEWISE_MAX:
        return list(range(1, n))
    cuts = set(range(1, WINDOW))
    start = WINDOW + int.from_bytes(data[-2:], "little") % (n - 2 * WINDOW)
    cuts.update(range(start, start + WINDOW))
    found = 0
    pos = -1
    while found < MAX_DELIMITER_CUTS:
        cr, lf = data.find(b"\r", pos + 1), data.find(b"\n", pos + 1)
        pos = min(cr, lf) if cr >= 0 and lf >= 0 else max(cr, lf)
        if pos < 0:
            break
        cuts.update((pos, pos + 1))
        found += 1
    return sorted(c for c in cuts if 0 < c < n)


def check_wire(
    data: bytes, extra_splits: Sequence[Sequence[int]] = (), max_payload: int = FUZZ_MAX_PAYLOAD
) -> FeedResult:
    """Check the wire invariant on ``data``; return the whole-feed result.

    The feedings: whole, one byte at a time (:func:`bytewise_cuts`: all of a short input, bounded
    windows of a long one), at points derived from the input, and at ``extra_splits``. They must
    all succeed with the same events, or all raise ``RemoteProtocolError``; the events a feeding
    returned before its error are a prefix of those of the feeding that got furthest."""
    whole = feed(data, (), max_payload)
    results = [whole, feed(data, bytewise_cuts(data), max_payload), feed(data, derived_cuts(data), max_payload)]
    results.extend(feed(data, cuts, max_payload) for cuts in extra_splits)
    finest = max(results, key=lambda r: len(r.events))
    bound = buffer_bound(max_payload)
    for result in results:
        assert result.max_buffered <= bound, f"buffered {result.max_buffered} > bound {bound}"
        assert (result.error is None) == (whole.error is None), (
            f"whole feed {'raised' if whole.error else 'succeeded'} but a split feed did not: "
            f"whole={whole!r} split={result!r}"
        )
        n = len(result.events)
        assert result.events == finest.events[:n], f"events differ: {result.events!r} vs {finest.events!r}"
        if whole.error is None:
            assert n == len(finest.events), f"events differ: {result.events!r} vs {finest.events!r}"
    return whole


def lane_view(events: Sequence[ParserEvent]) -> list[object]:
    """The events with every message on an armed inbox as ``(sid, token, payload, size)``:
    an :class:`AcksReceived` run gives one per PubAck (its payload written back in the
    server's form), a plain ``MSG`` on such an inbox one; a :class:`MsgsReceived` run gives its
    messages (each read the same way); everything else stays itself."""
    out: list[object] = []
    flat: list[Any] = []
    for e in events:
        if e.__class__ is DirectRepliesReceived:
            assert isinstance(e, DirectRepliesReceived)
            assert e.sid in DIRECT_SIDS and e.replies, e
            for r in e.replies:
                flat.append((e.sid, *r))
            continue
        if e.__class__ is MsgsReceived:
            assert isinstance(e, MsgsReceived)
            assert e.sid in RUN_SIDS + DELIVERY_SIDS and e.msgs, e
            assert all(m.sid == e.sid and m.status is None for m in e.msgs), e
            assert sum(m.size for m in e.msgs) == e.size, e
            if e.cursors is not None:
                assert e.sid in DELIVERY_SIDS, e
                assert e.cursors == [ack_cursor(m.reply) if m.reply is not None else None for m in e.msgs], e
            flat.extend(e.msgs)
        else:
            flat.append(e)
    for e in flat:
        if e.__class__ is AcksReceived:
            assert isinstance(e, AcksReceived)
            assert e.sid in LANE_SIDS and e.acks, e
            total = 0
            for token, stream, seq, duplicate in e.acks:
                body = b'{"stream":"%s","seq":%d%s}' % (stream.encode(), seq, PUBACK_DUPLICATE if duplicate else b"")
                size = len("_INBOX.") + 23 + len(token) + len(body)
                total += size
                out.append((e.sid, token, body, size))
            assert total == e.size, (total, e)
            continue
        if e.__class__ is MsgReceived:
            assert isinstance(e, MsgReceived)
            reply = _as_direct_reply(e)
            if reply is not None:
                out.append(reply)
                continue
            m = _LANE_SUBJECT.fullmatch(e.subject)
            if m is not None and e.sid in LANE_SIDS and e.reply is None and e.headers is None:
                out.append((e.sid, m.group(1), e.data, e.size))
                continue
        out.append(e)
    return out


def _as_direct_reply(e: MsgReceived) -> tuple[Any, ...] | None:
    """A general-path message in the form the direct lane reads, as the lane's tuple (with the
    sid first); None for any other."""
    if e.sid not in DIRECT_SIDS or e.subject != DIRECT_INBOX or e.reply is not None or e.status is not None:
        return None
    layout = e.headers._direct_layout() if e.headers is not None else None
    if layout is None or layout[5] is None or layout[6] is None:
        return None
    own, stream, subject, seq, stamp, pending, last, up_to = layout
    assert stream and subject and seq and stamp and pending and last
    digits = [seq, pending, last] + ([] if up_to is None else [up_to])
    if not all(d.isascii() and d.isdigit() and len(d) <= 19 for d in digits):
        return None
    assert own is not None
    if not all(" " <= c <= "~" or c in "\t\r\n" for c in own):
        return None  # (an own value the lane does not read: other than printable ASCII, space, tab)
    return (e.sid, stream, subject, int(seq), stamp, int(pending), int(last),
            None if up_to is None else int(up_to), own, e.data)


def _bytes_in(events: Sequence[ParserEvent]) -> int:
    """The size of every message, as the connection counts it (runs by their ``size``)."""
    return sum(getattr(e, "size", 0) for e in events)


def check_lane(data: bytes, cuts: Sequence[int] = (), max_payload: int = FUZZ_MAX_PAYLOAD) -> FeedResult:
    """The ack lane changes nothing but the shape: a parser with it armed gives, for ``data``
    split at ``cuts``, the plain parser's messages and the same error."""
    plain = feed(data, cuts, max_payload)
    laned = feed(data, cuts, max_payload, lane=True)
    assert (plain.error is None) == (laned.error is None), f"plain={plain!r} lane={laned!r}"
    if plain.error is not None:
        assert str(plain.error) == str(laned.error), (plain.error, laned.error)
    assert lane_view(laned.events) == lane_view(plain.events), f"plain={plain.events!r} lane={laned.events!r}"
    assert _bytes_in(laned.events) == _bytes_in(plain.events), f"plain={plain.events!r} lane={laned.events!r}"
    for e in laned.events:
        if isinstance(e, MsgReceived) and e.sid in RUN_SIDS + DELIVERY_SIDS:
            assert e.status is not None, f"a message on a run sid came alone: {e!r}"
    return laned


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when the invariant is broken."""
    check_wire(data)
    check_lane(data)
    check_lane(data, derived_cuts(data))


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
