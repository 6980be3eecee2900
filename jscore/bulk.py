"""The delivery lane's bulk reader: a run of JetStream deliveries read from a buffer with a few
array operations, as columns, instead of a regular expression match and a dozen steps and
objects per frame.

:meth:`jscore.protocol.Parser._delivery_run` reads a run of deliveries on an ordered consumer's
inbox frame by frame. On a subscription armed for columns (the Spark reader's), when a large
buffer holds many small deliveries, :func:`read_deliveries` reads the longest run at its start
that the frame-by-frame reading would take, as a :class:`DeliveryColumns`: positions in the
buffer and the ack numbers, from which :meth:`DeliveryColumns.messages` gives what that reading
gives (the same :class:`~jscore.protocol.MsgReceived` for each frame, the same ack cursors and
sizes) and the column methods give Arrow arrays without an object per frame. How:

1. The first frame is matched whole by the frame-by-frame reading's pattern; its sid must be
   armed for columns and its size at most :data:`MAX_FRAME`.
2. Where frames may start (a line starting ``HMSG `` or ``MSG ``, as the first frame does), where
   their control lines end and the sizes those lines give are found with NumPy over the whole
   buffer. A frame belongs to the run while it ends, by its size, exactly where the next one
   starts, with CR LF after its payload. A line in a payload that looks like a frame breaks that
   chain; when the frame before it ends where a later line starts, the lines between are dropped
   (they are inside that frame) and the chain goes on. A payload is never read as frames.
3. The run's frames must have the first one's sid and ack subject up to the delivery count (the
   same consumer); the first that does not ends the run.
4. Their subjects, joined, and what follows each one's delivery count (numbers, sizes, header
   block), joined, must match the frame-by-frame reading's patterns for those pieces once per
   frame. Each header block must hold exactly one empty line, at its end. Sizes, the control
   line's length and ``max_payload`` are checked as the frame-by-frame reading checks them.
   (Rests of one length in a row, as a server's deliveries mostly are, are checked as a matrix
   against the first of them, which the pattern matches: see :func:`_rests_match`.)

Anything else gives None or a shorter run, and the frame-by-frame reading goes on from there: it
meets what does not match and raises what it raises. This module needs NumPy and PyArrow (the
Spark extra installs them): when either is missing, :data:`AVAILABLE` is False and the lane reads
frame by frame. Neither does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib.util import find_spec
from itertools import chain, repeat
from typing import Any, Final, NamedTuple

from .headers import checked_block_headers

AVAILABLE: Final = find_spec("numpy") is not None and find_spec("pyarrow") is not None
"""True when NumPy and PyArrow are installed: the delivery lane may read in bulk. They are
imported by :func:`load`, which a reader calls before it arms a subscription for columns (a
program that never does, does not pay for importing them)."""

_np: Any = None
_pa: Any = None
_failed = False


def load() -> bool:
    """Import NumPy and PyArrow once (a reader about to arm a subscription for columns calls it
    first, so that the connection does not import them while it reads); False if that fails
    (and then at once, without trying again)."""
    global _np, _pa, _failed
    if _np is None and not _failed:
        try:
            import numpy
            import pyarrow  # type: ignore[import-untyped]
        except ImportError:
            _failed = True
            return False
        _np, _pa = numpy, pyarrow
    return _np is not None


_MAX_REPAIRS: Final = 64  # lines in payloads that look like frames dropped per bulk read, at most

MAX_FRAME: Final = 384
"""A run whose first delivery holds more than this many bytes (headers and payload) is read
frame by frame: a bulk read scans every byte of the buffer, and with fewer, larger frames that
costs more than it saves (about even at 512 bytes)."""

MIN_BYTES: Final = 8 * 1024
"""The delivery lane reads in bulk from a buffer with at least this many bytes left: below it the
array operations' fixed cost outweighs what they save. (With 32 KiB, a read's short last socket
reads came frame by frame and broke the reader's runs, each break costing it a batch's columns
more, about 1.4 ms: more than a short bulk read costs over reading its frames one by one.)"""


def run_matcher(pattern: bytes) -> Callable[[bytes, int, int], object]:
    """The ``fullmatch`` (``(string, pos, endpos)``) of one or more pieces in a row that each
    match ``pattern`` (whose capturing groups are made non-capturing: its pieces hold no literal
    parenthesis)."""
    plain = re.sub(rb"\((?!\?)", b"(?:", pattern)
    return re.compile(b"(?:" + plain + b")++").fullmatch


class Patterns(NamedTuple):
    """The frame-by-frame reading's patterns, as :func:`read_deliveries` uses them: ``hmsg`` and
    ``msg`` match a whole frame's head at a position (``re.Pattern.match``); ``hmsg_rests`` and
    ``msg_rests`` are :func:`run_matcher` of what follows an ack subject's delivery count;
    ``subjects`` the ``fullmatch`` of subjects joined (one or more characters each);
    ``consumer_name`` the consumer's name of its bytes (the parser's bounded cache)."""

    hmsg: Callable[[bytes, int], Any]
    msg: Callable[[bytes, int], Any]
    hmsg_rests: Callable[[bytes, int, int], object]
    msg_rests: Callable[[bytes, int, int], object]
    subjects: Callable[[bytes], object]
    consumer_name: Callable[[bytes], str]


class DeliveryColumns:
    """A run of deliveries :func:`read_deliveries` read, as columns: ``count`` frames of one
    sid and one consumer, all HMSG (``headed``) or all MSG, ending at ``end`` in ``buf``, with
    the sum of their sizes as the server counts them (``size``) and their ack cursors' numbers
    (``seqs``, ``cseqs``, ``stamps``: stream sequence, consumer sequence, time stamp). The rest
    (subjects, payloads, header blocks, replies) stays in ``buf`` until asked for: by
    :meth:`messages` as the frame-by-frame reading gives it, or column by column."""

    __slots__ = ("buf", "end", "sid", "headed", "consumer", "count", "size", "seqs", "cseqs", "_stamps", "_one_line", "_at")

    def __init__(
        self,
        *,
        buf: bytes,
        end: int,
        sid: int,
        headed: bool,
        consumer: str,
        seqs: list[int],
        cseqs: list[int],
        stamps: Any,
        size: int,
        one_line: bool = False,
        **at: Any,
    ) -> None:
        self.buf = buf
        self.end = end
        self.sid = sid
        self.headed = headed
        self.consumer = consumer
        self.count = len(seqs)
        self.size = size
        self.seqs = seqs
        self.cseqs = cseqs
        self._stamps = stamps  # (a list, or a PyArrow uint64 array until asked for as one)
        self._one_line = one_line  # (every header block holds exactly one line; False: not known to)
        self._at: dict[str, Any] = at  # (NumPy arrays of positions in buf, and sizes)

    @property
    def stamps(self) -> list[int]:
        """Each delivery's time stamp (ns since the epoch), from its ack subject."""
        stamps = self._stamps
        if stamps.__class__ is not list:
            stamps = self._stamps = stamps.to_numpy().tolist()
        return stamps  # type: ignore[no-any-return]

    def stamp_array(self) -> Any:
        """:attr:`stamps` as a PyArrow ``uint64`` array."""
        stamps = self._stamps
        return _pa.array(stamps, type=_pa.uint64()) if stamps.__class__ is list else stamps

    def __repr__(self) -> str:
        return f"<DeliveryColumns sid={self.sid} {self.consumer} count={self.count} seqs={self.seqs[0]}..{self.seqs[-1]}>"

    def head(self, k: int) -> DeliveryColumns:
        """The first ``k`` deliveries (1 <= k <= count)."""
        if not 1 <= k <= self.count:
            raise ValueError(f"head({k}) of {self.count} deliveries")
        if k == self.count:
            return self
        at = {key: value[:k] for key, value in self._at.items()}
        size = int(at["sizes"].sum())
        end = int(at["payload_end"][-1]) + 2
        return DeliveryColumns(
            buf=self.buf, end=end, sid=self.sid, headed=self.headed, consumer=self.consumer,
            seqs=self.seqs[:k], cseqs=self.cseqs[:k], stamps=self.stamp_array().slice(0, k), size=size,
            one_line=self._one_line, **at,
        )  # fmt: skip

    def tail(self, k: int) -> DeliveryColumns:
        """The deliveries after the first ``k`` (0 <= k < count)."""
        if not 0 <= k < self.count:
            raise ValueError(f"tail({k}) of {self.count} deliveries")
        if k == 0:
            return self
        at = {key: value[k:] for key, value in self._at.items()}
        return DeliveryColumns(
            buf=self.buf, end=self.end, sid=self.sid, headed=self.headed, consumer=self.consumer,
            seqs=self.seqs[k:], cseqs=self.cseqs[k:], stamps=self.stamp_array().slice(k), size=int(at["sizes"].sum()),
            one_line=self._one_line, **at,
        )  # fmt: skip

    def subjects(self) -> list[str]:
        """Each delivery's subject."""
        at = self._at
        raw = _ranges(self.buf, at["subject_at"], at["subject_end"])
        table = {b: b.decode() for b in set(raw)}  # (printable ASCII: matched)
        return list(map(table.__getitem__, raw))

    def payloads(self) -> list[bytes]:
        """Each delivery's payload (without its header block)."""
        at = self._at
        return _ranges(self.buf, at["payload_at"], at["payload_end"])

    def header_blocks(self) -> list[str] | None:
        """Each delivery's header block, as text (None for MSG deliveries)."""
        if not self.headed:
            return None
        at = self._at
        return _texts(self.buf, at["block_at"], at["payload_at"])

    def header_lines(self) -> list[str] | None:
        """Each delivery's header lines (its block without the ``NATS/1.0`` line and the last
        empty line: what :func:`jscore.headers.bulk_headers` keeps), or None for MSG deliveries."""
        if not self.headed:
            return None
        at = self._at
        return _texts(self.buf, at["block_at"] + _FIRST_LINE, at["payload_at"] - 2)

    def one_key_values(self, type_: Any = None) -> tuple[str, Any] | None:
        """When every delivery's headers are one line ``Key: value`` with the same key and a
        value that does not start with white space (a writer's ``Nats-Msg-Id``): the key and
        the values, as a PyArrow array of ``type_`` (``large_string`` by default; made in C). What
        :func:`jscore.headers.header_columns` gives for :meth:`header_lines` then. Else None."""
        if not self._one_line:
            return None
        np = _np
        at = self._at
        buf = self.buf
        first = int(at["block_at"][0]) + _FIRST_LINE
        colon = buf.find(b":", first)
        head = buf[first : colon + 1] + b" "
        a = np.frombuffer(buf, np.uint8)
        value_at = at["block_at"] + _FIRST_LINE + len(head)
        if (value_at >= at["payload_at"] - 4).any():  # (a block too short to hold the head and a value)
            return None
        rows = a[(at["block_at"] + _FIRST_LINE)[:, None] + np.arange(len(head))[None, :]]
        if not (rows == np.frombuffer(head, np.uint8)).all():
            return None
        starts = a[value_at]
        if ((starts == 32) | (starts == 9)).any():
            return None
        values = _slices(_pa.py_buffer(buf), value_at, at["payload_at"] - 4, type_ or _pa.large_string())
        return head[:-2].decode(), values

    def replies(self) -> list[str]:
        """Each delivery's reply (its ack subject)."""
        at = self._at
        return _texts(self.buf, at["reply_at"], at["reply_end"])

    def last_reply(self) -> str:
        """The last delivery's reply."""
        at = self._at
        return self.buf[int(at["reply_at"][-1]) : int(at["reply_end"][-1])].decode()

    def subject_array(self, type_: Any = None) -> Any:
        """The subjects as a PyArrow array of ``type_`` (``large_string`` by default; made in C)."""
        at = self._at
        return _slices(_pa.py_buffer(self.buf), at["subject_at"], at["subject_end"], type_ or _pa.large_string())

    def payload_array(self, type_: Any = None) -> Any:
        """The payloads as a PyArrow array of ``type_`` (``large_binary`` by default; made in C)."""
        at = self._at
        return _slices(_pa.py_buffer(self.buf), at["payload_at"], at["payload_end"], type_ or _pa.large_binary())

    def messages(self, msg_type: Any) -> tuple[list[Any], list[tuple[str, int, int, int]]]:
        """The deliveries as the frame-by-frame reading gives them: a ``msg_type``
        (:class:`~jscore.protocol.MsgReceived`) each, and its ack cursor."""
        k = self.count
        blocks = self.header_blocks()
        headers: Any = repeat(None, k) if blocks is None else map(checked_block_headers, blocks)
        msgs = list(
            map(
                msg_type, self.subjects(), repeat(self.sid, k), self.replies(), self.payloads(), headers,
                repeat(None, k), repeat(None, k), self._at["sizes"].tolist(),
            )
        )  # fmt: skip
        return msgs, list(zip(repeat(self.consumer, k), self.seqs, self.cseqs, self.stamps))


_FIRST_LINE: Final = len("NATS/1.0\r\n")


def joined(runs: list[DeliveryColumns]) -> DeliveryColumns:
    """Runs read in bulk (one or more, of one consumer, all HMSG or all MSG), as one: their
    frames' bytes copied into one buffer (one copy, in C) and their positions moved to it, so
    that a reader makes its columns once for them all rather than once a run. The sid is the
    first run's (a reader's pulls are each a subscription of its own)."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    if any(r.headed is not first.headed or r.consumer != first.consumer for r in runs):
        raise ValueError("only runs of one consumer, all HMSG or all MSG, are joined")
    np = _np
    pieces: list[memoryview] = []
    moved: dict[str, list[Any]] = {key: [] for key in first._at}
    base = 0
    for r in runs:
        lo = int(r._at["subject_at"][0])
        pieces.append(memoryview(r.buf)[lo : r.end])
        shift = base - lo
        for key, value in r._at.items():
            moved[key].append(value if key == "sizes" else value + shift)
        base += r.end - lo
    stamps = [r._stamps for r in runs]
    return DeliveryColumns(
        buf=b"".join(pieces), end=base, sid=first.sid, headed=first.headed, consumer=first.consumer,
        seqs=list(chain.from_iterable(r.seqs for r in runs)), cseqs=list(chain.from_iterable(r.cseqs for r in runs)),
        stamps=(
            list(chain.from_iterable(stamps)) if all(part.__class__ is list for part in stamps)
            else _pa.concat_arrays([r.stamp_array() for r in runs])
        ),
        size=sum(r.size for r in runs), one_line=all(r._one_line for r in runs),
        **{key: np.concatenate(parts) for key, parts in moved.items()},
    )  # fmt: skip


def _numbers(a: Any, start: Any, stop: Any, width: int) -> tuple[Any, Any]:
    """The decimal numbers at ``a[start[i]:stop[i]]`` and where each is 1 to ``width`` digits
    (``width`` at most 18), read as a matrix of right-aligned digits: a few array operations
    whatever the count."""
    np = _np
    length = stop - start
    ok = (length >= 1) & (length <= width)
    w = int(min(width, max(1, int(length.max()) if len(length) else 1)))
    at = stop[:, None] + np.arange(-w, 0)[None, :]
    inside = at >= start[:, None]
    digits = a[np.where(inside, at, 0)].astype(np.int64) - 48
    ok &= (~inside | ((digits >= 0) & (digits <= 9))).all(axis=1)
    value = (np.where(inside, digits, 0) * (10 ** np.arange(w - 1, -1, -1, dtype=np.int64))).sum(axis=1)
    return value, ok


def _checked_numbers(data: Any, starts: Any, stops: Any) -> Any:
    """The decimal numbers at ``[starts[i]:stops[i]]`` of ``data`` (a PyArrow buffer), which
    the caller's match checked (0, or 1 to 19 digits without a leading zero), as a PyArrow
    ``uint64`` array."""
    pa = _pa
    return _slices(data, starts, stops, pa.large_string()).cast(pa.uint64())


def _slices(data: Any, starts: Any, stops: Any, type_: Any) -> Any:
    """The slices ``[starts[i]:stops[i]]`` of ``data`` (a PyArrow buffer), in order and apart,
    as an array of ``type_`` (a string or binary type, large or not)."""
    np = _np
    pa = _pa
    k = len(starts)
    small = type_ in (pa.string(), pa.binary())  # (32-bit offsets)
    if small and data.size >= 2**31:
        return _slices(data, starts, stops, pa.large_string() if type_ == pa.string() else pa.large_binary()).cast(type_)
    offsets = np.empty(2 * k + 1, np.int32 if small else np.int64)
    offsets[0:-1:2] = starts
    offsets[1:-1:2] = stops
    offsets[-1] = stops[-1]
    both = pa.Array.from_buffers(type_, 2 * k, [None, pa.py_buffer(offsets), data])
    return both.take(pa.array(np.arange(0, 2 * k, 2)))


def _ranges(buf: bytes, starts: Any, stops: Any) -> list[bytes]:
    """The slices ``buf[starts[i]:stops[i]]``, as bytes (a slice object each, made in C)."""
    return list(map(buf.__getitem__, map(slice, starts.tolist(), stops.tolist())))


def _texts(buf: bytes, starts: Any, stops: Any) -> list[str]:
    """:func:`_ranges` decoded (the caller checked they are ASCII)."""
    return list(map(bytes.decode, _ranges(buf, starts, stops)))


def _joined(data: Any, starts: Any, stops: Any) -> bytes:
    """The slices ``[starts[i]:stops[i]]`` of ``data`` (a PyArrow buffer), in order and apart,
    joined (one copy, in C)."""
    taken = _slices(data, starts, stops, _pa.large_binary())
    return memoryview(taken.buffers()[2])[: int((stops - starts).sum())].tobytes()


_TEMPLATE_ROWS: Final = 256
"""Rests of one length in a row from which :func:`_rests_match` checks them as a matrix (fewer
are matched by the pattern: a matrix's set-up, its checks and its numbers cost about what the
pattern does on 100-130 rows, and groups of 32 in a row made a run 1.7 times slower)."""

_LITERAL: Final = 0
_DIGIT: Final = 1
_VALUE: Final = 2


def _rest_template(first: bytes, headed: bool) -> tuple[Any, Any, Any, list[tuple[int, int]]] | None:
    """What each byte of a rest like ``first`` (which the rests pattern matches) must be for
    the pattern to match it too: per column, the same byte as ``first`` (``_LITERAL``: the
    dots, spaces, line ends, ``NATS/1.0``, each header line's key and colon), a digit
    (``_DIGIT``: the five ack numbers, the sizes) or a header value's character (``_VALUE``);
    and the columns that must not be ``0`` (the first digit of an ack number of two digits
    or more) or a space or tab (a header value's last character); and where the stream
    sequence, the consumer sequence and the time stamp are. None when the pattern's
    look-ahead may see a difference (a first line ``Nats-Stream:``): those are matched."""
    np = _np
    codes = np.zeros(len(first), np.uint8)
    lead: list[int] = []
    tail: list[int] = []
    numbers: list[tuple[int, int]] = []
    sp = first.index(b" ")
    at = 0
    for dot in [*(i for i in range(sp) if first[i] == 46), sp]:  # (the ack numbers: 0 or no leading zero)
        codes[at:dot] = _DIGIT
        if dot - at > 1:
            lead.append(at)
        numbers.append((at, dot))
        at = dot + 1
    cr = first.index(b"\r\n", sp)
    if headed:
        sizes = first.index(b" ", sp + 1)
        codes[sp + 1 : sizes] = _DIGIT
        codes[sizes + 1 : cr] = _DIGIT
        at = cr + 2 + len(b"NATS/1.0\r\n")
        if first.startswith(b"Nats-Stream:", at):
            return None
        while not first.startswith(b"\r\n", at):  # (each line: its key and colon as they are, then its value)
            colon = first.index(b":", at)
            end = first.index(b"\r\n", colon)
            codes[colon + 1 : end] = _VALUE
            if end > colon + 1:
                tail.append(end - 1)
            at = end + 2
    else:
        codes[sp + 1 : cr] = _DIGIT
    return codes, np.array(lead, np.intp), np.array(tail, np.intp), numbers[1:4]


Matrix = tuple[int, int, Any, list[tuple[int, int]]]
"""Rows ``[a0, a1)`` of a run checked as a matrix: the matrix and where its stream sequence,
consumer sequence and time stamp columns are."""


def _rests_match(
    rests: bytes, r: Any, lens: Any, rest_at: Any, full: Callable[[bytes, int, int], object], headed: bool
) -> list[Matrix] | None:
    """The matrices ``full`` (:func:`run_matcher` of the rests pattern) was spared, if it matches
    ``rests``, the rests of ``len(lens)`` frames joined (``r`` as bytes, each at ``rest_at`` for
    ``lens``); None if it does not. Rests of one length in a row are one matrix: when the
    pattern matches the first, each other row matches it exactly when it has the first's bytes
    in its ``_LITERAL`` columns, digits and value characters in the others, and none of the
    leading zeros or trailing blanks the pattern refuses (:func:`_rest_template`): every piece
    then has the first's bounds. What is not in such a matrix (groups of fewer than
    ``_TEMPLATE_ROWS`` rows, or that do not fit) is matched by the pattern, the rows between two
    matrices in one match."""
    np = _np
    k = len(lens)
    cut = np.flatnonzero(lens[1:] != lens[:-1]) + 1
    firsts = np.empty(len(cut) + 1, np.int64)
    firsts[0] = 0
    firsts[1:] = cut
    lasts = np.empty_like(firsts)
    lasts[:-1] = cut
    lasts[-1] = k
    done = 0  # the rows before it are checked
    matrices: list[Matrix] = []
    for g in np.flatnonzero(lasts - firsts >= _TEMPLATE_ROWS).tolist():
        a0, a1 = int(firsts[g]), int(lasts[g])
        start, width = int(rest_at[a0]), int(lens[a0])
        if full(rests, start, start + width) is None:
            continue
        template = _rest_template(rests[start : start + width], headed)
        if template is None:
            continue
        m = r[start : start + (a1 - a0) * width].reshape(a1 - a0, width)
        if not _rows_alike(m, *template[:3]):
            continue
        if a0 > done and full(rests, int(rest_at[done]), start) is None:
            return None
        matrices.append((a0, a1, m, template[3]))
        done = a1
    if done == k or full(rests, int(rest_at[done]), len(rests)) is not None:
        return matrices
    return None


def _column_numbers(digits: Any) -> Any:
    """The numbers whose digits (checked, at most 19 each) are the rows of ``digits`` (uint8),
    as ``uint64``."""
    np = _np
    w = digits.shape[1]
    return (digits - 48).astype(np.uint64) @ (np.uint64(10) ** np.arange(w - 1, -1, -1, dtype=np.uint64))


def _rows_alike(m: Any, codes: Any, lead: Any, tail: Any) -> bool:
    """Every row of ``m`` as :func:`_rest_template` asks (row 0 is the template's)."""
    if ((m != m[0]) & (codes == _LITERAL)).any():
        return False
    if (((m - 48) > 9) & (codes == _DIGIT)).any():  # (uint8: below "0" wraps round)
        return False
    if (((m - 32) > 94) & (m != 9) & (codes == _VALUE)).any():  # (printable ASCII or a tab)
        return False
    if len(lead) and (m[:, lead] == 48).any():
        return False
    if len(tail):
        last = m[:, tail]
        if ((last == 32) | (last == 9)).any():
            return False
    return True


class Scan:
    """Where a buffer's line feeds and spaces are (NumPy arrays of positions), found once
    for every bulk read in that buffer: a bulk read that stops early costs the next one no
    second scan."""

    __slots__ = ("buf", "a", "_found")

    _BYTES: Final = {"nl": 10, "sp": 32}

    def __init__(self, buf: bytes) -> None:
        if _np is None and not load():
            raise RuntimeError("NumPy and PyArrow are needed to read deliveries in bulk")
        self.buf = buf
        self.a = _np.frombuffer(buf, _np.uint8)
        self._found: dict[str | bytes, Any] = {}

    def after(self, what: str | bytes, pos: int) -> Any:
        """The positions of ``what`` from ``pos`` on: line feeds (``"nl"``), spaces (``"sp"``),
        or (bytes) the starts of lines that start with it."""
        found = self._found.get(what)
        if found is None:
            if isinstance(what, bytes):
                a = self.a
                starts = _np.empty(len(self.after("nl", 0)) + 1, _np.int64)
                starts[0] = 0
                starts[1:] = self.after("nl", 0) + 1
                starts = starts[starts + len(what) <= len(a)]
                maybe = _np.ones(len(starts), bool)
                for j, byte in enumerate(what):
                    maybe &= a[starts + j] == byte
                found = starts[maybe]
            else:
                found = _np.flatnonzero(self.a == self._BYTES[what])
            self._found[what] = found
        return found[int(_np.searchsorted(found, pos)) :]


def read_deliveries(
    buf: bytes,
    pos: int,
    sid: int,
    max_msg: int,
    max_control_line: int,
    patterns: Patterns,
    scan: Scan | None = None,
    window: int = 1 << 20,
) -> DeliveryColumns | None:
    """The run of deliveries at ``pos`` (see the module's doc), or None when there is none to
    read in bulk there. ``sid`` is the subscription of the frame at ``pos``, armed for it;
    ``patterns`` the frame-by-frame reading's patterns."""
    headed = buf.startswith(b"HMSG ", pos)
    if not headed and not buf.startswith(b"MSG ", pos):
        return None
    # The first frame, matched whole: a delivery of a subscription armed for columns, or none.
    first = (patterns.hmsg if headed else patterns.msg)(buf, pos)
    if first is None:
        return None
    if first.group(2) != b"%d" % sid or int(first.group(9 if headed else 8)) > MAX_FRAME or (_np is None and not load()):
        return None
    np = _np
    pa = _pa
    head = b"HMSG " if headed else b"MSG "
    hl = len(head)
    n = len(buf)
    if scan is None or scan.buf is not buf:
        scan = Scan(buf)
    a = scan.a
    nl = scan.after("nl", pos)
    if not len(nl):
        return None
    # 1. Where frames may start (at most ``window`` of them), and the chain of frames that end
    # where the next one starts.
    c = scan.after(head, pos)[:window]
    if not len(c) or c[0] != pos:
        return None
    at_nl = np.searchsorted(nl, c)
    c = c[at_nl < len(nl)]
    if not len(c):
        return None
    lf = nl[at_nl[: len(c)]]
    cr = lf - 1
    sp = scan.after("sp", pos)
    if len(sp) < 4:  # (fewer than a frame's control line holds)
        return None
    last = np.searchsorted(sp, cr) - 1  # (the control line's last space)
    ok = (a[cr] == 13) & (last >= 1)
    last = np.where(ok, last, 1)
    s_last = sp[last]
    ok &= s_last > c + hl
    if headed:  # (both sizes read at once)
        s_hdr = sp[last - 1]
        ok &= (s_hdr > c + hl) & (s_last - s_hdr - 1 <= 7)
        m = len(c)
        sizes, good = _numbers(a, np.concatenate((s_last + 1, s_hdr + 1)), np.concatenate((cr, s_last)), 10)
        ok &= good[:m] & good[m:]
        total = np.where(ok, sizes[:m], 0).astype(np.int64)
        hdr = np.where(ok, sizes[m:], 0).astype(np.int64)
        ok &= hdr <= total
    else:
        total, good = _numbers(a, s_last + 1, cr, 10)
        ok &= good
        total = np.where(ok, total, 0).astype(np.int64)
    ok &= (total <= max_msg) & (cr - c <= max_control_line)
    end = lf + 1 + total + 2
    ok &= end <= n
    inside = np.where(ok, end, 2)
    ok &= (a[inside - 2] == 13) & (a[inside - 1] == 10)
    # Each frame must start where the one before it ends. A line in a payload that looks like
    # a frame breaks that: when the frame before it ends where a later one starts, the lines
    # between are dropped (they are inside that frame) and the chain goes on from there.
    if not headed:
        hdr = total  # (unused for MSG: kept in step with the others)
    linked = np.ones(len(c), bool)
    linked[1:] = end[:-1] == c[1:]
    repairs = 0
    while True:
        chain = ok & linked
        k = len(chain) if chain.all() else int(np.argmin(chain))
        if k == len(c) or k == 0 or not ok[k] and linked[k] or repairs == _MAX_REPAIRS:
            break
        j = int(np.searchsorted(c, end[k - 1]))
        if j >= len(c) or c[j] != end[k - 1]:
            break
        keep = np.r_[0:k, j : len(c)]
        c, lf, cr, total, end, hdr, ok, linked = (x[keep] for x in (c, lf, cr, total, end, hdr, ok, linked))
        linked[k] = True
        repairs += 1
    if k == 0:
        return None
    c, lf, cr, total, end, hdr = c[:k], lf[:k], cr[:k], total[:k], end[:k], hdr[:k]
    # 2. The sid and the ack subject up to the delivery count: the first frame's.
    first_sp = np.searchsorted(sp, c + hl)
    if first_sp[-1] + 2 >= len(sp):
        return None
    s1, s2, s3 = sp[first_sp], sp[first_sp + 1], sp[first_sp + 2]
    same_len = first.end(4) - first.end(1)  # (from the subject's end to the dot after the consumer's name)
    d_count = s1 + same_len  # (that dot, in a frame that starts alike; the match of its rest checks it)
    alike = d_count < s3
    k = len(c) if alike.all() else int(np.argmin(alike))  # (the prefixes of those before the first that cannot be alike)
    data = pa.py_buffer(buf)
    prefixes = _joined(data, s1[:k], d_count[:k] + 1)  # (in order and apart: each within its control line)
    if prefixes != prefixes[: same_len + 1] * k:  # (else all alike: one comparison)
        rows = np.frombuffer(prefixes, np.uint8).reshape(k, same_len + 1)
        alike[:k] &= (rows == rows[0]).all(axis=1)
    if not alike.all():
        k = int(np.argmin(alike))
        if k == 0:
            return None
        c, lf, cr, total, end = c[:k], lf[:k], cr[:k], total[:k], end[:k]
        s1, s2, s3 = s1[:k], s2[:k], s3[:k]
        if headed:
            hdr = hdr[:k]
    # 3. Each frame as the frame-by-frame reading matches it: the first in full; then, as they
    # all hold the first one's sid and ack subject up to the delivery count, each one's subject
    # and what follows that count (each piece of the pattern ends at a delimiter it cannot hold,
    # as for the frame-by-frame reading's own frames that start alike).
    heads_end = lf + 1 + hdr[:k] if headed else lf + 1
    subject_at = c + hl
    if not (s1 > subject_at).all():
        return None
    if k > 1 and patterns.subjects(_joined(data, subject_at, s1)) is None:
        return None
    rests = _joined(data, d_count[:k] + 1, heads_end)
    r = np.frombuffer(rests, np.uint8)
    lens = heads_end - d_count[:k] - 1
    rest_at = np.zeros(k, np.int64)
    np.cumsum(lens[:-1], out=rest_at[1:])
    if headed:
        crlf = (r[:-1] == 13) & (r[1:] == 10)
        blank = heads_end - 4
        if not ((a[blank] == 13) & (a[blank + 1] == 10) & (a[blank + 2] == 13) & (a[blank + 3] == 10)).all():
            return None
        if int((crlf[:-2] & crlf[2:]).sum()) != k:  # (each block's empty line, and no other)
            return None
        one_line = int(crlf.sum()) == 4 * k  # (the control line's, NATS/1.0's, one line's, the last)
    else:
        one_line = False
    matrices = _rests_match(rests, r, lens, rest_at, patterns.hmsg_rests if headed else patterns.msg_rests, headed)
    if matrices is None:
        return None
    # 4. The numbers; the rest is taken out when asked for.
    # The stream sequence, consumer sequence and time stamp of each: from the matrices' columns
    # when they hold every row, else in one cast (each rest starts with the ack subject's five
    # numbers, matched, so its first four dots part them).
    if sum(a1 - a0 for a0, a1, _, _ in matrices) == k:
        nums = np.empty((k, 3), np.uint64)
        for a0, a1, m, spans in matrices:
            for j, (b, e) in enumerate(spans):
                nums[a0:a1, j] = _column_numbers(m[:, b:e])
    else:
        dots = np.flatnonzero(r == 46)
        nums_dots = dots[np.searchsorted(dots, rest_at)[:, None] + np.arange(4)[None, :]]
        nums = _checked_numbers(pa.py_buffer(rests), (nums_dots[:, :3] + 1).ravel(), nums_dots[:, 1:].ravel()).to_numpy().reshape(k, 3)
    name = patterns.consumer_name(first.group(4))
    sizes = total + (s1 - subject_at) + (s3 - s2 - 1)
    return DeliveryColumns(
        buf=buf,
        end=int(end[-1]),
        sid=sid,
        headed=headed,
        consumer=name,
        seqs=nums[:, 0].tolist(),
        cseqs=nums[:, 1].tolist(),
        stamps=pa.array(nums[:, 2]),
        subject_at=subject_at,
        subject_end=s1,
        reply_at=s2 + 1,
        reply_end=s3,
        block_at=lf + 1,
        payload_at=heads_end,
        payload_end=lf + 1 + total,
        sizes=sizes,
        size=int(sizes.sum()),
        one_line=one_line,
    )
