"""jscore.jsapi: API subjects (default, domain, custom prefix), name and subject validation
(TESTPLAN "Stream/consumer/durable names", filters, group names), request bodies, paging, and
the parsing of stored messages (STREAM.MSG.GET and direct get replies)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jscore import errors, jsapi
from jscore.headers import Headers, parse_header_block
from jscore.times import parse_nats_time
from jscore.models import ConsumerConfig, MsgGetResponse, RawStoredMsg, StreamConfig, StreamSource, decode_response

UTC = timezone.utc

# =========================================================================== prefix and subjects


def test_default_prefix() -> None:
    assert jsapi.api_prefix() == "$JS.API."


def test_domain_prefix() -> None:
    assert jsapi.api_prefix(domain="hub") == "$JS.hub.API."


@pytest.mark.parametrize(("given", "prefix"), [("$JS.acc.API", "$JS.acc.API."), ("imp.js.", "imp.js."), ("x", "x.")])
def test_custom_api_prefix(given: str, prefix: str) -> None:
    assert jsapi.api_prefix(api_prefix=given) == prefix


@pytest.mark.parametrize("domain", ["", "a.b", "a b", "a*", "a>", "\t", "x\n"])
def test_invalid_domains(domain: str) -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.api_prefix(domain=domain)


@pytest.mark.parametrize("prefix", ["", ".", "..", "a b.", "a..b", "a.*.b"])
def test_invalid_api_prefixes(prefix: str) -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.api_prefix(api_prefix=prefix)


def test_domain_and_prefix_exclusive() -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.api_prefix(domain="d", api_prefix="p")


@pytest.mark.parametrize("prefix", ["$JS.API.", "$JS.hub.API.", "imported.js."])
def test_every_subject_uses_the_prefix(prefix: str) -> None:
    s = jsapi.ApiSubjects(prefix)
    assert s.account_info() == f"{prefix}INFO"
    assert s.stream_create("S") == f"{prefix}STREAM.CREATE.S"
    assert s.stream_update("S") == f"{prefix}STREAM.UPDATE.S"
    assert s.stream_info("S") == f"{prefix}STREAM.INFO.S"
    assert s.stream_delete("S") == f"{prefix}STREAM.DELETE.S"
    assert s.stream_purge("S") == f"{prefix}STREAM.PURGE.S"
    assert s.stream_names() == f"{prefix}STREAM.NAMES"
    assert s.stream_list() == f"{prefix}STREAM.LIST"
    assert s.msg_get("S") == f"{prefix}STREAM.MSG.GET.S"
    assert s.msg_delete("S") == f"{prefix}STREAM.MSG.DELETE.S"
    assert s.direct_get("S") == f"{prefix}DIRECT.GET.S"
    assert s.direct_get("S", "a.b.c") == f"{prefix}DIRECT.GET.S.a.b.c"
    assert s.consumer_create("S", "C") == f"{prefix}CONSUMER.CREATE.S.C"
    assert s.consumer_create("S", "C", "x.y") == f"{prefix}CONSUMER.CREATE.S.C.x.y"
    assert s.consumer_info("S", "C") == f"{prefix}CONSUMER.INFO.S.C"
    assert s.consumer_delete("S", "C") == f"{prefix}CONSUMER.DELETE.S.C"
    assert s.consumer_names("S") == f"{prefix}CONSUMER.NAMES.S"
    assert s.consumer_list("S") == f"{prefix}CONSUMER.LIST.S"
    assert s.consumer_unpin("S", "C") == f"{prefix}CONSUMER.UNPIN.S.C"


# =========================================================================== names

# TESTPLAN "Stream/consumer/durable names" (nats.go TestValidateStreamName/ConsumerName, ADR-6).
BAD_NAMES = ["", "a.b", "a b", "a*", "a>", "a/b", "a\\b", "a\tb", "a\rb", "a\nb", "x" * 256, ".", "..",
             "*", ">", "a\x00b", "a\x7fb", "a\u00a0b", "a\u2003b", "\ud800"]
GOOD_NAMES = ["S", "ORDERS", "my-stream_1", "x" * 255, "é", "日本語", "a=b", "a+b", "KV_bucket", "a,b", "$X"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_rejected(name: str) -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.check_stream_name(name)
    with pytest.raises(errors.InvalidOptionError):
        jsapi.check_consumer_name(name)
    assert issubclass(errors.InvalidOptionError, ValueError)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_accepted(name: str) -> None:
    assert jsapi.check_stream_name(name) == name
    assert jsapi.check_consumer_name(name) == name


def test_name_length_counts_utf8_bytes() -> None:
    jsapi.check_stream_name("é" * 127)  # 254 bytes
    with pytest.raises(errors.InvalidOptionError):
        jsapi.check_stream_name("é" * 128)  # 256 bytes


@pytest.mark.parametrize("name", [None, 1, b"S"])
def test_non_str_names_rejected(name: object) -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.check_stream_name(name)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_subject_builders_validate_names(name: str) -> None:
    s = jsapi.ApiSubjects()
    for build in (s.stream_create, s.stream_info, s.stream_delete, s.msg_get, s.direct_get, s.consumer_list):
        with pytest.raises(errors.InvalidOptionError):
            build(name)
    with pytest.raises(errors.InvalidOptionError):
        s.consumer_info("S", name)
    with pytest.raises(errors.InvalidOptionError):
        s.consumer_create("S", name)


# nats.go jetstream TestValidateSubject, plus whitespace and injection attempts.
BAD_FILTERS = ["", "test A", ">.", "test.>.A", "a..b", ".a", "a.", "a\tb", "a\r\nPUB x 1", " "]
GOOD_FILTERS = ["a", "a.b", "a.*", "a.>", ">", "*.b.*", "ä.ö"]


@pytest.mark.parametrize("subject", BAD_FILTERS)
def test_bad_filters_rejected(subject: str) -> None:
    with pytest.raises(errors.BadSubjectError):
        jsapi.check_filter_subject(subject)


@pytest.mark.parametrize("subject", GOOD_FILTERS)
def test_good_filters_accepted(subject: str) -> None:
    assert jsapi.check_filter_subject(subject) == subject


# TESTPLAN group names: "", 17 chars, "a b", "a.b", "é".
@pytest.mark.parametrize("group", ["", "x" * 17, "a b", "a.b", "é", "a*", None])
def test_bad_group_names(group: object) -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.check_group_name(group)


@pytest.mark.parametrize("group", ["g", "x" * 16, "A-z_0/9=", "jobs"])
def test_good_group_names(group: str) -> None:
    assert jsapi.check_group_name(group) == group


def test_has_wildcard() -> None:
    assert jsapi.has_wildcard("a.*") and jsapi.has_wildcard(">") and jsapi.has_wildcard("a.>")
    assert not jsapi.has_wildcard("a.b") and not jsapi.has_wildcard("a*b.c>")


# =========================================================================== stream requests


def test_stream_config_request_validates_before_encoding() -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.stream_config_request(StreamConfig(name="a.b"))
    with pytest.raises(errors.BadSubjectError):
        jsapi.stream_config_request(StreamConfig(name="S", subjects=["ok", "a b"]))
    with pytest.raises(errors.InvalidOptionError):
        jsapi.stream_config_request(StreamConfig(name="S", sources=[StreamSource(name="x.y")]))
    with pytest.raises(errors.InvalidOptionError):
        jsapi.stream_config_request("S")  # type: ignore[arg-type]


def test_stream_info_request() -> None:
    assert jsapi.stream_info_request() == b""
    assert jsapi.stream_info_request(deleted_details=True) == b'{"deleted_details":true}'
    assert jsapi.stream_info_request(subjects_filter="a.>", offset=5) == b'{"subjects_filter":"a.>","offset":5}'
    with pytest.raises(errors.BadSubjectError):
        jsapi.stream_info_request(subjects_filter="a b")


def test_purge_request() -> None:
    assert jsapi.purge_request() == b""
    assert jsapi.purge_request(subject="a.*") == b'{"filter":"a.*"}'
    assert jsapi.purge_request(seq=10) == b'{"seq":10}'
    assert jsapi.purge_request(keep=0) == b'{"keep":0}'
    assert jsapi.purge_request(subject="a.b", keep=3) == b'{"filter":"a.b","keep":3}'
    with pytest.raises(errors.InvalidOptionError):
        jsapi.purge_request(seq=1, keep=1)
    with pytest.raises(errors.InvalidOptionError):
        jsapi.purge_request(keep=-1)
    with pytest.raises(errors.InvalidOptionError):
        jsapi.purge_request(seq=0)
    with pytest.raises(errors.BadSubjectError):
        jsapi.purge_request(subject="")


def test_msg_get_request() -> None:
    assert jsapi.msg_get_request(5) == b'{"seq":5}'
    assert jsapi.msg_get_request(last_by_subject="a.b") == b'{"last_by_subj":"a.b"}'
    assert jsapi.msg_get_request(next_by_subject="a.*") == b'{"next_by_subj":"a.*"}'
    assert jsapi.msg_get_request(3, next_by_subject="a.b") == b'{"seq":3,"next_by_subj":"a.b"}'
    for kwargs in ({}, {"seq": 0}, {"seq": -1}, {"seq": True}, {"seq": 1, "last_by_subject": "a"},
                   {"last_by_subject": "a", "next_by_subject": "b"}):
        with pytest.raises(errors.InvalidOptionError):
            jsapi.msg_get_request(**kwargs)


def test_direct_get_request_forms() -> None:
    s = jsapi.ApiSubjects("$JS.hub.API.")
    assert jsapi.direct_get_request(s, "KV", 7) == ("$JS.hub.API.DIRECT.GET.KV", b'{"seq":7}')
    # ADR-31 subject-appended form for a literal subject: empty body.
    assert jsapi.direct_get_request(s, "KV", last_by_subject="$KV.b.k1") == ("$JS.hub.API.DIRECT.GET.KV.$KV.b.k1", b"")
    # A wildcard cannot go into a subject we publish to: it stays in the body.
    assert jsapi.direct_get_request(s, "KV", last_by_subject="a.*") == (
        "$JS.hub.API.DIRECT.GET.KV",
        b'{"last_by_subj":"a.*"}',
    )
    assert jsapi.direct_get_request(s, "KV", 1, next_by_subject="k.2") == (
        "$JS.hub.API.DIRECT.GET.KV",
        b'{"seq":1,"next_by_subj":"k.2"}',
    )
    t = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert jsapi.direct_get_request(s, "KV", start_time=t) == (
        "$JS.hub.API.DIRECT.GET.KV",
        b'{"start_time":"2026-01-02T03:04:05.000006Z"}',
    )
    assert jsapi.direct_get_request(s, "KV", start_time=t, next_by_subject="a")[1] == (
        b'{"next_by_subj":"a","start_time":"2026-01-02T03:04:05.000006Z"}'
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"seq": 1, "start_time": datetime(2026, 1, 1, tzinfo=UTC)},
        {"seq": 1, "last_by_subject": "a"},
        {"last_by_subject": "a", "next_by_subject": "b"},
        {"last_by_subject": "a", "start_time": datetime(2026, 1, 1, tzinfo=UTC)},
        {"seq": 0},
        {"start_time": datetime(2026, 1, 1)},  # naive
    ],
)
def test_direct_get_request_invalid(kwargs: dict[str, object]) -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.direct_get_request(jsapi.ApiSubjects(), "S", **kwargs)  # type: ignore[arg-type]


def test_direct_get_request_bad_subject() -> None:
    with pytest.raises(errors.BadSubjectError):
        jsapi.direct_get_request(jsapi.ApiSubjects(), "S", last_by_subject="a b")


def test_msg_delete_request() -> None:
    assert jsapi.msg_delete_request(2) == b'{"seq":2,"no_erase":true}'
    assert jsapi.msg_delete_request(2, erase=True) == b'{"seq":2}'
    with pytest.raises(errors.InvalidOptionError):
        jsapi.msg_delete_request(0)


def test_page_and_unpin_requests() -> None:
    assert jsapi.page_request(0) == b'{"offset":0}'
    assert jsapi.page_request(256, "orders.*") == b'{"offset":256,"subject":"orders.*"}'
    assert jsapi.unpin_request("jobs") == b'{"group":"jobs"}'
    with pytest.raises(errors.InvalidOptionError):
        jsapi.unpin_request("a.b")


# =========================================================================== consumer create


def _create(cfg: ConsumerConfig, action: str = jsapi.ACTION_CREATE, **kw: str) -> tuple[str, bytes, str]:
    return jsapi.consumer_create_request(jsapi.ApiSubjects(), "S", cfg, action, **kw)


def test_consumer_create_name_from_durable_or_name() -> None:
    assert _create(ConsumerConfig(durable_name="D"))[0] == "$JS.API.CONSUMER.CREATE.S.D"
    assert _create(ConsumerConfig(name="N"))[0] == "$JS.API.CONSUMER.CREATE.S.N"
    assert _create(ConsumerConfig(name="N", durable_name="N"))[2] == "N"
    with pytest.raises(errors.InvalidOptionError):
        _create(ConsumerConfig(name="N", durable_name="D"))


def test_consumer_create_filter_in_subject_only_when_single_and_literal() -> None:
    assert _create(ConsumerConfig(name="C", filter_subject="orders.new"))[0] == (
        "$JS.API.CONSUMER.CREATE.S.C.orders.new"
    )
    assert _create(ConsumerConfig(name="C", filter_subject="orders.*"))[0] == "$JS.API.CONSUMER.CREATE.S.C"
    assert _create(ConsumerConfig(name="C", filter_subject=">"))[0] == "$JS.API.CONSUMER.CREATE.S.C"
    assert _create(ConsumerConfig(name="C", filter_subjects=["a", "b"]))[0] == "$JS.API.CONSUMER.CREATE.S.C"


def test_consumer_create_actions() -> None:
    assert _create(ConsumerConfig(name="C"), jsapi.ACTION_UPDATE)[1].endswith(b'"action":"update"}')
    assert _create(ConsumerConfig(name="C"), jsapi.ACTION_CREATE_OR_UPDATE)[1].endswith(b'"action":""}')
    with pytest.raises(errors.InvalidOptionError):
        _create(ConsumerConfig(name="C"), "upsert")


def test_consumer_create_ephemeral() -> None:
    subject, body, name = _create(ConsumerConfig(), ephemeral_name="eph")
    assert (subject, name) == ("$JS.API.CONSUMER.CREATE.S.eph", "eph")
    with pytest.raises(errors.InvalidOptionError):
        _create(ConsumerConfig(), jsapi.ACTION_UPDATE, ephemeral_name="eph")  # update needs a name
    with pytest.raises(errors.InvalidOptionError):
        _create(ConsumerConfig())  # no generated name given


def test_consumer_create_keeps_given_ack_policy() -> None:
    from jscore.models import AckPolicy

    body = _create(ConsumerConfig(name="C", ack_policy=AckPolicy.NONE))[1]
    assert b'"ack_policy":"none"' in body


@pytest.mark.parametrize(
    ("cfg", "exc"),
    [
        (ConsumerConfig(durable_name="a.b"), errors.InvalidOptionError),
        (ConsumerConfig(name="a b"), errors.InvalidOptionError),
        (ConsumerConfig(name="C", filter_subject="a b"), errors.BadSubjectError),
        (ConsumerConfig(name="C", filter_subjects=["a", ">.x"]), errors.BadSubjectError),
        (ConsumerConfig(name="C", priority_groups=["x" * 17]), errors.InvalidOptionError),
        (ConsumerConfig(name="C", deliver_subject="a.*"), errors.BadSubjectError),
    ],
)
def test_consumer_create_validates(cfg: ConsumerConfig, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        _create(cfg)


def test_consumer_create_validates_stream_name() -> None:
    with pytest.raises(errors.InvalidOptionError):
        jsapi.consumer_create_request(jsapi.ApiSubjects(), "a.b", ConsumerConfig(name="C"), jsapi.ACTION_CREATE)


def test_consumer_create_with_domain() -> None:
    subject, _, _ = jsapi.consumer_create_request(
        jsapi.ApiSubjects(jsapi.api_prefix(domain="leaf")), "S", ConsumerConfig(name="C"), jsapi.ACTION_CREATE
    )
    assert subject == "$JS.leaf.API.CONSUMER.CREATE.S.C"


# =========================================================================== paging


class _Pages:
    """A fake server listing ``n`` items ``limit`` per page, recording the offsets asked."""

    def __init__(self, n: int, limit: int) -> None:
        self.items = [f"s{i}" for i in range(n)]
        self.limit = limit
        self.offsets: list[int] = []

    def fetch(self, offset: int) -> tuple[int, Sequence[str]]:
        self.offsets.append(offset)
        return len(self.items), self.items[offset : offset + self.limit]


@pytest.mark.parametrize(
    ("n", "limit", "offsets"),
    [(0, 256, [0]), (1, 256, [0]), (256, 256, [0]), (257, 256, [0, 256]), (600, 256, [0, 256, 512]),
     (1025, 1024, [0, 1024])],
)
def test_iter_pages(n: int, limit: int, offsets: list[int]) -> None:
    pages = _Pages(n, limit)
    assert list(jsapi.iter_pages(pages.fetch)) == pages.items
    assert pages.offsets == offsets


def test_iter_pages_is_lazy() -> None:
    pages = _Pages(600, 256)
    it = jsapi.iter_pages(pages.fetch)
    assert pages.offsets == []
    assert next(it) == "s0"
    assert pages.offsets == [0]


def test_iter_pages_stops_when_listing_shrinks() -> None:
    calls: list[int] = []

    def fetch(offset: int) -> tuple[int, Sequence[str]]:
        calls.append(offset)
        return (500, ["a", "b"]) if offset == 0 else (500, [])  # total claims more, page is empty

    assert list(jsapi.iter_pages(fetch)) == ["a", "b"]
    assert calls == [0, 2]


# =========================================================================== stored messages


def test_stored_msg_from_msg_get_response() -> None:
    hdrs = base64.b64encode(b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n").decode()
    body = (
        '{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"a.x","seq":3,'
        f'"hdrs":"{hdrs}","data":"aGk=","time":"2026-11-22T01:44:53.258953365Z"}}}}'
    ).encode()
    r = decode_response(body, MsgGetResponse)
    msg = jsapi.stored_msg_from_get(r.message, "S")
    assert (msg.subject, msg.seq, msg.data, msg.stream) == ("a.x", 3, b"hi", "S")
    assert msg.headers is not None and msg.headers.get_all("A") == ["1", "2"]
    assert msg.time == datetime(2026, 11, 22, 1, 44, 53, 258953, tzinfo=UTC)


def test_stored_msg_from_get_without_headers_or_data() -> None:
    msg = jsapi.stored_msg_from_get(RawStoredMsg(subject="a", seq=1), "S")
    assert msg.headers is None and msg.data == b""


def test_stored_msg_from_get_bad_headers() -> None:
    with pytest.raises(errors.JetStreamError):
        jsapi.stored_msg_from_get(RawStoredMsg(subject="a", seq=1, hdrs=b"garbage"), "S")


def _direct_headers(**extra: str) -> Headers:
    h = Headers(
        [
            ("Nats-Stream", "KV"),
            ("Nats-Subject", "$KV.b.k"),
            ("Nats-Sequence", "12"),
            ("Nats-Time-Stamp", "2026-11-22T01:44:53.269610481Z"),
        ]
    )
    for k, v in extra.items():
        h.add(k, v)
    return h


def test_stored_msg_from_direct_reply() -> None:
    msg = jsapi.stored_msg_from_direct(_direct_headers(Own="x"), b"value", None, None)
    assert (msg.stream, msg.subject, msg.seq, msg.data) == ("KV", "$KV.b.k", 12, b"value")
    assert msg.time == datetime(2026, 11, 22, 1, 44, 53, 269610, tzinfo=UTC)
    assert msg.headers == Headers([("Own", "x")])  # the server's Nats-* headers are not the message's


def test_stored_msg_from_direct_reply_without_own_headers() -> None:
    assert jsapi.stored_msg_from_direct(_direct_headers(), b"", None, None).headers is None


def test_direct_reply_statuses() -> None:
    with pytest.raises(errors.MsgNotFoundError) as nf:
        jsapi.stored_msg_from_direct(None, b"", 404, "Message Not Found")
    assert (nf.value.code, nf.value.err_code) == (404, 10037)
    with pytest.raises(errors.BadRequestError):
        jsapi.stored_msg_from_direct(None, b"", 408, "Bad Request")
    with pytest.raises(errors.JetStreamAPIError) as other:
        jsapi.stored_msg_from_direct(None, b"", 413, "Too Many Subjects")
    assert other.value.code == 413


@pytest.mark.parametrize(
    "headers",
    [None, Headers([("Nats-Stream", "KV")]), Headers([("Nats-Stream", "KV"), ("Nats-Subject", "a"),
                                                       ("Nats-Sequence", "x"), ("Nats-Time-Stamp", "2026-01-01T00:00:00Z")])],
)
def test_direct_reply_malformed(headers: Headers | None) -> None:
    with pytest.raises(errors.JetStreamError):
        jsapi.stored_msg_from_direct(headers, b"", None, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22T01:44:53.269610481Z", datetime(2026, 11, 22, 1, 44, 53, 269610, tzinfo=UTC)),
        ("2026-11-22T01:44:53.2696105Z", datetime(2026, 11, 22, 1, 44, 53, 269610, tzinfo=UTC)),
        ("2026-11-22T01:44:53Z", datetime(2026, 11, 22, 1, 44, 53, tzinfo=UTC)),
        ("2022-08-06 00:29:27.587861324 +0000 UTC", datetime(2022, 8, 6, 0, 29, 27, 587861, tzinfo=UTC)),
        ("2026-11-22T03:44:53.5+02:00", datetime(2026, 11, 22, 1, 44, 53, 500000, tzinfo=UTC)),
        ("2026-11-22 01:44:53.999999999 -0130 -0130", datetime(2026, 11, 22, 3, 14, 53, 999999, tzinfo=UTC)),
    ],
)
def test_parse_nats_time(text: str, expected: datetime) -> None:
    got = jsapi.parse_nats_time(text)
    # Truncated to microseconds (never later than the stamp), the nanoseconds kept apart.
    assert got == expected
    assert got.utcoffset() is not None
    frac = text.split(".")[1].split("Z")[0].split("+")[0].split(" ")[0] if "." in text else ""
    assert got.nanosecond == int(frac.ljust(9, "0")[6:9] or 0)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-11-22T01:44Z", "2026-11-22T01:44:53.Z"])
def test_parse_nats_time_invalid(text: str) -> None:
    with pytest.raises(errors.JetStreamError):
        jsapi.parse_nats_time(text)


@pytest.mark.parametrize(
    "text",
    [
        "2022-08-06 00:14:27.587861324 +4001 UTC",  # found by the directget fuzz target
        "2022-08-06 00:14:27 -2400 UTC",
        "2026-11-22T01:44:53+24:00",
        "2026-11-22T01:44:53-99:99",
    ],
)
def test_parse_nats_time_offset_of_a_day_or_more(text: str) -> None:
    with pytest.raises(errors.JetStreamError, match="invalid timestamp"):
        jsapi.parse_nats_time(text)


def test_parse_nats_time_largest_offset() -> None:
    assert jsapi.parse_nats_time("2026-11-22T01:44:53+23:59").utcoffset() == timedelta(hours=23, minutes=59)


def test_utc_offset_zero_is_utc() -> None:
    assert jsapi.parse_nats_time("2026-01-01T00:00:00+00:00").tzinfo is UTC
    assert jsapi.parse_nats_time("2026-01-01T00:00:00-05:00").utcoffset() == -timedelta(hours=5)


# ---------------------------------------------------------------- direct get replies: the fast read
# A reply whose block is exactly the server's own layout is read in one match; every other block
# pair by pair. Both must give the same message and cursor (or both refuse).


_SERVER_LINES = [
    ("Nats-Stream", "KV_b"),
    ("Nats-Subject", "$KV.b.k"),
    ("Nats-Sequence", "42"),
    ("Nats-Time-Stamp", "2026-11-25T03:08:22.42418774Z"),
    ("Nats-Num-Pending", "7"),
    ("Nats-Last-Sequence", "41"),
    ("Nats-UpTo-Sequence", "99"),
]


def _read(headers: Headers) -> object:
    try:
        return jsapi.stored_msg_and_cursor(headers, b"data")
    except errors.JetStreamError as exc:
        return type(exc)


# The server's order (some cursor lines left out), then a few changes: lines swapped, dropped
# or repeated.
_orders = st.tuples(
    st.sampled_from([[0, 1, 2, 3], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 6], [0, 1, 2, 3, 5]]),
    st.lists(st.tuples(st.sampled_from(["swap", "drop", "repeat"]), st.integers(0, 6), st.integers(0, 6)), max_size=2),
)


def _changed(order_and_changes: tuple[list[int], list[tuple[str, int, int]]]) -> list[int]:
    order, changes = order_and_changes
    order = list(order)
    for what, i, j in changes:
        i, j = i % len(order), j % len(order)
        if what == "swap":
            order[i], order[j] = order[j], order[i]
        elif what == "drop" and len(order) > 1:
            del order[i]
        elif what == "repeat":
            order.insert(j, order[i])
    return order


@settings(max_examples=800, deadline=None)
@given(
    _orders.map(_changed),
    st.tuples(
        st.integers(0, 8),
        st.sampled_from(
            [" ", "\t", " \t ", "nats-", "NATS-", "X", "x1", ""]
            # stamps: a date that does not exist, no fraction, ten digits, an offset, old Go form
            + ["2026-13-25T03:08:22.1Z", "2026-02-30T00:00:00.5Z", "2026-11-25T03:08:22Z",
               "2026-11-25T03:08:22.1234567890Z", "2026-11-25T03:08:22.5+01:00",
               "2022-08-06 00:29:27.587861324 +0000 UTC", "2026-11-25T03:08:22.\u0663Z"]  # fmt: skip
        ),
    ),
    st.lists(st.sampled_from([("Own", "1"), ("nats-subject", "mine"), ("Nats-Sequence", "x")]), max_size=2),
    st.booleans(),
)
def test_direct_reply_fast_read_agrees_with_the_pair_by_pair_read(
    order: list[int], twist: tuple[int, str], own: list[tuple[str, str]], own_first: bool
) -> None:
    lines = []
    for position, i in enumerate(order):
        key, value = _SERVER_LINES[i]
        if position == twist[0]:
            change = twist[1]
            if change.strip(" \t") == "":
                value = change + value  # leading white space: stripped by both
            elif change.lower() == "nats-":
                key = change + key[5:]
            else:
                value = change  # garbage
        lines.append(f"{key}: {value}")
    own_lines = [f"{k}: {v}" for k, v in own]
    lines = own_lines + lines if own_first else lines + own_lines
    block = ("NATS/1.0\r\n" + "".join(line + "\r\n" for line in lines) + "\r\n").encode()
    if not lines:
        return
    fast, _, _ = parse_header_block(block)
    assert fast._unsplit() is not None
    got = _read(fast)
    slow = Headers(parse_header_block(block)[0].items())  # the same pairs, not the server's block
    assert slow._unsplit() is None
    assert got == _read(slow)


def test_direct_reply_fast_read_of_the_servers_layout() -> None:
    block = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in _SERVER_LINES)
    headers, _, _ = parse_header_block(b"NATS/1.0\r\n" + block + b"\r\n")
    msg, cursor = jsapi.stored_msg_and_cursor(headers, b"x")
    assert headers._unsplit() is not None, "read without splitting the block"
    assert headers._direct_fields() is not None, "recognised by the parser's check"
    assert (msg.stream, msg.subject, msg.seq, msg.headers, msg.data) == ("KV_b", "$KV.b.k", 42, None, b"x")
    assert msg.time is not None and msg.time.ns % 1_000_000_000 == 424187740
    assert cursor == ("7", "41", "99")


def test_direct_reply_with_the_messages_own_headers_is_read_in_one_match() -> None:
    block = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in _SERVER_LINES)
    headers, _, _ = parse_header_block(b"NATS/1.0\r\nNats-Msg-Id: w-1-7\r\nA:b\r\n" + block + b"\r\n")
    assert headers._direct_layout() is not None, "recognised by the parser's check"
    msg, cursor = jsapi.stored_msg_and_cursor(headers, b"x")
    assert (msg.stream, msg.subject, msg.seq, msg.data, cursor) == ("KV_b", "$KV.b.k", 42, b"x", ("7", "41", "99"))
    assert msg.headers is not None and msg.headers._unsplit() is not None, "the own headers are split on first use"
    assert msg.headers.items() == [("Nats-Msg-Id", "w-1-7"), ("A", "b")]
    assert msg.headers == Headers([("Nats-Msg-Id", "w-1-7"), ("A", "b")])


def test_direct_reply_as_a_row_of_plain_values() -> None:
    block = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in _SERVER_LINES)
    headers, _, _ = parse_header_block(b"NATS/1.0\r\nNats-Msg-Id: w-1-7\r\n" + block + b"\r\n")
    row, cursor = jsapi.stored_row_and_cursor(headers, b"x")
    msg, _ = jsapi.stored_msg_and_cursor(headers, b"x")
    assert row == ("$KV.b.k", 42, b"x", "Nats-Msg-Id: w-1-7\r\n", "2026-11-25T03:08:22.42418774Z", "KV_b")
    assert cursor == ("7", "41", "99")
    assert parse_nats_time(row[4]) == msg.time
    # Not in the server's layout (here: two spaces after a colon): the general reading, the same values.
    odd, _, _ = parse_header_block(b"NATS/1.0\r\nNats-Msg-Id: w-1-7\r\n" + block.replace(b": KV_b", b":  KV_b") + b"\r\n")
    assert odd._direct_layout() is None
    row2, cursor2 = jsapi.stored_row_and_cursor(odd, b"x")
    assert row2[:3] == row[:3] and row2[5] == row[5] and cursor2 == cursor
    assert row2[3] == Headers([("Nats-Msg-Id", "w-1-7")])
    assert row2[4] == msg.time, "the exact time (a NatsTime off the layout)"


def test_direct_reply_of_a_message_with_headers_named_like_the_servers() -> None:
    """A republished message carries the origin's Nats-Sequence, Nats-Subject, ...: the server
    appends its own after them, so the last of each name is the server's."""
    block = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in _SERVER_LINES)
    own = b"Nats-Sequence: 999\r\nnats-subject: forged\r\nNats-Time-Stamp: 2020-01-01T00:00:00Z\r\nX: 1\r\n"
    headers, _, _ = parse_header_block(b"NATS/1.0\r\n" + own + block + b"\r\n")
    msg, cursor = jsapi.stored_msg_and_cursor(headers, b"x")
    assert (msg.stream, msg.subject, msg.seq, cursor) == ("KV_b", "$KV.b.k", 42, ("7", "41", "99"))
    assert msg.time is not None and msg.time.year == 2026
    assert msg.headers == Headers(
        [("Nats-Sequence", "999"), ("nats-subject", "forged"), ("Nats-Time-Stamp", "2020-01-01T00:00:00Z"), ("X", "1")]
    )
    row, _ = jsapi.stored_row_and_cursor(headers, b"x")
    assert row[:3] == ("$KV.b.k", 42, b"x") and row[3] == msg.headers and row[4] == msg.time


def test_single_direct_get_keeps_the_messages_own_cursor_headers() -> None:
    """The server appends Nats-Num-Pending, Nats-Last-Sequence and Nats-UpTo-Sequence only to a
    batch's replies: in a single get's reply they are the message's own (a republished message
    carries its origin's Nats-Last-Sequence)."""
    core = [(k, v) for k, v in _SERVER_LINES if k in ("Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp")]
    own = b"Nats-Last-Sequence: 12\r\nNats-Sequence: 13\r\n"
    block = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in core)
    headers, _, _ = parse_header_block(b"NATS/1.0\r\n" + own + block + b"\r\n")
    msg = jsapi.stored_msg_from_direct(headers, b"x", None, None)
    assert (msg.seq, msg.subject) == (42, "$KV.b.k")
    assert msg.headers == Headers([("Nats-Last-Sequence", "12"), ("Nats-Sequence", "13")])
    # A single get's reply in the server's layout with cursor headers after it (no server sends
    # that): they are read as the message's own too.
    odd, _, _ = parse_header_block(b"NATS/1.0\r\n" + block + b"Nats-Num-Pending: 3\r\n\r\n")
    assert odd._direct_layout() is not None
    assert jsapi.stored_msg_from_direct(odd, b"x", None, None).headers == Headers([("Nats-Num-Pending", "3")])
    assert jsapi.stored_msg_and_cursor(odd, b"x")[1] == ("3", None, None), "a batch's reply: the cursor"


@pytest.mark.parametrize(
    ("line", "value"), [("Nats-Sequence", "4x2"), ("Nats-Time-Stamp", "2026-02-30T00:00:00.5Z")]
)
def test_direct_reply_row_refuses_what_the_message_refuses(line: str, value: str) -> None:
    lines = [(k, value if k == line else v) for k, v in _SERVER_LINES]
    block = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in lines)
    headers, _, _ = parse_header_block(b"NATS/1.0\r\n" + block + b"\r\n")
    with pytest.raises(errors.JetStreamError) as as_msg:
        jsapi.stored_msg_and_cursor(headers, b"x")
    with pytest.raises(errors.JetStreamError) as as_row:
        jsapi.stored_row_and_cursor(headers, b"x")
    assert str(as_row.value) == str(as_msg.value)


@pytest.mark.parametrize("stamp", ["2026-13-25T03:08:22.1Z", "2026-02-30T00:00:00.5Z", "2026-11-25T24:00:00.5Z"])
def test_a_date_that_does_not_exist_in_the_servers_layout_is_refused(stamp: str) -> None:
    lines = [(k, stamp if k == "Nats-Time-Stamp" else v) for k, v in _SERVER_LINES]
    block = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in lines)
    headers, _, _ = parse_header_block(b"NATS/1.0\r\n" + block + b"\r\n")
    assert headers._direct_fields() is not None  # (the form matches; the date is checked after)
    with pytest.raises(errors.JetStreamError, match="invalid timestamp"):
        jsapi.stored_msg_and_cursor(headers, b"x")


def test_subject_matches() -> None:
    from jscore.jsapi import subject_matches

    assert subject_matches("a.b", "a.b") and not subject_matches("a.b", "a.c")
    assert subject_matches("a.b", "a.*") and not subject_matches("a.b.c", "a.*")
    assert subject_matches("a.b.c", "a.>") and not subject_matches("a", "a.>")
    assert subject_matches("x.b.y", "*.b.*") and not subject_matches("x.c.y", "*.b.*")
    assert subject_matches("a", ">") and not subject_matches("a.b", "a")
