"""js.publish against a real nats-server: every option, every error path (TESTPLAN 19, 21, 25, 26),
the three outcomes kept apart, and the no-responders retries."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

import jssync
from jscore.errors import (
    BadSubjectError,
    ConnectionClosedError,
    DuplicateMsgIdInProcessError,
    HeaderSizeExceededError,
    InvalidOptionError,
    JetStreamAPIError,
    JetStreamError,
    JetStreamUnavailableError,
    MaxBytesError,
    MsgSizeExceededError,
    MsgTTLDisabledError,
    NoRespondersError,
    NoStreamResponseError,
    PubAckTimeoutError,
    StoreFailedError,
    StreamNotMatchError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
)
from jscore.models import PubAck
from jssync.client import Client
from jssync.server import NatsCluster, NatsServer
from tests.integration._jspub import (
    PublishCounter,
    api,
    create_stream,
    delete_stream,
    get_msg,
    is_pub_ack_frame,
    purge,
    stream_state,
    unique,
    wait_until,
)
from tests.support.proxy import FaultProxy

SECOND = 1_000_000_000


@pytest.fixture
def nc(nats_url: str) -> Iterator[Client]:
    client = jssync.connect(nats_url, name="test-js-publish")
    yield client
    client.close()


@pytest.fixture
def stream(nc: Client) -> Iterator[str]:
    name = unique()
    create_stream(nc, name, subjects=[f"{name.lower()}.>"], duplicate_window=120 * SECOND)
    yield name
    delete_stream(nc, name)


def subj(stream: str, tail: str = "a") -> str:
    return f"{stream.lower()}.{tail}"


# =============================================================================== outcomes


def test_publish_returns_pub_ack(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    a1 = js.publish(subj(stream), b"one")
    a2 = js.publish(subj(stream), b"two", headers={"X-Trace": "t1"})
    assert isinstance(a1, PubAck)
    assert (a1.stream, a1.seq, a1.duplicate, a1.domain) == (stream, 1, False, None)
    assert (a2.stream, a2.seq) == (stream, 2)
    m = get_msg(nc, stream, 2)
    assert m is not None and m["data"] == b"two" and m["headers"]["X-Trace"] == "t1"


def test_msg_id_dedup_same_seq_one_stored(nc: Client, stream: str) -> None:
    """TESTPLAN 20: the same Nats-Msg-Id twice -> duplicate=True with the same seq; 1 stored."""
    js = nc.jetstream()
    first = js.publish(subj(stream), b"hello1", msg_id="1")
    again = [js.publish(subj(stream), f"hello{i}".encode(), msg_id="1") for i in (2, 3, 4)]
    assert not first.duplicate
    for a in again:
        assert a.duplicate and a.seq == first.seq and a.stream == stream
    assert stream_state(nc, stream)["messages"] == 1
    m = get_msg(nc, stream, first.seq)
    assert m is not None and m["data"] == b"hello1" and m["headers"]["Nats-Msg-Id"] == "1"


def test_msg_id_from_user_headers_dedups_too(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    a = js.publish(subj(stream), b"x", headers={"Nats-Msg-Id": "hdr-1"})
    b = js.publish(subj(stream), b"x", msg_id="hdr-1")
    assert b.duplicate and b.seq == a.seq


def test_pub_ack_domain(nats_server_factory: Callable[..., NatsServer]) -> None:
    server = nats_server_factory(jetstream_config="domain: hub")
    with jssync.connect(server.url) as c:
        create_stream(c, "DOM", subjects=["dom.>"])
        ack = c.jetstream(domain="hub").publish("dom.a", b"x")
        assert ack.domain == "hub" and ack.stream == "DOM" and ack.seq == 1


# =============================================================================== expected-* options


def test_expected_stream(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    assert js.publish(subj(stream), b"x", expected_stream=stream).seq == 1
    with pytest.raises(StreamNotMatchError) as ei:
        js.publish(subj(stream), b"x", expected_stream="OTHER")
    assert ei.value.err_code == 10060
    assert stream_state(nc, stream)["messages"] == 1


def test_expected_last_seq(nc: Client, stream: str) -> None:
    """TESTPLAN 25: a stale expectation -> WrongLastSequenceError (10071), not retried."""
    js = nc.jetstream()
    assert js.publish(subj(stream), b"first", expected_last_seq=0).seq == 1  # 0: the stream is empty
    assert js.publish(subj(stream), b"second", expected_last_seq=1).seq == 2
    with PublishCounter(nc, stream.lower()) as counter:
        with pytest.raises(WrongLastSequenceError) as ei:
            js.publish(subj(stream), b"stale", expected_last_seq=1)
        assert counter.count == 1, "a definite failure must not be retried"
    assert ei.value.err_code == 10071 and ei.value.code == 400
    assert stream_state(nc, stream)["messages"] == 2


def test_expected_last_subject_seq(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    a = js.publish(subj(stream, "k1"), b"v1", expected_last_subject_seq=0)
    js.publish(subj(stream, "k2"), b"other")
    b = js.publish(subj(stream, "k1"), b"v2", expected_last_subject_seq=a.seq)
    with PublishCounter(nc, stream.lower()) as counter:
        with pytest.raises(WrongLastSequenceError) as ei:
            js.publish(subj(stream, "k1"), b"lost update", expected_last_subject_seq=a.seq)
        assert counter.count == 1
    assert ei.value.err_code == 10071
    m = get_msg(nc, stream, b.seq)
    assert m is not None and m["data"] == b"v2"
    assert stream_state(nc, stream)["messages"] == 3


def test_expected_last_subject_seq_subject(nc: Client, stream: str) -> None:
    """The expectation checked against the last message of a (wildcard) filter subject."""
    js = nc.jetstream()
    js.publish(subj(stream, "x.a"), b"1")
    last = js.publish(subj(stream, "x.b"), b"2")
    js.publish(subj(stream, "y"), b"3")
    ok = js.publish(
        subj(stream, "x.c"), b"4", expected_last_subject_seq=last.seq, expected_last_subject_seq_subject=subj(stream, "x.*")
    )
    assert ok.seq == 4
    with pytest.raises(WrongLastSequenceError):
        js.publish(
            subj(stream, "x.d"), b"5", expected_last_subject_seq=last.seq, expected_last_subject_seq_subject=subj(stream, "x.*")
        )


def test_expected_last_msg_id(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    js.publish(subj(stream), b"1", msg_id="m1")
    assert js.publish(subj(stream), b"2", msg_id="m2", expected_last_msg_id="m1").seq == 2
    with pytest.raises(WrongLastMsgIdError) as ei:
        js.publish(subj(stream), b"3", msg_id="m3", expected_last_msg_id="m1")
    assert ei.value.err_code == 10070


# =============================================================================== ttl


def test_ttl_header_and_expiry(nc: Client) -> None:
    name = unique("TTL")
    create_stream(nc, name, subjects=[f"{name.lower()}.>"], allow_msg_ttl=True)
    try:
        js = nc.jetstream()
        short = js.publish(f"{name.lower()}.a", b"short", ttl=1)
        keep = js.publish(f"{name.lower()}.b", b"keep", ttl="never")
        m = get_msg(nc, name, short.seq)
        assert m is not None and m["headers"]["Nats-TTL"] == "1"
        m = get_msg(nc, name, keep.seq)
        assert m is not None and m["headers"]["Nats-TTL"] == "never"
        assert wait_until(lambda: get_msg(nc, name, short.seq) is None, timeout=10)
        assert get_msg(nc, name, keep.seq) is not None
    finally:
        delete_stream(nc, name)


def test_ttl_refused_without_allow_msg_ttl(nc: Client, stream: str) -> None:
    with pytest.raises(MsgTTLDisabledError) as ei:
        nc.jetstream().publish(subj(stream), b"x", ttl=5)
    assert ei.value.err_code == 10166


# =============================================================================== invalid input


@pytest.mark.parametrize(
    "kwargs",
    [
        {"msg_id": ""},
        {"expected_last_seq": -1},
        {"expected_last_subject_seq": -1},
        {"ttl": 0},
        {"ttl": -3},
        {"ttl": 0.25},
        {"expected_stream": ""},
        {"timeout": 0},
        {"timeout": -1.0},
    ],
)
def test_invalid_options_raise_before_sending(nc: Client, stream: str, kwargs: dict[str, object]) -> None:
    with PublishCounter(nc, stream.lower()) as counter:
        with pytest.raises(InvalidOptionError):
            nc.jetstream().publish(subj(stream), b"x", **kwargs)  # type: ignore[arg-type]
        assert counter.count == 0
    assert stream_state(nc, stream)["messages"] == 0


def test_unknown_option_is_a_type_error(nc: Client, stream: str) -> None:
    with pytest.raises(TypeError):
        nc.jetstream().publish(subj(stream), b"x", msgid="typo")


def test_bad_subject(nc: Client) -> None:
    with pytest.raises(BadSubjectError):
        nc.jetstream().publish("a b", b"x")


# =============================================================================== server refusals (19, 26)


def test_header_too_large_10097_typed_no_retry(nc: Client, stream: str) -> None:
    """TESTPLAN 19: headers of 64 KiB + 1 -> 10097, typed, no retry."""
    js = nc.jetstream()
    big = {"X-Big": "a" * (64 * 1024 + 1)}
    with PublishCounter(nc, stream.lower()) as counter:
        with pytest.raises(HeaderSizeExceededError) as ei:
            js.publish(subj(stream), b"x", headers=big)
        assert counter.count == 1
    assert ei.value.err_code == 10097
    assert stream_state(nc, stream)["messages"] == 0


def test_payload_over_max_msg_size_10054_typed_no_retry(nc: Client) -> None:
    """TESTPLAN 19: payload > the stream's max_msg_size -> 10054, typed, no retry."""
    name = unique("SIZE")
    create_stream(nc, name, subjects=[f"{name.lower()}.>"], max_msg_size=1024)
    try:
        js = nc.jetstream()
        assert js.publish(f"{name.lower()}.a", b"x" * 1000).seq == 1
        with PublishCounter(nc, name.lower()) as counter:
            with pytest.raises(MsgSizeExceededError) as ei:
                js.publish(f"{name.lower()}.a", b"x" * 1025)
            assert counter.count == 1
        assert ei.value.err_code == 10054 and isinstance(ei.value, JetStreamAPIError)
        assert stream_state(nc, name)["messages"] == 1
    finally:
        delete_stream(nc, name)


def test_max_bytes_discard_new_until_refused_then_purge(nc: Client) -> None:
    """TESTPLAN 26: fill a max_bytes + discard new stream until refused -> typed MaxBytesError
    (10077 "maximum bytes exceeded"), no retry loop; publishing works again after a purge."""
    name = unique("FULL")
    create_stream(nc, name, subjects=[f"{name.lower()}.>"], max_bytes=8192, discard="new")
    try:
        js = nc.jetstream()
        accepted = 0
        with PublishCounter(nc, name.lower()) as counter:
            for attempt in range(1, 500):
                try:
                    js.publish(f"{name.lower()}.fill", b"x" * 200)
                except MaxBytesError as exc:
                    err = exc
                    break
                accepted += 1
            else:
                pytest.fail("the stream never refused a message")
            assert counter.count == attempt, "one request per publish: a refusal is not retried"
        assert isinstance(err, StoreFailedError) and err.err_code == 10077
        assert "maximum bytes exceeded" in err.description
        assert 0 < accepted < 500
        assert stream_state(nc, name)["messages"] == accepted
        purge(nc, name)
        assert js.publish(f"{name.lower()}.fill", b"x" * 200).seq == accepted + 1
    finally:
        delete_stream(nc, name)


# =============================================================================== no responders


def test_no_stream_retried_then_definite_failure(nc: Client) -> None:
    """503 no responders is sent again with backoff (0.25 s doubling) within the call's timeout,
    then raised as the definite NoStreamResponseError."""
    js = nc.jetstream()
    subject = f"{unique('none').lower()}.x"
    with PublishCounter(nc, subject) as counter:
        t0 = time.monotonic()
        with pytest.raises(NoStreamResponseError) as ei:
            js.publish(subject, b"x", timeout=2)
        elapsed = time.monotonic() - t0
        assert counter.count == 4  # sent at 0, 0.25, 0.75 and 1.75 s; the next (3.75 s) is past the timeout
    assert 1.7 <= elapsed < 2.5
    assert isinstance(ei.value, NoRespondersError) and isinstance(ei.value, JetStreamError)
    assert not isinstance(ei.value, TimeoutError)  # definite, not ambiguous


def test_no_responders_backoff_configurable(nc: Client) -> None:
    js = nc.jetstream()
    js.configure_publish(retry_wait=1.0)
    subject = f"{unique('none').lower()}.x"
    with PublishCounter(nc, subject) as counter:
        t0 = time.monotonic()
        with pytest.raises(NoStreamResponseError):
            js.publish(subject, b"x", timeout=1.5)
        assert counter.count == 2  # at 0 and 1 s; the next would be at 3 s
        assert 0.95 <= time.monotonic() - t0 < 1.5


def test_stream_appearing_during_the_retries(nc: Client) -> None:
    """A publish that races the stream's creation (or a leader election) succeeds on a retry."""
    name = unique("LATE")
    js = nc.jetstream()
    js.configure_publish(retry_attempts=40, retry_wait=0.1)
    creator = threading.Timer(0.25, lambda: create_stream(nc, name, subjects=[f"{name.lower()}.>"]))
    creator.start()
    try:
        ack = js.publish(f"{name.lower()}.x", b"x", timeout=5)
        assert ack.stream == name and ack.seq == 1
    finally:
        creator.join()
        delete_stream(nc, name)


# =============================================================================== ambiguous (21)


def test_dropped_pub_ack_is_ambiguous_and_retry_with_msg_id_is_safe(
    nats_server: NatsServer, fault_proxy: Callable[..., FaultProxy]
) -> None:
    """TESTPLAN 21: the proxy drops the PubAck -> PubAckTimeoutError (also a TimeoutError) by the
    deadline; the retry with the same msg id answers duplicate=True; exactly one message stored."""
    proxy = fault_proxy(nats_server)
    with jssync.connect(proxy.url) as c:
        name = unique("AMB")
        create_stream(c, name, subjects=[f"{name.lower()}.>"], duplicate_window=120 * SECOND)
        js = c.jetstream()
        rule = proxy.drop_frames("down", is_pub_ack_frame, count=1)
        t0 = time.monotonic()
        with pytest.raises(PubAckTimeoutError) as ei:
            js.publish(f"{name.lower()}.a", b"payload", msg_id="order-1", timeout=1.0)
        elapsed = time.monotonic() - t0
        assert 0.95 <= elapsed < 2.0
        assert isinstance(ei.value, TimeoutError) and isinstance(ei.value, JetStreamError)
        assert rule.exhausted
        retry = js.publish(f"{name.lower()}.a", b"payload", msg_id="order-1", timeout=2.0)
        assert retry.duplicate and retry.seq == 1
        assert stream_state(c, name)["messages"] == 1


def test_default_timeout_is_the_context_timeout(nats_server: NatsServer, fault_proxy: Callable[..., FaultProxy]) -> None:
    proxy = fault_proxy(nats_server)
    with jssync.connect(proxy.url) as c:
        name = unique("TMO")
        create_stream(c, name, subjects=[f"{name.lower()}.>"])
        proxy.drop_frames("down", is_pub_ack_frame)
        js = c.jetstream(timeout=0.5)
        t0 = time.monotonic()
        with pytest.raises(PubAckTimeoutError):
            js.publish(f"{name.lower()}.a", b"x")
        assert 0.45 <= time.monotonic() - t0 < 1.5


def test_closed_client_is_a_definite_refusal(nats_url: str) -> None:
    c = jssync.connect(nats_url)
    js = c.jetstream()
    c.close()
    with pytest.raises(ConnectionClosedError):
        js.publish("anything", b"x")


# =============================================================================== cluster (22)


def test_cluster_leader_stepdowns_lose_and_duplicate_nothing(nats_cluster: NatsCluster) -> None:
    """TESTPLAN 22: an R3 stream, 1000 publishes with msg ids (the caller retries what ends
    ambiguous or without a stream leader, with the same id), a stream-leader stepdown every 100
    messages: every id stored exactly once, no call blocks past its timeout."""
    c = jssync.connect(nats_cluster.urls, name="stepdown", reconnect_wait=0.1, max_reconnect_attempts=-1)
    try:
        name = unique("R3")
        create_stream(c, name, subjects=[f"{name.lower()}.>"], num_replicas=3, duplicate_window=120 * SECOND)
        js = c.jetstream(timeout=2.0)
        retryable = (PubAckTimeoutError, NoStreamResponseError, DuplicateMsgIdInProcessError, JetStreamUnavailableError)
        slowest = 0.0
        retries = 0
        stepdowns = 0
        for i in range(1000):
            if i and i % 100 == 0:
                reply = api(c, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", timeout=5)
                stepdowns += bool(reply.get("success"))
            for attempt in range(30):
                t0 = time.monotonic()
                try:
                    js.publish(f"{name.lower()}.x", b"%d" % i, msg_id=f"id-{i}")
                    break
                except retryable:
                    retries += 1
                finally:
                    slowest = max(slowest, time.monotonic() - t0)
            else:
                pytest.fail(f"id-{i} never acknowledged")
        assert slowest < 2.0 + 1.0, f"a publish blocked {slowest:.2f} s (timeout 2 s)"
        assert stepdowns >= 5
        state = stream_state(c, name)
        assert state["messages"] == 1000 and state["last_seq"] == 1000, (state, retries)
    finally:
        c.close()
