"""jscore.times: server timestamps that keep their nanoseconds, so that a time read from a
message finds that message again (``start_time=msg.time``)."""

from __future__ import annotations

import copy
import pickle
from datetime import datetime, timedelta, timezone

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jscore import jsapi
from jscore.directget import resolve_batch
from jscore.jsmsg import parse_ack_subject
from jscore.models import ConsumerConfig, ConsumerInfo, RawStoredMsg, decode, encode
from jscore.times import NatsTime, format_rfc3339, from_unix_ns, parse_nats_time, unix_ns

UTC = timezone.utc

# Nanoseconds since the epoch within the years 1970-2200.
_ns = st.integers(0, 7_258_118_400 * 10**9)


@settings(max_examples=300, deadline=None)
@given(_ns)
def test_never_later_than_the_stamp_and_exact(ns: int) -> None:
    t = from_unix_ns(ns)
    plain = datetime(t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond, UTC)
    assert unix_ns(plain) <= ns < unix_ns(plain) + 1000  # the datetime value is truncated
    assert t.ns == ns and t.nanosecond == ns % 1000
    assert parse_nats_time(t.rfc3339()).ns == ns  # text round trip is exact
    assert parse_ack_subject(f"$JS.ACK.S.C.1.1.1.{ns}.0").timestamp.ns == ns


@settings(max_examples=200, deadline=None)
@given(_ns, _ns)
def test_order_between_nats_times_uses_the_nanoseconds(a: int, b: int) -> None:
    ta, tb = from_unix_ns(a), from_unix_ns(b)
    assert (ta < tb) == (a < b) and (ta == tb) == (a == b) and (ta >= tb) == (a >= b)
    if ta == tb:
        assert hash(ta) == hash(tb)


def test_against_plain_datetimes_the_datetime_rules_apply() -> None:
    t = parse_nats_time("2026-11-25T00:21:16.214660535Z")
    assert t == datetime(2026, 11, 25, 0, 21, 16, 214660, tzinfo=UTC)
    assert t - datetime(2026, 11, 25, 0, 21, 16, tzinfo=UTC) == timedelta(microseconds=214660)
    assert isinstance(t, datetime) and t.utcoffset() == timedelta(0)


def test_copies_and_pickles_keep_the_nanoseconds() -> None:
    t = parse_nats_time("2026-11-25T00:21:16.214660535Z")
    for other in (pickle.loads(pickle.dumps(t)), copy.copy(t), copy.deepcopy(t)):
        assert isinstance(other, NatsTime) and other.ns == t.ns
    # Arithmetic gives a time without the extra nanoseconds: truncated, still not later.
    shifted = t + timedelta(0)
    assert unix_ns(shifted) <= t.ns
    assert "nanosecond=535" in repr(t)


def test_invalid() -> None:
    with pytest.raises(ValueError):
        NatsTime(2026, 1, 1, nanosecond=1000)
    with pytest.raises(ValueError):
        format_rfc3339(datetime(2026, 1, 1))  # naive
    with pytest.raises(ValueError):
        parse_nats_time("yesterday")


def test_other_offsets_are_exact_too() -> None:
    t = parse_nats_time("2026-11-22T03:44:53.000000001+02:00")
    assert t.rfc3339() == "2026-11-22T01:44:53.000000001Z"


# ------------------------------------------------------------------ on the wire


def test_requests_send_all_nine_digits() -> None:
    t = parse_nats_time("2026-11-25T00:21:16.214660535Z")
    body = msgspec.json.decode(encode(ConsumerConfig(opt_start_time=t)))
    assert body["opt_start_time"] == "2026-11-25T00:21:16.214660535Z"
    # A direct-get batch by start_time.
    assert b'"start_time":"2026-11-25T00:21:16.214660535Z"' in resolve_batch(start_time=t, batch=1).body()
    # A single direct get.
    _, single = jsapi.direct_get_request(jsapi.ApiSubjects("$JS.API."), "S", start_time=t)
    assert b'"start_time":"2026-11-25T00:21:16.214660535Z"' in single
    # Plain datetimes and NatsTimes without nanoseconds are sent as before.
    plain = datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=UTC)
    assert encode(ConsumerConfig(opt_start_time=plain)) == encode(ConsumerConfig(opt_start_time=from_unix_ns(unix_ns(plain))))


def test_every_decoded_server_timestamp_is_exact() -> None:
    info = decode(
        b'{"created":"2026-11-25T00:21:16.000000001Z","delivered":{"last_active":"2026-11-25T00:21:16.999999999Z"},'
        b'"config":{"opt_start_time":"2026-11-25T00:21:16.100000007Z"},'
        b'"priority_groups":[{"group":"g","pinned_ts":"2026-11-25T00:21:16.000000999Z"}]}',
        ConsumerInfo,
    )
    assert info.created is not None and info.created.ns % 10**9 == 1  # type: ignore[attr-defined]
    assert info.delivered.last_active is not None and info.delivered.last_active.nanosecond == 999  # type: ignore[attr-defined]
    assert info.config.opt_start_time is not None and info.config.opt_start_time.nanosecond == 7  # type: ignore[attr-defined]
    assert info.priority_groups is not None and info.priority_groups[0].pinned_ts.nanosecond == 999  # type: ignore[union-attr]
    raw = decode(b'{"subject":"a","seq":1,"time":"2026-11-25T00:21:16.123456789Z"}', RawStoredMsg)
    assert raw.time is not None and raw.time.ns % 10**9 == 123456789  # type: ignore[attr-defined]
    # Go's zero time is still "never".
    assert decode(b'{"created":"0001-01-01T00:00:00Z"}', ConsumerInfo).created is None


# The server's own form (30 characters, nine digits, Z) has a fast path; it must give what the
# general expression gives, and refuse what it refuses.
_digits = st.sampled_from(list("0123456789") + ["٣", "²", "x", " "])


@settings(max_examples=500, deadline=None)
@given(
    st.integers(min_value=0, max_value=2**62),
    st.lists(st.tuples(st.integers(min_value=0, max_value=28), _digits), max_size=2),
    st.integers(min_value=0, max_value=10),
)
def test_server_form_fast_path_agrees_with_the_general_form(ns: int, edits: list[tuple[int, str]], cut: int) -> None:
    text = list(from_unix_ns(ns).rfc3339())
    for index, char in edits:
        text[index] = char
    del text[29 - cut : 29]  # fewer digits, as Go writes a fraction with trailing zeros (or none)
    stamp = "".join(text)
    general = stamp[:-1] + "+00:00"  # the same time, not in the fast path's form
    try:
        expected: NatsTime | str = parse_nats_time(general)
    except ValueError:
        expected = "refused"
    try:
        got: NatsTime | str = parse_nats_time(stamp)
    except ValueError:
        got = "refused"
    if isinstance(expected, NatsTime):
        assert isinstance(got, NatsTime) and got.ns == expected.ns and got.tzinfo == expected.tzinfo
        assert type(got) is NatsTime and got.nanosecond == expected.nanosecond
    else:
        assert got == "refused", stamp


def test_server_form_fast_path_refuses_impossible_dates() -> None:
    for stamp in ("2026-02-30T00:00:00.000000000Z", "2026-13-01T00:00:00.000000000Z", "2026-01-01T24:00:00.000000000Z"):
        with pytest.raises(ValueError, match="^invalid timestamp"):
            parse_nats_time(stamp)
    assert parse_nats_time("2026-11-25T03:08:22.42418774Z").ns == parse_nats_time("2026-11-25T03:08:22.424187740Z").ns
    t = parse_nats_time("2026-02-28T23:59:59.999999999Z")
    assert t.ns == unix_ns(datetime(2026, 2, 28, 23, 59, 59, 999999, tzinfo=timezone.utc)) + 999
    assert type(t) is NatsTime and t.nanosecond == 999 and t.tzinfo is timezone.utc


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=-(2**62), max_value=2**63))
def test_utc_fast_path_of_from_unix_ns_agrees_with_the_general_one(ns: int) -> None:
    fast = from_unix_ns(ns)
    general = from_unix_ns(ns, timezone(timedelta(0)))  # (another object for UTC: the general path)
    assert fast.ns == general.ns == ns
    assert type(fast) is NatsTime and fast.tzinfo is timezone.utc
    assert (fast.year, fast.month, fast.day, fast.hour, fast.minute, fast.second, fast.microsecond) == (
        general.year, general.month, general.day, general.hour, general.minute, general.second, general.microsecond
    )
    assert fast.nanosecond == general.nanosecond
