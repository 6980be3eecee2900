"""NATS message headers: the ``Headers`` multi-dict, strict encoding and strict parsing.

Wire form of a header block::

    NATS/1.0[ <3-digit status>[ <description>]]\r\n
    Key: Value\r\n            (zero or more, keys may repeat)
    \r\n

Keys are RFC 7230 tokens. Values sent may hold any text except CR, LF and other control
characters (TAB excepted); values received may also hold control characters other than CR and
LF, as other clients send them (the server passes a header block through unread), so one
message with an odd header does not cost the connection. Invalid input raises
:class:`BadHeaderError` when encoding and :class:`RemoteProtocolError` when parsing; nothing is
ever rewritten or sanitized. Headers of the wrong shape altogether (a number, a str, bytes) are
an :class:`InvalidOptionError` naming ``headers``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, Union, cast

from .errors import BadHeaderError, InvalidOptionError, RemoteProtocolError

__all__ = ["Headers", "HeadersInput", "encode_headers", "parse_header_block", "HEADER_PREFIX"]

HEADER_PREFIX = b"NATS/1.0"
_EMPTY_BLOCK = b"NATS/1.0\r\n\r\n"

_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Control characters forbidden in values sent: everything below 0x20 except TAB, and DEL.
_BAD_VALUE_CHARS = frozenset(chr(c) for c in range(0x20) if c != 0x09) | {"\x7f"}
# In values received only CR and LF are refused (a lone one: the block's lines end in CR LF).
_LINE_BREAKS = frozenset("\r\n")

# The common block, checked and split by two regular expressions instead of a Python loop per
# line (parse_header_block's fast path): no status, every line "Key: Value" with a token key and
# a value without CR or LF that does not end in a space or tab. Whatever else the block is, the
# general parser decides, so the result is always the general parser's.
_TOKEN_RE: Final = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_VALUE_CHAR_RE: Final = r"[^\r\n]"
# (Possessive quantifiers: the same matches, as a value cannot hold the CR that ends it and a
# line cannot start with one; without backtracking points the engine does less per character.)
_COMMON_BLOCK: Final = re.compile(
    r"NATS/1\.0\r\n(?:" + _TOKEN_RE + "+:" + _VALUE_CHAR_RE + r"*+(?<![ \t])\r\n)*+\r\n"
)
_COMMON_LINE: Final = re.compile("(" + _TOKEN_RE + r"):[ \t]*(" + _VALUE_CHAR_RE + r"*)\r\n")
# The block of a direct get reply as nats-server writes it (the message's own headers, if any,
# then the server's, in this order, one space after each colon, values of printable ASCII; a
# batch's cursor headers after them). The own lines are lines of the common block whose key is
# none of the server's (in any case); every server line it accepts is one too (a literal token
# key, a value with no white space or control character). A block that starts with the server's
# headers is recognised and read in the one match that also checks it (it replaces the common
# check); one with own lines first passes the common check and is matched when a direct get
# reader asks (:meth:`Headers._direct_layout`), so other messages with headers pay nothing. The
# groups are the own lines' text, then the server's values. Any other block (a subject outside
# ASCII, other spacing) is read pair by pair, so the result is always the general parser's.
_DIRECT_MARK: Final = "\r\nNats-Stream: "
_DIRECT_VALUE: Final = r": ([!-~]++)\r\n"


def direct_own_lines_re(value_char: str) -> str:
    """The group of a direct get reply's own header lines (before the server's): lines of the
    common form whose key is none of the server's names (in any case), their values made of
    ``value_char``. (The connection's direct lane reads them with a narrower ``value_char``.)"""
    return (
        r"((?:(?!(?i:nats-(?:stream|subject|sequence|time-stamp|num-pending|last-sequence|upto-sequence)):)"
        + _TOKEN_RE + ":" + value_char + r"*+(?<![ \t])\r\n)*+)"
    )


_DIRECT_OWN: Final = direct_own_lines_re(_VALUE_CHAR_RE)
# (the time stamp in the form nats-server 2.10+ writes, RFC 3339 in UTC with 1 to 9 fractional
# digits: its reader then checks only that the date exists, see jscore.times.parse_server_stamp)
DIRECT_STAMP_RE: Final = r": ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{1,9}Z)\r\n"
_DIRECT_SERVER: Final = (
    "Nats-Stream" + _DIRECT_VALUE + "Nats-Subject" + _DIRECT_VALUE + "Nats-Sequence" + _DIRECT_VALUE
    + "Nats-Time-Stamp" + DIRECT_STAMP_RE + "(?:Nats-Num-Pending" + _DIRECT_VALUE + ")?(?:Nats-Last-Sequence"
    + _DIRECT_VALUE + ")?(?:Nats-UpTo-Sequence" + _DIRECT_VALUE + r")?\r\n"
)  # fmt: skip
_DIRECT_LAYOUT: Final = re.compile(r"NATS/1\.0\r\n" + _DIRECT_OWN + _DIRECT_SERVER)
# (a block that starts with the server's headers, the common case: the same groups, the own
# lines empty, without trying them)
_DIRECT_START: Final = "NATS/1.0\r\nNats-Stream: "
_DIRECT_LAYOUT_BARE: Final = re.compile(r"NATS/1\.0\r\n()" + _DIRECT_SERVER)
_FIRST_LINE: Final = len(b"NATS/1.0\r\n")


class Headers:
    """An ordered, case-preserving multi-dict of header keys to string values.

    Lookups (``h[key]``, ``get``, ``get_all``, ``in``) are case-insensitive, as in HTTP; the
    case given is what goes on the wire. ``h[key]`` and ``get`` give the first value.
    """

    __slots__ = ("_pairs", "_block", "_layout")

    def __init__(self, items: HeadersInput | None = None) -> None:
        self._pairs: list[tuple[str, str]] = []
        # A block the parser checked but has not split into pairs yet (split on first use:
        # most messages' headers are never read, and the direct get reads its own from it).
        # While it is set, _pairs may be unset: read the pairs through _items.
        self._block: str | None = None
        # The values of a direct get reply's block, read by the match that checked it (None: not
        # tried yet; empty: not in the server's layout).
        self._layout: tuple[str | None, ...] | None = None
        if items is not None:
            self._pairs.extend(_iter_input(items))

    @property
    def _items(self) -> list[tuple[str, str]]:
        block = self._block
        if block is not None:
            self._pairs = _COMMON_LINE.findall(block, _FIRST_LINE)
            self._block = None
        return self._pairs

    @_items.setter
    def _items(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs
        self._block = None

    def _unsplit(self) -> str | None:
        """The whole block text (``NATS/1.0\\r\\n ... \\r\\n\\r\\n``) of headers the parser
        accepted through its common form (no status; every line ``Key: Value`` with no CR or LF
        in the value and no trailing space or tab) and that were not split or changed since; else
        None. For readers of a well-known server layout (:mod:`jscore.jsapi`)."""
        return self._block

    def _direct_layout(self) -> tuple[str | None, ...] | None:
        """When the parser recognised the block as a direct get reply in nats-server's layout
        and it was not split or changed since: the text of the message's own header lines
        (``""`` when it had none; each line ``Key: Value\\r\\n`` of the common form, see
        :func:`headers_of_lines`), then the values of ``Nats-Stream``, ``Nats-Subject``,
        ``Nats-Sequence``, ``Nats-Time-Stamp``, ``Nats-Num-Pending``, ``Nats-Last-Sequence``
        and ``Nats-UpTo-Sequence`` (None where absent). Else None (read the pairs). The time
        stamp is then in the form :func:`jscore.times.parse_server_stamp` reads.

        A block that starts with the server's headers was matched by the parser; one with the
        message's own headers first is matched here, on first use (only direct get readers ask,
        so no other message pays for it)."""
        block = self._block
        if block is None:
            return None
        layout = self._layout
        if layout is None:
            m = _DIRECT_LAYOUT.fullmatch(block) if _DIRECT_MARK in block else None
            layout = self._layout = m.groups() if m is not None else ()
        return layout or None

    def _direct_fields(self) -> tuple[str | None, ...] | None:
        """The server's values of :meth:`_direct_layout` (without the own lines), or None."""
        layout = self._direct_layout()
        return None if layout is None else layout[1:]

    # -- reading ---------------------------------------------------------------------------

    def __getitem__(self, key: str) -> str:
        k = key.lower()
        for name, value in self._items:
            if name.lower() == k:
                return value
        raise KeyError(key)

    def get(self, key: str, default: str | None = None) -> str | None:
        k = key.lower()
        for name, value in self._items:
            if name.lower() == k:
                return value
        return default

    def get_all(self, key: str) -> list[str]:
        k = key.lower()
        return [value for name, value in self._items if name.lower() == k]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        k = key.lower()
        return any(name.lower() == k for name, _ in self._items)

    def items(self) -> list[tuple[str, str]]:
        """Every (key, value) pair, in order, repeated keys included."""
        return list(self._items)

    def keys(self) -> list[str]:
        """The distinct keys, in order of first appearance."""
        seen: dict[str, str] = {}
        for name, _ in self._items:
            seen.setdefault(name.lower(), name)
        return list(seen.values())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __bool__(self) -> bool:
        return self._block is not None or bool(self._pairs)  # (a checked block has a line)

    # -- writing ---------------------------------------------------------------------------

    def add(self, key: str, value: str) -> None:
        """Append a value, keeping earlier values of the same key."""
        self._items.append((key, value))

    def __setitem__(self, key: str, value: str) -> None:
        """Replace every value of ``key`` with this one."""
        k = key.lower()
        self._items = [(n, v) for n, v in self._items if n.lower() != k]
        self._items.append((key, value))

    def __delitem__(self, key: str) -> None:
        k = key.lower()
        kept = [(n, v) for n, v in self._items if n.lower() != k]
        if len(kept) == len(self._items):
            raise KeyError(key)
        self._items = kept

    def copy(self) -> Headers:
        h = Headers()
        h._items = list(self._items)
        return h

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return self._items == other._items
        return NotImplemented

    def __hash__(self) -> int:  # mutable
        raise TypeError("Headers is not hashable")

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


_new_headers: Final = object.__new__

HeadersInput = Union[Headers, Mapping[str, Union[str, Sequence[str]]], Iterable[tuple[str, str]]]


def _iter_input(items: HeadersInput) -> Iterator[tuple[str, str]]:
    if isinstance(items, Headers):
        yield from items._items
        return
    if isinstance(items, Mapping):
        for key, value in items.items():
            if isinstance(value, str):
                yield key, value
            elif isinstance(value, (list, tuple)):
                for v in value:
                    yield key, v
            else:
                raise BadHeaderError(f"header {key!r}: value must be a str or a sequence of str, got {type(value).__name__}")
        return
    # The shape is checked on the error path only (no cost for good headers): a value that is
    # not iterable, or a str / bytes (iterable, but no pairs; an empty one yields nothing).
    try:
        for pair in items:
            if not isinstance(pair, tuple) or len(pair) != 2:
                if items.__class__ in _NOT_PAIRS:
                    raise _shape_error(items)
                raise BadHeaderError(f"headers: expected (key, value) pairs, got {pair!r}")
            yield pair
    except TypeError as exc:
        if not hasattr(items, "__iter__"):
            raise _shape_error(items) from exc
        raise
    if items.__class__ in _NOT_PAIRS:
        raise _shape_error(items)


_NOT_PAIRS = frozenset({str, bytes, bytearray, memoryview})


def _shape_error(items: object) -> InvalidOptionError:
    return InvalidOptionError(
        "headers must be a Headers, a mapping of str to str (or to a list of str) or a sequence "
        f"of (key, value) pairs, got {type(items).__name__}"
    )


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise BadHeaderError(f"header key must be a str, got {type(key).__name__}")
    if not key:
        raise BadHeaderError("header key must not be empty")
    for ch in key:
        if ch not in _TOKEN_CHARS:
            raise BadHeaderError(f"header key {key!r} has an invalid character {ch!r}")
    return key


def _check_value(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise BadHeaderError(f"header {key!r}: value must be a str, got {type(value).__name__}")
    if not _BAD_VALUE_CHARS.isdisjoint(value):
        raise BadHeaderError(f"header {key!r}: value {value!r} has a control character (CR/LF are never rewritten)")
    return value


def encode_headers(headers: HeadersInput | None) -> bytes:
    """Encode headers to a NATS header block, validating every key and value.

    Returns ``b""`` for ``None``. An empty collection gives the minimal block ``NATS/1.0\\r\\n\\r\\n``.
    """
    if headers is None:
        return b""
    parts = ["NATS/1.0\r\n"]
    for key, value in _iter_input(headers):
        k = _check_key(key)
        parts.append(f"{k}: {_check_value(k, value)}\r\n")
    parts.append("\r\n")
    try:
        return "".join(parts).encode()
    except UnicodeEncodeError:  # a lone surrogate in a value
        raise BadHeaderError("a header value is not encodable as UTF-8 (lone surrogate)") from None


def parse_header_block(block: bytes) -> tuple[Headers, int | None, str | None]:
    """Parse a whole header block (``NATS/1.0 ... \\r\\n\\r\\n``).

    Returns ``(headers, status, description)``; status is ``None`` for a plain header block.
    Raises :class:`RemoteProtocolError` on anything malformed.
    """
    if not block.startswith(HEADER_PREFIX):
        raise RemoteProtocolError(f"header block does not start with NATS/1.0: {block[:16]!r}")
    if not block.endswith(b"\r\n\r\n"):
        raise RemoteProtocolError("header block does not end with an empty line")
    if block == _EMPTY_BLOCK:
        return Headers(), None, None
    try:
        text = block.decode()
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError("header block is not valid UTF-8") from exc
    layout = None
    if text.startswith(_DIRECT_START):
        m = _DIRECT_LAYOUT_BARE.fullmatch(text)
        if m is not None:
            layout = m.groups()
    if layout is not None or _COMMON_BLOCK.fullmatch(text) is not None:
        return _checked_block(text, layout), None, None
    return _parse_general(text[:-4])


def _checked_block(text: str, layout: tuple[str | None, ...] | None) -> Headers:
    """Headers of a block of the common form, split on first use."""
    headers = _new_headers(Headers)  # (what Headers() makes, without its __init__ call)
    # (no _pairs yet: every reader goes through _items, which sets it from the block first; one
    # allocation the garbage collector tracks less per message)
    headers._block = text
    headers._layout = layout
    return headers


def checked_block_headers(text: str) -> Headers:
    """The headers of a block's text that :func:`parse_header_block` would read as checked
    (:func:`common_block_re` with no ``Nats-Stream`` first line), split on first use: what it
    gives for the same block, without the checks (a lane of the connection's parser made them)."""
    return _checked_block(text, None)


def common_block_re(value_char: str) -> str:
    """A header block of one or more lines of the common form, values made of ``value_char``
    (narrower than :func:`parse_header_block` allows), that does not start ``Nats-Stream: ``:
    a block :func:`parse_header_block` reads as checked, with no direct get layout to look for.
    (The connection's delivery lane matches it as bytes.)"""
    return r"NATS/1\.0\r\n(?!Nats-Stream: )(?:" + _TOKEN_RE + ":" + value_char + r"*+(?<![ \t])\r\n)++\r\n"


def headers_of_lines(lines: str) -> Headers:
    """The headers of header lines the parser checked (each ``Key: Value\\r\\n`` of its
    common form: the own lines of :meth:`Headers._direct_layout`), split on first use."""
    return _checked_block("NATS/1.0\r\n" + lines + "\r\n", None)


def bulk_headers(headers: Headers | None) -> Headers | str | None:
    """Headers as a bulk reader keeps them: the text of their lines (each ``Key: Value\\r\\n``,
    what :func:`header_columns` and :func:`header_lines_dict` read) while they are the parser's
    checked block, not split or changed since; else the headers themselves. Text holds no
    object the garbage collector tracks, so a reader's rows waiting to become a batch cost its
    collections nothing."""
    if headers is None:
        return None
    block = headers._block
    return headers if block is None else block[_FIRST_LINE:-2]


def header_lines_dict(lines: str) -> dict[str, list[str]] | None:
    """The values of header lines the parser checked (the own lines of
    :meth:`Headers._direct_layout`) by key, in the order given, keys as sent; None for none."""
    if not lines:
        return None
    return _by_key(_COMMON_LINE.findall(lines))


def _by_key(pairs: list[tuple[str, str]]) -> dict[str, list[str]] | None:
    if not pairs:
        return None
    out: dict[str, list[str]] = {}
    for key, value in pairs:
        have = out.get(key)
        if have is None:
            out[key] = [value]
        else:
            have.append(value)
    return out


def headers_dict(headers: Headers) -> dict[str, list[str]] | None:
    """The values of ``headers`` by key, in order, each key exactly as sent (two spellings of a
    name are two keys, as in :meth:`Headers.items`); None for none. Headers the parser checked
    and nobody split yet are read straight from their block text, without making the pairs (a
    bulk reader's column)."""
    block = headers._block
    return _by_key(_COMMON_LINE.findall(block, _FIRST_LINE) if block is not None else headers._pairs)


def header_columns(
    items: Sequence[Headers | str | None],
) -> tuple[list[int | None], list[str], list[int] | None, list[str]]:
    """The headers of a batch of messages as the columns of a map from key to values (a bulk
    reader's Arrow column): per item the number of keys (None: no headers), every item's keys
    in order, per key its number of values (None: one each), the values in order. Item by item
    the same as :func:`headers_dict` (:class:`Headers`) or :func:`header_lines_dict` (the
    checked header lines of a direct get or a bulk reader, a ``str``). When every item with
    headers has exactly one line as the parser checked it, the lines are split together: when
    they are all text and read ``Key: value`` with one key, as one text (:func:`_one_key_lines`);
    by slicing when they all read so otherwise; else by one match over the batch."""
    if items and set(map(type, items)) == {str} and "" not in items:
        one = _one_key_lines(cast("Sequence[str]", items))
        if one is not None:
            return one
    counts: list[int | None] = []
    lines: list[str] = []
    for h in items:
        if h is None:
            counts.append(None)
            continue
        if isinstance(h, str):
            if not h:
                counts.append(None)
                continue
            if h.count("\r\n") != 1:
                return _header_columns_general(items)
            lines.append(h)
        else:
            block = h._block
            if block is None or block.count("\r\n") != 3:  # NATS/1.0, the line, the empty one
                return _header_columns_general(items)
            lines.append(block[_FIRST_LINE:-2])
        counts.append(1)
    if not lines:
        return counts, [], None, []
    # The usual batch: one key, written "Key: value" (a writer's Nats-Msg-Id): no match at all.
    first = lines[0]
    key = first[: first.find(":")]
    head = key + ": "
    n = len(head)
    if all(line.startswith(head) for line in lines):
        values = [line[n:-2] for line in lines]
        if not any(v[:1] in " \t" for v in values):  # (else the match strips the white space)
            return counts, [key] * len(lines), None, values
    pairs = _COMMON_LINE.findall("".join(lines))
    if len(pairs) != len(lines):  # (cannot happen to checked lines; the general path decides)
        return _header_columns_general(items)
    return counts, [k for k, _ in pairs], None, [v for _, v in pairs]


def _one_key_lines(
    items: Sequence[str],
) -> tuple[list[int | None], list[str], list[int] | None, list[str]] | None:
    """:func:`header_columns` of checked header lines (none empty) when each is one line
    ``Key: value`` with the same key and a value that does not start with white space (a
    writer's ``Nats-Msg-Id``, as a bulk reader keeps it): counted and split over the batch's
    text at once, no step per item; None when they are not."""
    n = len(items)
    text = "\r\n" + "".join(items)  # (checked lines end with CR LF, and hold no other CR or LF)
    if text.count("\n") != n + 1:  # (one line each: every item holds at least one; LF only ends a line)
        return None
    first = items[0]
    key = first[: first.find(":")]
    head = "\r\n" + key + ": "
    if text.count(head) != n or head + " " in text or head + "\t" in text:
        return None  # (another key, or a value the common line's match would strip)
    # (head starts with the CR LF before a line, so its n places are the n lines' starts)
    return [1] * n, [key] * n, None, text[len(head) : -2].split(head)


def _header_columns_general(
    items: Sequence[Headers | str | None],
) -> tuple[list[int | None], list[str], list[int] | None, list[str]]:
    counts: list[int | None] = []
    keys: list[str] = []
    value_counts: list[int] = []
    values: list[str] = []
    for h in items:
        if h is None:
            by_key = None
        elif isinstance(h, str):
            by_key = header_lines_dict(h)
        else:
            by_key = headers_dict(h)
        if not by_key:
            counts.append(None)
            continue
        counts.append(len(by_key))
        for key, vals in by_key.items():
            keys.append(key)
            value_counts.append(len(vals))
            values.extend(vals)
    return counts, keys, value_counts, values


def _parse_general(text: str) -> tuple[Headers, int | None, str | None]:
    """:func:`parse_header_block` of any block (its text without the closing CRLF CRLF)."""
    lines = text.split("\r\n")
    first = lines[0]
    status: int | None = None
    description: str | None = None
    if len(first) > 8:
        if first[8] != " ":
            raise RemoteProtocolError(f"bad header version line {first[:32]!r}")
        rest = first[9:]
        code = rest[:3]
        if len(code) != 3 or not (code.isascii() and code.isdigit()):
            raise RemoteProtocolError(f"bad status code in {first[:32]!r}")
        status = int(code)
        if len(rest) > 3:
            if rest[3] != " ":
                raise RemoteProtocolError(f"bad status line {first[:64]!r}")
            description = rest[4:].strip()
            if not _BAD_VALUE_CHARS.isdisjoint(description):
                raise RemoteProtocolError("control character in status description")
    headers = Headers()
    items = headers._items
    for line in lines[1:]:
        if not line:
            raise RemoteProtocolError("empty line inside a header block")
        if line[0] in " \t":
            raise RemoteProtocolError("folded (continuation) header lines are not allowed")
        key, sep, value = line.partition(":")
        if not sep:
            raise RemoteProtocolError(f"header line without a colon: {line[:64]!r}")
        if not key or not _TOKEN_CHARS.issuperset(key):
            raise RemoteProtocolError(f"invalid header key {key[:64]!r}")
        value = value.strip(" \t")
        if not _LINE_BREAKS.isdisjoint(value):
            raise RemoteProtocolError(f"a lone CR or LF in header {key!r}")
        items.append((key, value))
    return headers, status, description
