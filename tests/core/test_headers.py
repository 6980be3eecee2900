"""Headers: the multi-dict, strict encoding (reject, never rewrite) and strict parsing."""

from __future__ import annotations

import re

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jscore.errors import BadHeaderError, RemoteProtocolError
from jscore.headers import (
    checked_block_headers,
    headers_dict,
    Headers,
    HeadersInput,
    bulk_headers,
    encode_headers,
    header_columns,
    header_lines_dict,
    headers_of_lines,
    parse_header_block,
)

SETTINGS = settings(max_examples=200, deadline=None)

# --------------------------------------------------------------------------- the multi-dict


def test_lookup_is_case_insensitive_and_case_is_preserved() -> None:
    h = Headers()
    h.add("Nats-Msg-Id", "1")
    assert h["nats-msg-id"] == "1"
    assert h["NATS-MSG-ID"] == "1"
    assert h.get("nAtS-mSg-Id") == "1"
    assert "nats-msg-id" in h
    assert h.items() == [("Nats-Msg-Id", "1")]
    assert h.keys() == ["Nats-Msg-Id"]
    assert encode_headers(h) == b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n"


def test_missing_keys() -> None:
    h = Headers({"A": "1"})
    with pytest.raises(KeyError):
        h["B"]
    assert h.get("B") is None
    assert h.get("B", "d") == "d"
    assert h.get_all("B") == []
    assert "B" not in h
    assert 1 not in h  # type: ignore[operator]
    with pytest.raises(KeyError):
        del h["B"]


def test_multi_values_and_get_all() -> None:
    h = Headers()
    h.add("A", "1")
    h.add("b", "x")
    h.add("a", "2")
    assert h["A"] == "1", "h[key] gives the first value"
    assert h.get_all("a") == ["1", "2"]
    assert h.items() == [("A", "1"), ("b", "x"), ("a", "2")]
    assert h.keys() == ["A", "b"]
    assert list(h) == ["A", "b"]
    assert len(h) == 2
    assert encode_headers(h) == b"NATS/1.0\r\nA: 1\r\nb: x\r\na: 2\r\n\r\n"


def test_setitem_replaces_every_value() -> None:
    h = Headers([("A", "1"), ("B", "x"), ("a", "2")])
    h["A"] = "3"
    assert h.get_all("a") == ["3"]
    assert h.items() == [("B", "x"), ("A", "3")]


def test_delitem_removes_every_value() -> None:
    h = Headers([("A", "1"), ("B", "x"), ("a", "2")])
    del h["a"]
    assert h.items() == [("B", "x")]
    assert "A" not in h


def test_bool_len_copy() -> None:
    assert not Headers()
    assert len(Headers()) == 0
    h = Headers({"A": "1"})
    assert h
    c = h.copy()
    c.add("B", "2")
    assert h.items() == [("A", "1")], "copy must not share storage"
    assert c.items() == [("A", "1"), ("B", "2")]


def test_equality() -> None:
    assert Headers({"A": "1"}) == Headers([("A", "1")])
    assert Headers({"A": "1"}) != Headers({"A": "2"})
    assert Headers([("A", "1"), ("A", "2")]) != Headers([("A", "1")])
    assert Headers({"A": "1"}) != {"A": "1"}
    assert Headers() == Headers()
    with pytest.raises(TypeError):
        hash(Headers())


@pytest.mark.parametrize(
    "given",
    [
        Headers([("A", "1"), ("A", "2"), ("B", "3")]),
        {"A": ["1", "2"], "B": "3"},
        {"A": ("1", "2"), "B": ["3"]},
        [("A", "1"), ("A", "2"), ("B", "3")],
        iter([("A", "1"), ("A", "2"), ("B", "3")]),
    ],
    ids=["headers", "mapping-list", "mapping-tuple", "pairs", "iterator"],
)
def test_input_forms(given: HeadersInput) -> None:
    h = Headers(given)
    assert h.items() == [("A", "1"), ("A", "2"), ("B", "3")]
    assert encode_headers(Headers(h)) == b"NATS/1.0\r\nA: 1\r\nA: 2\r\nB: 3\r\n\r\n"


def test_encode_accepts_every_input_form_directly() -> None:
    expected = b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n"
    assert encode_headers({"A": ["1", "2"]}) == expected
    assert encode_headers([("A", "1"), ("A", "2")]) == expected
    assert encode_headers(Headers([("A", "1"), ("A", "2")])) == expected


@pytest.mark.parametrize("given", [{"A": 1}, {"A": b"x"}, {"A": None}, ["A"], [("A", "1", "2")]], ids=repr)
def test_bad_input_forms(given: object) -> None:
    with pytest.raises(BadHeaderError):
        encode_headers(given)  # type: ignore[arg-type]


def test_headers_constructor_does_not_alias_a_headers_input() -> None:
    src = Headers({"A": "1"})
    h = Headers(src)
    h.add("B", "2")
    assert src.items() == [("A", "1")]


# --------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    "key", ["", ":", "a b", "a:b", "\x00", "→", "ä", "a\r\nb", "a\n", "a\t", "(a)", "a/b", "a=b", "a@b", "[", "{"], ids=repr
)
def test_encode_rejects_bad_keys(key: str) -> None:
    with pytest.raises(BadHeaderError):
        encode_headers({key: "v"})


@pytest.mark.parametrize(
    "value",
    ["\r", "\n", "a\r\nB: injected", "a\rb", "a\nb", "\r\n", "\x00", "a\x01", "\x7f", "a\x1b[0m", "\ud800"],
    ids=repr,
)
def test_encode_rejects_bad_values(value: str) -> None:
    with pytest.raises(BadHeaderError):
        encode_headers({"Key": value})
    with pytest.raises(BadHeaderError):
        encode_headers([("Key", "ok"), ("Key", value)])


@pytest.mark.parametrize("key", [None, 1, b"A"], ids=repr)
def test_encode_rejects_non_str_keys(key: object) -> None:
    with pytest.raises(BadHeaderError):
        encode_headers([(key, "v")])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("value", "wire"),
    [("", b"A: \r\n"), ("a\tb", b"A: a\tb\r\n"), ("  x  ", b"A:   x  \r\n"), ("ä→", "A: ä→\r\n".encode()), (":", b"A: :\r\n")],
    ids=repr,
)
def test_encode_never_rewrites_values(value: str, wire: bytes) -> None:
    assert encode_headers({"A": value}) == b"NATS/1.0\r\n" + wire + b"\r\n"


def test_encode_none_and_empty() -> None:
    assert encode_headers(None) == b""
    assert encode_headers({}) == b"NATS/1.0\r\n\r\n"
    assert encode_headers(Headers()) == b"NATS/1.0\r\n\r\n"


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.text(alphabet="abcXYZ-_019!#$%&'*+.^`|~", min_size=1, max_size=10),
            st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
        ),
        max_size=6,
    )
)
def test_encoded_block_ends_with_exactly_one_blank_line(pairs: list[tuple[str, str]]) -> None:
    try:
        block = encode_headers(pairs)
    except BadHeaderError:
        assert any(any(c in v for c in "\r\n\x00\x7f") or any(ord(c) < 32 and c != "\t" for c in v) for _, v in pairs)
        return
    assert block.startswith(b"NATS/1.0\r\n")
    assert block.endswith(b"\r\n\r\n")
    assert not block.endswith(b"\r\n\r\n\r\n")
    assert block.count(b"\r\n\r\n") == 1
    assert block.count(b"\r\n") == len(pairs) + 2, "one line per pair: nothing injected"


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("block", "status", "description"),
    [
        (b"NATS/1.0\r\n\r\n", None, None),
        (b"NATS/1.0 503\r\n\r\n", 503, None),
        (b"NATS/1.0 409\r\n\r\n", 409, None),
        (b"NATS/1.0 100 Idle Heartbeat\r\n\r\n", 100, "Idle Heartbeat"),
        (b"NATS/1.0 409 Consumer Deleted\r\n\r\n", 409, "Consumer Deleted"),
        (b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n", 408, "Request Timeout"),
        (b"NATS/1.0 204 EOB\r\n\r\n", 204, "EOB"),
    ],
)
def test_status_lines(block: bytes, status: int | None, description: str | None) -> None:
    _, got_status, got_description = parse_header_block(block)
    assert (got_status, got_description) == (status, description)


def test_idle_heartbeat_block() -> None:
    headers, status, description = parse_header_block(
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\nNats-Last-Stream: 0\r\n\r\n"
    )
    assert (status, description) == (100, "Idle Heartbeat")
    assert headers.items() == [("Nats-Last-Consumer", "0"), ("Nats-Last-Stream", "0")]


def test_parse_multi_valued_keys_and_whitespace() -> None:
    headers, status, _ = parse_header_block(b"NATS/1.0\r\nA: 1\r\na:2\r\nB:   x y \t\r\nNats-Pin-Id: p\r\nNats-Pin-Id: q\r\n\r\n")
    assert status is None
    assert headers.get_all("A") == ["1", "2"]
    assert headers["b"] == "x y", "optional whitespace around a value is not part of it"
    assert headers.get_all("nats-pin-id") == ["p", "q"]
    assert headers.items()[1] == ("a", "2"), "the key case received is kept"


def test_parse_keeps_odd_values_verbatim() -> None:
    headers, _, _ = parse_header_block(
        b"NATS/1.0\r\nNats-Pending-Messages: -5\r\nNats-Pending-Messages: 1e309\r\nNats-Pending-Bytes: 18446744073709551616\r\n\r\n"
    )
    assert headers.get_all("Nats-Pending-Messages") == ["-5", "1e309"]
    assert headers["Nats-Pending-Bytes"] == "18446744073709551616"


@pytest.mark.parametrize(
    "block",
    [
        b"",
        b"NATS/1.0",
        b"NATS/1.0\r\n",
        b"NATS/2.0\r\n\r\n",
        b"NATS/1.1\r\n\r\n",
        b"nats/1.0\r\n\r\n",
        b"XNATS/1.0\r\n\r\n",
        b"NATS/1.00\r\n\r\n",
        b"NATS/1.0 4O9 X\r\n\r\n",
        b"NATS/1.0 42\r\n\r\n",
        b"NATS/1.0 1234\r\n\r\n",
        b"NATS/1.0 \r\n\r\n",
        b"NATS/1.0\t503\r\n\r\n",
        b"NATS/1.0 503\x01\r\n\r\n",
        b"NATS/1.0 503 a\x01b\r\n\r\n",
        b"NATS/1.0\r\nA: b\r\n",
        b"NATS/1.0\r\nNoColon\r\n\r\n",
        b"NATS/1.0\r\n: v\r\n\r\n",
        b"NATS/1.0\r\nA B: c\r\n\r\n",
        b"NATS/1.0\r\nA: b\r\n c\r\n\r\n",
        b"NATS/1.0\r\nA: b\r\n\tc\r\n\r\n",
        b"NATS/1.0\r\nA: \xff\xfe\r\n\r\n",
        b"NATS/1.0\r\n\xff: b\r\n\r\n",
        b"NATS/1.0\r\nA: b\r\n\r\nC: d\r\n\r\n",
        b"NATS/1.0\r\nA: b\nC: d\r\n\r\n",
        b"NATS/1.0\r\nA: b\rC: d\r\n\r\n",
        b"NATS/1.0\r\n\r\n\r\n",
        "NATS/1.0\r\n→: b\r\n\r\n".encode(),
    ],
    ids=repr,
)
def test_parse_rejects_malformed_blocks(block: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_header_block(block)


@pytest.mark.parametrize(
    ("block", "value"),
    [
        (b"NATS/1.0\r\nA: b\x00\r\n\r\n", "b\x00"),
        (b"NATS/1.0\r\nNats-Subject: a\x01b\r\n\r\n", "a\x01b"),
        (b"NATS/1.0\r\nA: \x1b[0mred\x7f\r\n\r\n", "\x1b[0mred\x7f"),
        (b"NATS/1.0\r\nA:\t\x0bv\x0c \r\n\r\n", "\x0bv\x0c"),
    ],
    ids=repr,
)
def test_parse_accepts_control_characters_in_values(block: bytes, value: str) -> None:
    """Other clients send them (the server passes header blocks through unread): a message with
    one is delivered as it is, rather than costing the connection (nats.go passes such a message
    through too). Sending one is still refused (BadHeaderError)."""
    headers, status, _ = parse_header_block(block)
    assert status is None
    assert headers.get_all(headers.keys()[0]) == [value]
    with pytest.raises(BadHeaderError):
        encode_headers(headers)


_keys = st.text(alphabet="abcXYZ-_019!#$%&'*+.^`|~", min_size=1, max_size=16)
_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x7f" + "".join(map(chr, range(32)))),
    max_size=24,
).filter(lambda v: v == v.strip(" \t")) | st.sampled_from(["", "a\tb", "x : y", "ä→日本", "\u00a0pad\u00a0"])


@SETTINGS
@given(st.lists(st.tuples(_keys, _values), max_size=8))
def test_round_trip_encode_parse(pairs: list[tuple[str, str]]) -> None:
    block = encode_headers(pairs)
    headers, status, description = parse_header_block(block)
    assert (status, description) == (None, None)
    assert headers.items() == pairs
    assert headers == Headers(pairs)
    assert encode_headers(headers) == block


def _by_key(pairs: list[tuple[str, str]]) -> dict[str, list[str]] | None:
    out: dict[str, list[str]] = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return out or None


@SETTINGS
@given(st.lists(st.tuples(_keys, _values), max_size=8), st.booleans())
def test_headers_dict_reads_a_block_as_its_pairs(pairs: list[tuple[str, str]], split_first: bool) -> None:
    """headers_dict (a bulk reader's column) gives the pairs by key, keys as sent, whether the
    parsed block was split already or not, and for headers built by hand."""
    headers, _, _ = parse_header_block(encode_headers(pairs))
    if split_first:
        headers.items()
    assert headers_dict(headers) == _by_key(pairs)
    assert headers_dict(Headers(pairs)) == _by_key(pairs)


@pytest.mark.parametrize(
    "block",
    [
        b"NATS/1.0\r\nA: 1\r\na: 2\r\nB:  spaced \r\n\r\n",  # the general parser (a trailing space)
        b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: x.y\r\nNats-Sequence: 3\r\n"
        b"Nats-Time-Stamp: 2026-11-28T12:00:00.123456789Z\r\n\r\n",  # a direct get reply, bare
        b"NATS/1.0\r\nOwn: v\r\nNats-Stream: S\r\nNats-Subject: x.y\r\nNats-Sequence: 3\r\n"
        b"Nats-Time-Stamp: 2026-11-28T12:00:00.1Z\r\n\r\n",  # ... with a header of its own first
        b"NATS/1.0\r\n\r\n",
    ],
)
def test_headers_dict_of_every_kind_of_block_and_after_a_change(block: bytes) -> None:
    headers, _, _ = parse_header_block(block)
    assert headers_dict(headers) == _by_key(headers.items())
    headers, _, _ = parse_header_block(block)
    headers["Added"] = "after parsing"
    assert headers_dict(headers) == _by_key(headers.items()) and headers_dict(headers)["Added"] == ["after parsing"]


# --------------------------------------------------------------------------- the fast path
# parse_header_block checks and splits the common block (no status, "Key: Value" lines) with two
# regular expressions and hands everything else to the general parser. Both must agree on every
# input: the same headers, or both refuse it.


def _general(block: bytes) -> tuple[list[tuple[str, str]], int | None, str | None] | str:
    """What the general parser alone makes of ``block`` (the reference)."""
    from jscore.headers import _parse_general

    if not block.startswith(b"NATS/1.0") or not block.endswith(b"\r\n\r\n"):
        return "refused"
    try:
        headers, status, description = _parse_general(block[:-4].decode())
    except (UnicodeDecodeError, RemoteProtocolError):
        return "refused"
    return headers.items(), status, description


def _parsed(block: bytes) -> tuple[list[tuple[str, str]], int | None, str | None] | str:
    try:
        headers, status, description = parse_header_block(block)
    except RemoteProtocolError:
        return "refused"
    return headers.items(), status, description


# Lines made of the characters that matter to either parser: token characters, the colon,
# spaces and tabs (stripped), CR and LF alone, control characters, DEL, non-ASCII text.
_line_chars = st.sampled_from(list("aZ9-_:. \t\r\n\x00\x0b\x1f\x7f\u00a0é日") + ["\r\n", ": ", "Nats-Sequence"])
_value_chars = st.sampled_from(list("v1 \t:\x00\x08\x0b\x0c\x0e\x1f\x7f\u00a0\u2028é") + ["\r", "\n"])
_lines = st.lists(_line_chars, max_size=12).map("".join) | st.builds(
    "{}:{}".format, st.sampled_from(["A", "Nats-Subject", "k!#$%&'*+-.^_`|~", "", "a b"]),
    st.lists(_value_chars, max_size=6).map("".join),
)
_first = st.sampled_from(["", " 100", " 404 No Messages", " 1x", "x", " 408  pad ", " 503\t"])


@settings(max_examples=1500, deadline=None)
@given(_first, st.lists(_lines, max_size=6), st.sampled_from(["\r\n\r\n", "\r\n", "\r\n\r\n\r\n", " \r\n\r\n"]))
def test_fast_path_agrees_with_the_general_parser(first: str, lines: list[str], end: str) -> None:
    text = "NATS/1.0" + first + "".join("\r\n" + line for line in lines) + end
    block = text.encode("utf-8", "surrogatepass")
    assert _parsed(block) == _general(block)


_SERVER_KEYS = ["Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending",
                "Nats-Last-Sequence", "Nats-UpTo-Sequence"]  # fmt: skip


# A message's own header lines: common ones, ones named like the server's (in other cases),
# and malformed ones.
_own_lines = st.builds(
    "{}:{}\r\n".format,
    st.sampled_from(["Nats-Msg-Id", "KV-Operation", "a", "nats-stream", "NATS-SEQUENCE", "Nats-Stream-X", "a b", ""]),
    st.lists(_value_chars, max_size=5).map("".join),
)


@settings(max_examples=2000, deadline=None)
@given(
    st.integers(4, 7),
    st.lists(st.tuples(st.integers(0, 6), st.lists(_value_chars, max_size=5).map("".join)), max_size=3),
    st.lists(_own_lines, max_size=3),
)
def test_direct_reply_layout_agrees_with_the_general_parser(
    count: int, changes: list[tuple[int, str]], own: list[str]
) -> None:
    """A direct get reply in the server's layout (after the message's own headers, if any) is
    recognised by one match that also checks it: the block is accepted or refused and read
    exactly as the general parser reads it, and the own lines and the values kept for the
    direct get's reader are the general parser's."""
    values = ["KV_b", "$KV.b.k", "42", "2026-11-25T03:08:22.42418774Z", "7", "41", "99"][:count]
    for i, value in changes:
        if i < count:
            values[i] = value
    server = "".join(f"{k}: {v}\r\n" for k, v in zip(_SERVER_KEYS, values))
    block = ("NATS/1.0\r\n" + "".join(own) + server + "\r\n").encode()
    assert _parsed(block) == _general(block)
    try:
        headers, _, _ = parse_header_block(block)
    except RemoteProtocolError:
        return
    layout = headers._direct_layout()
    pairs = list(_general(block)[0])  # type: ignore[arg-type]
    server_keys = {k.lower() for k in _SERVER_KEYS}
    if layout is not None:
        first: dict[str, str] = {}
        for k, v in pairs:
            first.setdefault(k.lower(), v)
        assert list(layout[1:]) == [first.get(k.lower()) for k in _SERVER_KEYS]
        assert layout[0] is not None
        assert headers_of_lines(layout[0]).items() == [p for p in pairs if p[0].lower() not in server_keys]
        assert headers._direct_fields() == layout[1:]
    plain = [
        line.startswith(("Nats-Msg-Id:", "KV-Operation:", "a:", "Nats-Stream-X:"))
        and re.fullmatch(r"[^:]+:[^\r\n]*(?<![ \t])\r\n", line) is not None
        for line in own
    ]
    if not changes and all(plain):
        assert layout is not None, "the server's own layout is recognised"
    headers.items()  # split: no longer the checked block
    assert headers._direct_layout() is None and headers._direct_fields() is None


def test_header_lines_by_key() -> None:
    assert header_lines_dict("") is None
    assert header_lines_dict("A: 1\r\na:2\r\nA: \t3\r\nB: x: y\r\n") == {"A": ["1", "3"], "a": ["2"], "B": ["x: y"]}


def test_direct_reply_layout_with_the_messages_own_headers() -> None:
    block = (
        b"NATS/1.0\r\nNats-Msg-Id: run-0-4\r\nKV-Operation: DEL\r\nNats-Stream: PR\r\nNats-Subject: pr.x\r\n"
        b"Nats-Sequence: 5\r\nNats-Time-Stamp: 2026-11-28T11:15:52.794341572Z\r\nNats-Num-Pending: 3\r\n"
        b"Nats-Last-Sequence: 0\r\n\r\n"
    )
    headers, status, _ = parse_header_block(block)
    assert status is None
    assert headers._direct_layout() == (
        "Nats-Msg-Id: run-0-4\r\nKV-Operation: DEL\r\n", "PR", "pr.x", "5", "2026-11-28T11:15:52.794341572Z", "3", "0", None
    )
    assert headers_of_lines("Nats-Msg-Id: run-0-4\r\n").items() == [("Nats-Msg-Id", "run-0-4")]
    # A server header's name among the message's own (here in other letters) is read the general way.
    odd, _, _ = parse_header_block(block.replace(b"KV-Operation", b"nats-sequence"))
    assert odd._direct_layout() is None and odd.get_all("Nats-Sequence") == ["DEL", "5"]


_kv_lines = st.builds(
    "{}:{}".format,
    st.sampled_from(["A", "Nats-Subject", "k!#$%&'*+-.^_`|~", "", "a b", " A"]),
    st.lists(_value_chars, max_size=5).map("".join),
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_kv_lines, min_size=1, max_size=3))
def test_fast_path_agrees_on_header_lines(lines: list[str]) -> None:
    block = ("NATS/1.0" + "".join("\r\n" + line for line in lines) + "\r\n\r\n").encode()
    assert _parsed(block) == _general(block)


@pytest.mark.parametrize(
    "block",
    [
        b"NATS/1.0\r\nA: 1\r\n\r\n",
        b"NATS/1.0\r\nA:1\r\nB:\t 2\r\nA: \r\n\r\n",
        b"NATS/1.0\r\nA: 1 \r\n\r\n",  # trailing space: the general parser strips it
        b"NATS/1.0\r\nA: x\ty\r\nK: a:b: c\r\n\r\n",
        b"NATS/1.0\r\nA: \xc3\xa4\r\n\r\n",
        b"NATS/1.0\r\nA: \xc3\r\n\r\n",  # not UTF-8
        b"NATS/1.0\r\nA: 1\r\n\r\nB: 2\r\n\r\n",  # a blank line inside
        b"NATS/1.0\r\nA: 1\rB: 2\r\n\r\n",  # a lone CR
        b"NATS/1.0\r\n A: 1\r\n\r\n",  # folded
        b"NATS/1.0\r\nA B: 1\r\n\r\n",
        b"NATS/1.0 404 No Messages\r\nA: 1\r\n\r\n",
    ],
    ids=repr,
)
def test_fast_path_examples(block: bytes) -> None:
    assert _parsed(block) == _general(block)


def test_a_parsed_block_is_split_on_first_use_and_behaves_like_any_headers() -> None:
    import copy
    import pickle

    block = b"NATS/1.0\r\nA: 1\r\nb: x\r\na:\t2\r\n\r\n"
    for use in (
        lambda h: h.items(),
        lambda h: h.get("B"),
        lambda h: h["a"],
        lambda h: h.keys(),
        lambda h: len(h),
        lambda h: "A" in h,
        lambda h: h == Headers([("A", "1"), ("b", "x"), ("a", "2")]),
        lambda h: repr(h),
        lambda h: encode_headers(h),
        lambda h: h.copy().items(),
        lambda h: copy.deepcopy(h).items(),
        lambda h: pickle.loads(pickle.dumps(h)).items(),
        lambda h: Headers(h).items(),
    ):
        h, _, _ = parse_header_block(block)
        assert h._unsplit() is not None and bool(h)
        use(h)
        assert h.items() == [("A", "1"), ("b", "x"), ("a", "2")]
        assert h.get_all("a") == ["1", "2"]
    h, _, _ = parse_header_block(block)
    h.add("C", "3")  # a change splits it first, and then it is no longer the server's block
    assert h._unsplit() is None
    assert h.items() == [("A", "1"), ("b", "x"), ("a", "2"), ("C", "3")]
    h, _, _ = parse_header_block(block)
    h["A"] = "9"
    assert h.items() == [("b", "x"), ("A", "9")]
    h, _, _ = parse_header_block(block)
    del h["b"]
    assert h.items() == [("A", "1"), ("a", "2")] and h._unsplit() is None


@pytest.mark.parametrize("bad", [5, 3.5, object(), "", "Key: value", b"", b"Key: value", bytearray(b"x"), True])
def test_headers_of_the_wrong_shape_are_an_invalid_option_naming_headers(bad: object) -> None:
    from jscore.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="^headers must be "):
        encode_headers(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="^headers must be "):
        Headers(bad)  # type: ignore[arg-type]


def test_an_error_inside_a_header_iterable_is_not_renamed() -> None:
    """Only a value that is not iterable at all is the shape error; a TypeError raised by the
    caller's own iterable comes out as it was."""

    def pairs() -> Iterator[tuple[str, str]]:
        yield ("a", "b")
        raise TypeError("from the caller's generator")

    with pytest.raises(TypeError, match="caller's generator"):
        encode_headers(pairs())


# --------------------------------------------------------------------------- a batch's columns

_col_keys = st.sampled_from(["Nats-Msg-Id", "nats-msg-id", "X", "a.b", "K"])
_col_values = st.text(alphabet=st.sampled_from(list("ab é:\t-1")), max_size=6).map(str.strip)
_col_seps = st.sampled_from([": ", ": ", ":", ":  ", ":\t"])
_col_pairs = st.lists(st.tuples(_col_keys, _col_seps, _col_values), max_size=4)


def _col_item(kind: str, triples: list[tuple[str, str, str]]) -> Headers | str | None:
    if kind == "none":
        return None
    lines = "".join(f"{k}{sep}{v}\r\n" for k, sep, v in triples)
    if kind == "lines":  # a direct get's checked own lines
        return lines
    if kind == "pairs":  # built by hand: no block
        return Headers([(k, v) for k, _, v in triples])
    h, _, _ = parse_header_block(("NATS/1.0\r\n" + lines + "\r\n").encode())
    if kind == "split":  # read once already: its block is split into pairs
        h.items()
    return h


def _rows_of_columns(
    columns: tuple[list[int | None], list[str], list[int] | None, list[str]],
) -> list[dict[str, list[str]] | None]:
    """Each item's map, read back from :func:`header_columns`' columns (all of them used)."""
    counts, keys, value_counts, values = columns
    got: list[dict[str, list[str]] | None] = []
    k = v = 0
    for c in counts:
        if c is None:
            got.append(None)
            continue
        row: dict[str, list[str]] = {}
        for _ in range(c):
            n = 1 if value_counts is None else value_counts[k]
            row[keys[k]] = values[v : v + n]
            k += 1
            v += n
        got.append(row)
    assert k == len(keys) and v == len(values)
    return got


@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["none", "lines", "pairs", "block", "block", "split"]), _col_pairs), max_size=8))
def test_header_columns_are_headers_dict_item_by_item(spec: list[tuple[str, list[tuple[str, str, str]]]]) -> None:
    items = [_col_item(kind, pairs) for kind, pairs in spec]
    want = [header_lines_dict(h) if isinstance(h, str) else (headers_dict(h) if h is not None else None) for h in items]
    got = _rows_of_columns(header_columns(items))
    assert len(got) == len(items)
    assert [None if d is None else list(d.items()) for d in got] == [None if d is None else list(d.items()) for d in want]


@settings(max_examples=600, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["Nats-Msg-Id", "Nats-Msg-Id", "Nats-Msg-Id", "nats-msg-id", "K"]), _col_seps,
                  _col_values, st.integers(1, 2)),
        min_size=1, max_size=8,
    )
)  # fmt: skip
def test_header_columns_of_lines_only_are_header_lines_dict_item_by_item(
    spec: list[tuple[str, str, str, int]],
) -> None:
    """Checked header lines alone (a bulk reader's batch), mostly one ``Nats-Msg-Id`` line each:
    the columns read item by item as :func:`header_lines_dict` does, whichever way they were split."""
    items = [f"{k}{sep}{v}\r\n" * lines for k, sep, v, lines in spec]
    assert _rows_of_columns(header_columns(items)) == [header_lines_dict(item) for item in items]


def test_bulk_headers_keep_a_checked_block_as_its_lines() -> None:
    checked = parse_header_block(b"NATS/1.0\r\nNats-Msg-Id: a\r\nX: 1\r\n\r\n")[0]
    assert bulk_headers(checked) == "Nats-Msg-Id: a\r\nX: 1\r\n"
    assert bulk_headers(None) is None
    by_hand = Headers({"A": "1"})
    assert bulk_headers(by_hand) is by_hand  # (no block: the headers themselves)
    split = parse_header_block(b"NATS/1.0\r\nA: 1\r\n\r\n")[0]
    split.items()
    assert bulk_headers(split) is split
    general = parse_header_block(b"NATS/1.0\r\nA:  1 \r\n\r\n")[0]  # (not the common form)
    assert bulk_headers(general) is general
    for h in (checked, by_hand, split, general):
        bulk = bulk_headers(h)
        assert (header_lines_dict(bulk) if isinstance(bulk, str) else headers_dict(h)) == headers_dict(h)


def test_header_columns_of_one_line_each_take_the_batch_path() -> None:
    items = [parse_header_block(b"NATS/1.0\r\nNats-Msg-Id: a-%d\r\n\r\n" % i)[0] for i in range(3)]
    counts, keys, value_counts, values = header_columns([items[0], None, "K: v\r\n", *items[1:], ""])
    assert counts == [1, None, 1, 1, 1, None] and value_counts is None
    assert keys == ["Nats-Msg-Id", "K", "Nats-Msg-Id", "Nats-Msg-Id"] and values == ["a-0", "v", "a-1", "a-2"]
    # one item with two lines: every item the general way, one count per key
    two = parse_header_block(b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n")[0]
    counts, keys, value_counts, values = header_columns([items[0], two])
    assert counts == [1, 1] and keys == ["Nats-Msg-Id", "A"] and value_counts == [1, 2] and values == ["a-0", "1", "2"]


@pytest.mark.parametrize(
    "lines",
    [["K: a", "K:  b"], ["K: a", "K: \tb"], ["K: a", "K:"], ["K:a", "K: b"], ["K: a", "k: b"], ["K: a b", "K: c:d"]],
)
def test_header_columns_of_one_key_with_odd_spacing(lines: list[str]) -> None:
    """One key in every item, written with other spacing than ``Key: value``: the values are
    what the parser reads (white space after the colon is not part of them)."""
    for form in ("block", "lines"):
        items: list[Headers | str | None] = [
            parse_header_block(b"NATS/1.0\r\n" + line.encode() + b"\r\n\r\n")[0] if form == "block" else line + "\r\n"
            for line in lines
        ]
        want = [header_lines_dict(line + "\r\n") for line in lines]
        counts, keys, value_counts, values = header_columns(items)
        assert counts == [1] * len(lines) and value_counts is None
        assert [{k: [v]} for k, v in zip(keys, values)] == want


def test_checked_headers_read_copy_and_pickle_before_they_are_split() -> None:
    import copy
    import pickle

    block = b"NATS/1.0\r\nA: b\r\nC: d\r\n\r\n"
    for make in (lambda: parse_header_block(block)[0], lambda: checked_block_headers(block.decode())):
        h = make()
        assert h._unsplit() is not None  # (not split yet)
        for other in (pickle.loads(pickle.dumps(h)), copy.copy(h), copy.deepcopy(h)):
            assert other == h and other.items() == [("A", "b"), ("C", "d")]
        assert bool(make()) and len(make()) == 2 and make().get("c") == "d"
        assert headers_dict(make()) == {"A": ["b"], "C": ["d"]}
        h = make()
        h.add("E", "f")
        assert h.items() == [("A", "b"), ("C", "d"), ("E", "f")] and h._unsplit() is None
