"""jssync.spark without Spark: option parsing, msg ids, the executor-side connection cache, the
partition writer against a real server (retries, subject mode, row shapes), and the message
given when pyspark or pyarrow is missing. None of these need pyspark installed."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jscore.errors import InvalidOptionError, MaxMsgsError, NoStreamResponseError
from jssync.spark import _cache
from jssync.spark._config import NatsConfig, WriteOptions
from jssync.spark._writer import (
    DuplicateWindowWarning,
    ShortDuplicateWindowError,
    check_duplicate_window,
    check_write_id,
    make_write_id,
    msg_id,
    write_partition,
    write_rows,
)
from jssync.server import NatsServer

# --------------------------------------------------------------------------- NatsConfig


def test_nats_config_from_options() -> None:
    cfg = NatsConfig.from_options(
        {
            "servers": " nats://a:4222, nats://b:4223 ",
            "user": "u",
            "password": "p",
            "tls": "true",
            "connectTimeout": "2.5",
            "stream": "ignored: a reader option",
        }
    )
    assert cfg.servers == ("nats://a:4222", "nats://b:4223")
    assert (cfg.user, cfg.password, cfg.tls, cfg.connect_timeout) == ("u", "p", True, 2.5)
    assert NatsConfig.from_options({"SERVERS": "nats://x:1"}).servers == ("nats://x:1",)  # case-insensitive
    assert NatsConfig.from_options({"servers": "nats://x:1", "token": "t"}).token == "t"
    assert NatsConfig.from_options({"servers": "nats://x:1", "tls": "false"}).tls is False


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({}, "servers"),
        ({"servers": " , "}, "servers"),
        ({"servers": "http://x:1"}, "servers"),
        ({"servers": "nats://x:1", "tls": "maybe"}, "tls"),
        ({"servers": "nats://x:1", "connectTimeout": "soon"}, "connectTimeout"),
        ({"servers": "nats://x:1", "connectTimeout": "-1"}, "connectTimeout"),
        ({"servers": "nats://x:1", "connectTimeout": "nan"}, "connectTimeout"),
    ],
)
def test_nats_config_errors_name_the_option(options: dict[str, str], name: str) -> None:
    with pytest.raises(InvalidOptionError, match=rf"^{name}: "):
        NatsConfig.from_options(options)


def test_nats_config_is_a_frozen_hashable_picklable_value_hiding_secrets() -> None:
    cfg = NatsConfig(servers=("nats://bob:hunter2@h:4222",), user="bob", password="hunter2", token="tok3n")
    text = repr(cfg)
    assert "hunter2" not in text and "tok3n" not in text and "password='***'" in text and "token='***'" in text
    assert "nats://***@h:4222" in text and str(cfg) == text
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert hash(pickle.loads(pickle.dumps(cfg))) == hash(cfg)
    assert {cfg: 1}[NatsConfig(servers=("nats://bob:hunter2@h:4222",), user="bob", password="hunter2", token="tok3n")] == 1
    with pytest.raises(AttributeError):
        cfg.user = "eve"  # type: ignore[misc]
    assert NatsConfig(servers="nats://a:1,nats://b:2").servers == ("nats://a:1", "nats://b:2")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="connect_timeout"):
        NatsConfig(connect_timeout=0)


SEED = "SUAAAAICAMCAKBQHBAEQUCYMBUHA6EARCIJRIFIWC4MBSGQ3DQOR4H776Y"  # a fixed test seed


def test_nats_config_credential_files() -> None:
    cfg = NatsConfig.from_options(
        {
            "servers": "nats://a:4222",
            "credsFile": "/secrets/app.creds",
            "tlsCaFile": "/etc/ca.pem",
            "tlsCertFile": "/etc/client.pem",
            "tlsKeyFile": "/etc/client.key",
        }
    )
    assert (cfg.creds_file, cfg.tls_ca_file, cfg.tls_cert_file, cfg.tls_key_file) == (
        "/secrets/app.creds", "/etc/ca.pem", "/etc/client.pem", "/etc/client.key",
    )
    assert cfg.uses_tls and not cfg.tls
    assert "creds_file='/secrets/app.creds'" in repr(cfg)  # a path, shown; the file is read on the executor
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    seed_cfg = NatsConfig.from_options({"servers": "nats://a:4222", "nkeySeedFile": "/secrets/user.nk"})
    assert seed_cfg.nkey_seed_file == "/secrets/user.nk" and not seed_cfg.uses_tls


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"credsFile": SEED}, "credsFile"),
        ({"nkeySeedFile": SEED}, "nkeySeedFile"),
        ({"nkeySeedFile": f"  {SEED}\n"}, "nkeySeedFile"),
        ({"credsFile": "-----BEGIN NATS USER JWT-----\neyJ0.x.y\n"}, "credsFile"),
        ({"tlsKeyFile": "-----BEGIN PRIVATE KEY-----\nMIGH"}, "tlsKeyFile"),
        ({"creds": "/secrets/app.creds"}, "creds"),
        ({"nkeySeed": "/secrets/user.nk"}, "nkeySeed"),
        ({"credsFile": "/a.creds", "nkeySeedFile": "/u.nk"}, "credsFile"),
        ({"tlsCertFile": "/c.pem"}, "tlsCertFile"),
    ],
)
def test_nats_config_refuses_secrets_where_a_path_belongs(options: dict[str, str], name: str) -> None:
    with pytest.raises(InvalidOptionError, match=rf"^{name}[: ]") as info:
        NatsConfig.from_options({"servers": "nats://a:4222", **options})
    assert SEED not in str(info.value) and SEED[:20] not in str(info.value) and "MIGH" not in str(info.value)


def test_nats_config_connects_with_files_on_the_executor(
    nats_server_factory: Callable[..., NatsServer], tmp_path: Any
) -> None:
    """What an executor does with the paths: read them and connect (an nkey user; mutual TLS)."""
    nkeys = pytest.importorskip("nkeys")
    from tests.support.certs import make_certs

    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    certs = make_certs(str(tmp_path / "certs"))
    server = nats_server_factory(
        jetstream=False,
        config=certs.server_tls_block("verify: true") + f'\nauthorization {{ users: [ {{ nkey: "{public}" }} ] }}',
    )
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed + b"\n")
    cfg = NatsConfig.from_options(
        {
            "servers": f"tls://localhost:{server.port}",
            "nkeySeedFile": str(seed_file),
            "tlsCaFile": certs.ca_file,
            "tlsCertFile": certs.client_cert_file,
            "tlsKeyFile": certs.client_key_file,
            "connectTimeout": "2",
        }
    )
    shipped = pickle.loads(pickle.dumps(cfg))
    assert seed not in pickle.dumps(cfg)
    nc = shipped.connect()
    try:
        nc.flush(timeout=2)
        assert nc.is_connected
    finally:
        nc.close()
    with pytest.raises(InvalidOptionError, match="^tls: cannot load"):
        NatsConfig(servers=("tls://localhost:1",), tls_ca_file=str(tmp_path / "missing.pem")).connect()


# --------------------------------------------------------------------------- WriteOptions


def test_write_options_from_options() -> None:
    wo = WriteOptions.from_options(
        {
            "subject": "orders.new",
            "msgIdColumn": "id",
            "dedupeMode": "Subject",
            "stream": "ORDERS",
            "minDuplicateWindow": "600",
            "failOnShortWindow": "true",
            "maxPending": "100",
            "maxPendingBytes": "1048576",
            "ackTimeout": "5",
            "retries": "0",
            "servers": "ignored",
        }
    )
    assert wo == WriteOptions(
        subject="orders.new",
        msg_id_column="id",
        dedupe_mode="subject",
        stream="ORDERS",
        min_duplicate_window=600.0,
        fail_on_short_window=True,
        max_pending=100,
        max_pending_bytes=1 << 20,
        ack_timeout=5.0,
        retries=0,
    )
    assert WriteOptions.from_options({}) == WriteOptions()
    assert pickle.loads(pickle.dumps(wo)) == wo and hash(wo) == hash(pickle.loads(pickle.dumps(wo)))


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"dedupeMode": "kafka"}, "dedupeMode"),
        ({"maxPending": "0"}, "maxPending"),
        ({"maxPending": "many"}, "maxPending"),
        ({"maxPendingBytes": "0"}, "maxPendingBytes"),
        ({"maxPendingBytes": "32MiB"}, "maxPendingBytes"),
        ({"retries": "-1"}, "retries"),
        ({"ackTimeout": "0"}, "ackTimeout"),
        ({"minDuplicateWindow": "-5"}, "minDuplicateWindow"),
        ({"failOnShortWindow": "sometimes"}, "failOnShortWindow"),
        ({"subject": "orders.*"}, "subject"),
        ({"subject": "a..b"}, "subject"),
    ],
)
def test_write_options_errors_name_the_option(options: dict[str, str], name: str) -> None:
    with pytest.raises(InvalidOptionError, match=rf"^{name}: "):
        WriteOptions.from_options(options)


# --------------------------------------------------------------------------- msg ids


def test_msg_ids_are_deterministic_and_write_ids_random() -> None:
    assert msg_id("w1", 3, 17) == "w1-3-17" == msg_id("w1", 3, 17)
    assert len({msg_id("w1", p, i) for p in range(10) for i in range(100)}) == 1000
    ids = {make_write_id() for _ in range(100)}
    assert len(ids) == 100
    for wid in ids:
        assert check_write_id(wid) == wid and len(wid) == 16
    for bad in ("", "a.b", "a b", "a*", "a>", None, 5):
        with pytest.raises(InvalidOptionError, match="^run_id: "):
            check_write_id(bad)


# --------------------------------------------------------------------------- the cache


class FakeClient:
    instances: list[FakeClient] = []

    def __init__(self, config: NatsConfig) -> None:
        self.config = config
        self.closed = 0
        FakeClient.instances.append(self)

    @property
    def is_closed(self) -> bool:
        return self.closed > 0

    def close(self, timeout: float = 5.0) -> None:
        self.closed += 1

    def jetstream(self) -> Any:
        client = self

        class FakeJs:
            configured: dict[str, Any] = {}

            def configure_publish(self, **kw: Any) -> None:
                self.configured = kw
                self.client = client

        return FakeJs()


@pytest.fixture
def fake_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], None]]:
    """The cache with fake clients and a settable clock; returns ``advance(seconds)``."""
    _cache.close_all()
    FakeClient.instances = []
    clock = [1000.0]
    monkeypatch.setattr(NatsConfig, "connect", lambda self: FakeClient(self))
    monkeypatch.setattr(_cache, "_now", lambda: clock[0])
    # No sweeper thread on a fake clock: it would race the test's own sweeps (the sweeper has
    # tests of its own, on the real clock).
    monkeypatch.setattr(_cache, "_ensure_sweeper_locked", lambda st: None)
    sweeper = getattr(_cache._current(), "sweeper", None)
    if sweeper is not None:
        sweeper.join(2.0)  # (close_all woke it: it ends, the cache being empty)

    def advance(seconds: float) -> None:
        clock[0] += seconds

    yield advance
    _cache.close_all()


A = NatsConfig(servers=("nats://a:4222",))
B = NatsConfig(servers=("nats://b:4222",))


def test_cache_one_client_per_config_reused(fake_cache: Callable[[float], None]) -> None:
    c1 = _cache.get_client(A)
    assert _cache.get_client(NatsConfig(servers=("nats://a:4222",))) is c1  # an equal config
    assert pickle.loads(pickle.dumps(A)) == A and _cache.get_client(pickle.loads(pickle.dumps(A))) is c1
    c2 = _cache.get_client(B)
    assert c2 is not c1 and len(FakeClient.instances) == 2
    js1 = _cache.get_jetstream(A, max_pending=10, ack_timeout=3.0)
    assert _cache.get_jetstream(A, max_pending=10, ack_timeout=3.0) is js1
    assert js1.configured == {"max_pending": 10, "ack_timeout": 3.0}
    assert _cache.get_jetstream(A, max_pending=20, ack_timeout=3.0) is not js1


def test_cache_idle_eviction_spares_leased_clients(fake_cache: Callable[[float], None]) -> None:
    c1 = _cache.get_client(A)
    with _cache.lease(B) as c2:
        fake_cache(_cache.IDLE_TIMEOUT + 1)
        assert _cache.sweep() == 1  # A idle: closed; B leased: kept however long
        assert c1.is_closed and not c2.is_closed
        assert _cache.cached_configs() == [B]
    fake_cache(_cache.IDLE_TIMEOUT - 1)
    assert _cache.get_client(B) is c2  # released, used again within the timeout
    fake_cache(_cache.IDLE_TIMEOUT + 1)
    c3 = _cache.get_client(A)  # an access sweeps too: B goes, A comes back fresh
    assert c3 is not c1 and c2.is_closed and _cache.cached_configs() == [A]


def test_cache_discard_and_closed_clients(fake_cache: Callable[[float], None]) -> None:
    c1 = _cache.get_client(A)
    other = FakeClient(A)
    assert not _cache.discard_client(A, other)  # not the cached one: the cached one stays...
    assert other.is_closed and not c1.is_closed  # ...but the caller's broken client is closed
    assert _cache.discard_client(A, c1) and c1.is_closed
    c2 = _cache.get_client(A)
    assert c2 is not c1
    c2.close()  # closed behind the cache's back (e.g. gave up reconnecting): replaced on access
    assert _cache.get_client(A) is not c2
    assert not _cache.discard_client(B)


def test_cache_is_per_process(fake_cache: Callable[[float], None], monkeypatch: pytest.MonkeyPatch) -> None:
    c1 = _cache.get_client(A)
    real_pid = os.getpid()
    monkeypatch.setattr(_cache.os, "getpid", lambda: real_pid + 1)
    c2 = _cache.get_client(A)
    assert c2 is not c1 and not c1.is_closed  # the "parent's" client is forgotten, never closed
    monkeypatch.setattr(_cache.os, "getpid", lambda: real_pid)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_cache_after_a_real_fork(fake_cache: Callable[[float], None]) -> None:
    _cache.get_client(A)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: an empty cache, a fresh client
        try:
            ok = _cache.cached_configs() == [] and _cache.get_client(A) is FakeClient.instances[-1]
            os.write(w, b"1" if ok and len(FakeClient.instances) == 2 else b"0")
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 1) == b"1"
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert _cache.cached_configs() == [A] and len(FakeClient.instances) == 1


def test_cache_thread_safe_single_connect(fake_cache: Callable[[float], None], monkeypatch: pytest.MonkeyPatch) -> None:
    def slow_connect(self: NatsConfig) -> FakeClient:
        time.sleep(0.05)
        return FakeClient(self)

    monkeypatch.setattr(NatsConfig, "connect", slow_connect)
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(_cache.get_client(A))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(FakeClient.instances) == 1 and all(c is got[0] for c in got)


def test_cache_sweeper_thread_closes_idle_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    _cache.close_all()
    monkeypatch.setattr(NatsConfig, "connect", lambda self: FakeClient(self))
    monkeypatch.setattr(_cache, "IDLE_TIMEOUT", 0.2)
    c = _cache.get_client(A)
    deadline = time.monotonic() + 5
    while not c.is_closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.is_closed and _cache.cached_configs() == []


def test_cache_sweeper_sleeps_until_the_first_eviction_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tick: a leased client stays however long; given back, it is evicted about IDLE_TIMEOUT
    later (the sweeper is woken by the release and sleeps until then)."""
    _cache.close_all()
    monkeypatch.setattr(NatsConfig, "connect", lambda self: FakeClient(self))
    monkeypatch.setattr(_cache, "IDLE_TIMEOUT", 0.3)
    c = _cache.acquire(A)
    time.sleep(0.8)
    assert not c.is_closed, "a leased client was evicted"
    released = time.monotonic()
    _cache.release(A, c)
    deadline = released + 5
    while not c.is_closed and time.monotonic() < deadline:
        time.sleep(0.02)
    took = time.monotonic() - released
    assert c.is_closed and 0.25 <= took < 2.0, took


# --------------------------------------------------------------------------- writing (real server)


@pytest.fixture
def server(nats_server: NatsServer) -> Iterator[NatsServer]:
    yield nats_server
    _cache.close_all()


def _js(url: str) -> Any:
    import jssync

    return jssync.connect(url).jetstream()


def test_write_rows_shapes_headers_and_counts(server: NatsServer) -> None:
    js = _js(server.url)
    js.create_stream(name="W", subjects=["w.>"])
    cfg = NatsConfig(servers=(server.url,))
    rows: list[Any] = [
        {"data": b"dict", "subject": "w.a", "headers": {"k": "v", "multi": ["1", "2"]}},
        ("tuple", "w.b", [("k", "v2")]),
        {"data": "str", "subject": "w.c", "headers": None},
        {"data": bytearray(b"ba"), "subject": "w.d"},
    ]
    wid = make_write_id()
    r = write_partition(rows, cfg, WriteOptions(), write_id=wid, partition_id=7)
    assert (r.written, r.duplicates) == (4, 0)
    m = js.stream("W").get_msg(1)
    assert (m.subject, m.data, m.headers["Nats-Msg-Id"]) == ("w.a", b"dict", f"{wid}-7-0")
    assert m.headers.get_all("multi") == ["1", "2"] and m.headers["k"] == "v"
    assert js.stream("W").get_msg(2).headers["k"] == "v2"
    # again (a retried task): every row a duplicate, counted as written
    r = write_partition(rows, cfg, WriteOptions(), write_id=wid, partition_id=7)
    assert (r.written, r.duplicates) == (4, 4)
    # a fixed subject overrides the column; bare payloads
    assert write_rows([b"x", "y"], cfg, WriteOptions(subject="w.fixed"), write_id=wid, partition_id=8) == 2
    assert js.stream("W").info().state.messages == 6


def test_write_rows_errors(server: NatsServer) -> None:
    _js(server.url).create_stream(name="A", subjects=["a"])
    cfg = NatsConfig(servers=(server.url,))
    with pytest.raises(InvalidOptionError, match="^subject: "):
        write_rows([{"data": b"x"}], cfg, WriteOptions(), write_id="w", partition_id=0)
    with pytest.raises(InvalidOptionError, match="^dataColumn: "):
        write_rows([{"data": 5, "subject": "a"}], cfg, WriteOptions(), write_id="w", partition_id=0)
    with pytest.raises(InvalidOptionError, match="^run_id: "):
        write_rows([{"data": b"x"}], cfg, WriteOptions(subject="a"), write_id=None, partition_id=0)
    with pytest.raises(InvalidOptionError, match="^msgIdColumn: "):
        write_rows([{"data": b"x", "id": None}], cfg, WriteOptions(subject="a", msg_id_column="id"), write_id=None, partition_id=0)
    assert _cache.cached_configs() == []  # a failed partition drops the client


def test_definite_refusal_fails_the_partition_and_drops_the_client(server: NatsServer) -> None:
    js = _js(server.url)
    js.create_stream(name="FULL", subjects=["full.>"], max_msgs=5, discard="new")
    cfg = NatsConfig(servers=(server.url,))
    with pytest.raises(MaxMsgsError) as info:
        write_rows([b"x"] * 10, cfg, WriteOptions(subject="full.a"), write_id="w", partition_id=0)
    assert "one of rows 0-9 (msg ids 'w-0-0' to 'w-0-9')" in "".join(getattr(info.value, "__notes__", [])) or sys.version_info < (3, 11)
    assert _cache.cached_configs() == []


def test_no_stream_yet_is_retried_with_the_same_ids(server: NatsServer) -> None:
    js = _js(server.url)
    cfg = NatsConfig(servers=(server.url,))
    timer = threading.Timer(0.6, lambda: js.create_stream(name="LATE", subjects=["late.>"]))
    timer.start()
    try:
        # (checkSubjects=false: no stream-lookup before publishing, so the 503s are met and retried)
        wo = WriteOptions(subject="late.x", retries=8, check_subjects=False)
        r = write_partition([f"{i}" for i in range(200)], cfg, wo, write_id="w", partition_id=0)
    finally:
        timer.join()
    assert r.written == 200 and r.resent > 0
    assert js.stream("LATE").info().state.messages == 200


def test_lost_acks_are_resent_and_deduplicated(server: NatsServer, fault_proxy: Callable[..., Any]) -> None:
    js = _js(server.url)
    js.create_stream(name="LOST", subjects=["lost.>"])
    proxy = fault_proxy(server)
    rule = proxy.drop_frames("down", lambda f: f.startswith(b"MSG _INBOX.") and b'"seq"' in f, count=50)
    cfg = NatsConfig(servers=(proxy.url,))
    r = write_partition([f"{i}" for i in range(300)], cfg, WriteOptions(subject="lost.x", ack_timeout=0.5), write_id="w", partition_id=0)
    assert rule.matched == 50
    assert r.written == 300 and r.resent >= 50 and r.duplicates >= 50  # stored the first time: acked as duplicates
    assert js.stream("LOST").info().state.messages == 300


def test_subject_mode_refusal_counts_as_written(server: NatsServer) -> None:
    js = _js(server.url)
    js.create_stream(name="ONCE", subjects=["once.*"], discard="new", max_msgs_per_subject=1, discard_new_per_subject=True)
    cfg = NatsConfig(servers=(server.url,))
    wo = WriteOptions(subject="once", dedupe_mode="subject", msg_id_column="id", stream="ONCE")
    rows = [{"data": b"x", "id": f"k{i}"} for i in range(100)]
    assert write_partition(rows, cfg, wo, write_id=None, partition_id=0).written == 100
    r = write_partition(rows, cfg, wo, write_id="another-run", partition_id=1)
    assert (r.written, r.duplicates) == (100, 100)
    assert js.stream("ONCE").info().state.messages == 100
    assert js.stream("ONCE").get_msg(1).subject == "once.k0"
    with pytest.raises(InvalidOptionError, match="^msgIdColumn: "):
        write_rows([{"data": b"x", "id": "a.b"}], cfg, wo, write_id=None, partition_id=0)


def test_subject_mode_needs_a_discard_new_per_subject_stream(server: NatsServer) -> None:
    js = _js(server.url)
    js.create_stream(name="PLAIN", subjects=["plain.*"])
    client = _cache.get_client(NatsConfig(servers=(server.url,)))
    with pytest.raises(InvalidOptionError, match="^dedupeMode: .*discard_new_per_subject"):
        check_duplicate_window(client, WriteOptions(subject="plain", dedupe_mode="subject"))


def test_duplicate_window_check(server: NatsServer) -> None:
    js = _js(server.url)
    js.create_stream(name="SHORT", subjects=["short.>"], duplicate_window=10.0)
    js.create_stream(name="LONG", subjects=["long.>"], duplicate_window=600.0)
    client = _cache.get_client(NatsConfig(servers=(server.url,)))
    with pytest.warns(DuplicateWindowWarning, match="'SHORT' has a duplicate_window of 10 s"):
        assert check_duplicate_window(client, WriteOptions(stream="SHORT")) == 10.0
    with pytest.warns(DuplicateWindowWarning):  # found from the subject
        check_duplicate_window(client, WriteOptions(subject="short.x"))
    with pytest.raises(ShortDuplicateWindowError, match="^failOnShortWindow: "):
        check_duplicate_window(client, WriteOptions(stream="SHORT", fail_on_short_window=True))
    assert check_duplicate_window(client, WriteOptions(stream="SHORT", min_duplicate_window=10)) == 10.0
    assert check_duplicate_window(client, WriteOptions(stream="LONG")) == 600.0
    assert check_duplicate_window(client, WriteOptions(subject="nowhere.x")) is None
    with pytest.raises(InvalidOptionError, match="^stream: no stream named 'NOPE'"):
        check_duplicate_window(client, WriteOptions(stream="NOPE"))


# --------------------------------------------------------------------------- missing packages


@pytest.mark.parametrize("missing", ["pyspark", "pyarrow"])
def test_clear_message_when_spark_packages_are_missing(missing: str) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules[{missing!r}] = None  # as if not installed
        import jssync.spark as s                      # the package itself imports
        cfg = s.NatsConfig.from_options({{"servers": "nats://127.0.0.1:1"}})
        for call in (
            lambda: s.publish_partition([], servers="nats://127.0.0.1:1", run_id="r"),
            lambda: s.JetStreamForeachWriter(servers="nats://127.0.0.1:1", subject="a"),
            lambda: s.write_batch(None, 0, servers="nats://127.0.0.1:1", subject="a"),
            lambda: s.JetStreamDataSource,
        ):
            try:
                call()
            except ImportError as exc:
                print(exc)
            else:
                print("no error")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 4
    for line in lines:
        assert f"({missing} is not installed)" in line and "pip install -e '.[spark]'" in line


# --------------------------------------------------------------------------- the foreach writer, without Spark


def test_foreach_writer_lifecycle_without_spark(server: NatsServer) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from jssync.spark import JetStreamForeachWriter

    js = _js(server.url)
    js.create_stream(name="FE", subjects=["fe.>"])
    with pytest.raises(NoStreamResponseError, match="^subject: no stream captures 'nowhere.x'"):
        JetStreamForeachWriter(servers=server.url, subject="nowhere.x", run_id="q1")  # checked on the driver
    lazy = JetStreamForeachWriter(servers=server.url, subject="nowhere.x", run_id="q1", driver_check=False)
    assert not lazy.options.checked
    _cache.close_all()
    writer = JetStreamForeachWriter(servers=server.url, subject="fe.x", run_id="q1", password="hunter2")
    assert "hunter2" not in repr(writer)
    assert writer.options.checked  # the executors do not check again
    assert pickle.loads(pickle.dumps(writer)).options.checked
    assert writer.open(3, 7) is True
    assert len(_cache.cached_configs()) == 1
    for i in range(10):
        writer.process({"data": f"{i}"})
    shipped = pickle.loads(pickle.dumps(writer))  # mid-epoch: only the settings travel
    assert shipped._writer is None and shipped._client is None and shipped.config == writer.config
    writer.close(None)
    assert writer.last_result is not None and writer.last_result.written == 10
    assert js.stream("FE").get_msg(1).headers["Nats-Msg-Id"] == "q1-7-3-0"  # <write id>-<epoch>-<partition>-<row>
    # the epoch again (a retried task): duplicates only
    writer.open(3, 7)
    for i in range(10):
        writer.process({"data": f"{i}"})
    writer.close(None)
    assert writer.last_result.duplicates == 10 and js.stream("FE").info().state.messages == 10
    # a failing process drops the cached client; close(error) after it does not raise
    client = _cache.get_client(writer.config)
    writer.open(4, 7)
    with pytest.raises(InvalidOptionError, match="^dataColumn: "):
        writer.process({"data": 1.5})
    writer.close(InvalidOptionError("x"))
    assert client.is_closed and _cache.cached_configs() == []
    with pytest.raises(InvalidOptionError, match="^run_id: "):
        JetStreamForeachWriter(servers=server.url, subject="fe.x", run_id="a.b")
    with pytest.raises(TypeError, match="unexpected keyword"):
        JetStreamForeachWriter(servers=server.url, subject="fe.x", msgIdColumn="id")


def test_empty_partition_does_not_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    _cache.close_all()

    def refuse(self: NatsConfig) -> Any:
        raise AssertionError("connected for an empty partition")

    monkeypatch.setattr(NatsConfig, "connect", refuse)
    r = write_partition(iter(()), A, WriteOptions(subject="a"), write_id="w", partition_id=0)
    assert (r.written, r.duplicates, r.resent) == (0, 0, 0)
    with pytest.raises(InvalidOptionError, match="^run_id: "):
        write_partition([], A, WriteOptions(subject="a"), write_id=None, partition_id=0)


# --------------------------------------------------------------------------- option names (no Spark)


def test_max_pending_bytes_reaches_the_bulk_window() -> None:
    """The default is Kafka's buffer.memory (32 MiB); the option and the keyword reach the
    writer's window; Kafka's name points to it."""
    from jscore.publish import DEFAULT_MAX_PENDING_BYTES
    from jssync.spark import make_configs
    from jssync.spark._options import normalize

    assert WriteOptions().max_pending_bytes == DEFAULT_MAX_PENDING_BYTES == 32 * 1024 * 1024
    _, wo = make_configs("nats://127.0.0.1:4222", "a.b", {"max_pending_bytes": 4096})
    assert wo.max_pending_bytes == 4096
    assert normalize({"servers": "nats://x:1", "maxPendingBytes": "4096"}, "write") == {
        "servers": "nats://x:1", "maxpendingbytes": "4096"
    }
    with pytest.raises(InvalidOptionError, match=r"maxPendingBytes"):
        normalize({"servers": "nats://x:1", "kafka.buffer.memory": "1"}, "write")
    with pytest.raises(InvalidOptionError, match=r"maxPendingBytes"):
        WriteOptions(max_pending_bytes=0)


def test_unknown_option_names_the_closest_known_one() -> None:
    from jssync.spark._options import normalize

    with pytest.raises(InvalidOptionError, match=r"^maxPendng: unknown option .*did you mean maxPending\?"):
        normalize({"servers": "nats://x:1", "maxPendng": "10"}, "write")
    # PySpark hands lower-cased keys: the message still names the documented spelling.
    with pytest.raises(InvalidOptionError, match=r"^maxpendng: .*did you mean maxPending\?"):
        normalize({"maxpendng": "10"}, "write")
    with pytest.raises(InvalidOptionError, match=r"^startingOffset: .*did you mean startingOffsets\?"):
        normalize({"stream": "S", "startingOffset": "earliest"}, "read")
    with pytest.raises(InvalidOptionError, match=r"^zzzz: unknown option of the jetstream source$"):
        normalize({"zzzz": "1"}, "read")
    # Case-insensitive like Spark's options; the keys come back lower-cased.
    assert normalize({"STREAM": "S", "StartingOffsets": "earliest"}, "read") == {"stream": "S", "startingoffsets": "earliest"}


def test_options_of_the_other_side_are_refused() -> None:
    from jssync.spark._options import normalize

    with pytest.raises(InvalidOptionError, match=r"^subject: a write option; .*subjects"):
        normalize({"stream": "S", "subject": "a.b"}, "read")
    with pytest.raises(InvalidOptionError, match=r"^subjects: a read option; a write does not take it"):
        normalize({"subjects": "a.b"}, "write")
    with pytest.raises(InvalidOptionError, match=r"^mode: a read option; .*\.mode\('append'\)"):
        normalize({"mode": "overwrite"}, "write")
    with pytest.raises(InvalidOptionError, match=r"^endingOffsets: only valid for a batch read"):
        normalize({"endingOffsets": "latest"}, "stream_read")
    with pytest.raises(InvalidOptionError, match=r"^partitionBy: only valid for a batch read"):
        normalize({"partitionBy": "subject"}, "stream_read")
    with pytest.raises(InvalidOptionError, match=r"^writeId: only valid for a streaming write"):
        normalize({"writeId": "w"}, "write")
    with pytest.raises(InvalidOptionError, match=r"^path: the jetstream source takes no path"):
        normalize({"path": "orders"}, "read")
    with pytest.raises(InvalidOptionError, match=r"^creds: use credsFile"):
        normalize({"creds": "/x"}, "read")
    assert "kvbucket" in normalize({"kvBucket": "cfg"}, "read")
    assert normalize({"checkpointLocation": "/c", "queryName": "q"}, "stream_write")


def test_kafka_option_names() -> None:
    from jssync.spark._options import normalize

    assert normalize({"subscribe": "a.b,c.>"}, "read") == {"subjects": "a.b,c.>"}
    assert normalize({"subscribePattern": "orders.*.eu"}, "stream_read") == {"subjects": "orders.*.eu"}
    assert normalize({"maxOffsetsPerTrigger": "10"}, "stream_read") == {"maxrecordspertrigger": "10"}
    assert normalize({"topic": "orders.new"}, "write") == {"subject": "orders.new"}
    assert normalize({"includeHeaders": "false"}, "read") == {"includeheaders": "false"}
    assert normalize({"startingOffsetsByTimestamp": '{"ORDERS": {"0": 1700000000000, "1": 1700000000000}}'}, "read") == {
        "startingtimestamp": "1700000000000"
    }
    assert normalize({"startingOffsetsByTimestamp": "1700000000000"}, "read") == {"startingtimestamp": "1700000000000"}
    with pytest.raises(InvalidOptionError, match=r"^startingOffsetsByTimestamp: a stream has one sequence"):
        normalize({"startingOffsetsByTimestamp": '{"T": {"0": 1, "1": 2}}'}, "read")
    with pytest.raises(InvalidOptionError, match=r"^subscribePattern: NATS matches subjects with wildcards"):
        normalize({"subscribePattern": r"orders\..*"}, "read")
    with pytest.raises(InvalidOptionError, match=r"^subscribe: give either subscribe or subjects, not both"):
        normalize({"subjects": "a", "subscribe": "b"}, "read")
    with pytest.raises(InvalidOptionError, match=r"^maxOffsetsPerTrigger: give either"):
        normalize({"maxOffsetsPerTrigger": "1", "maxRecordsPerTrigger": "2"}, "stream_read")
    with pytest.raises(InvalidOptionError, match=r"^topic: the Kafka connector's write option"):
        normalize({"topic": "x"}, "read")
    with pytest.raises(InvalidOptionError, match=r"^assign: the Kafka connector's option has no jetstream counterpart"):
        normalize({"assign": '{"t": [0]}'}, "read")
    with pytest.raises(InvalidOptionError, match=r"^kafka.bootstrap.servers: .*use servers"):
        normalize({"kafka.bootstrap.servers": "h:9092"}, "read")
    with pytest.raises(InvalidOptionError, match=r"^kafka.linger.ms: kafka.-prefixed options configure a Kafka client"):
        normalize({"kafka.linger.ms": "5"}, "write")


# --------------------------------------------------------------------------- payloads as columns (no Spark)


def test_parse_ddl_round_trip_and_errors() -> None:
    from jssync.spark._values import Field, ddl, parse_ddl

    fields = parse_ddl("id BIGINT, `odd name` string, price decimal(10,2), at timestamp NOT NULL, "
                       "tags array<string>, attrs map<string, int>, who struct<name: string, age int>")
    assert [f.name for f in fields] == ["id", "odd name", "price", "at", "tags", "attrs", "who"]
    assert fields[0].type == "long" and fields[2].type == ("decimal", 10, 2) and not fields[3].nullable
    assert fields[6].type == ("struct", (Field("name", "string"), Field("age", "int")))
    assert parse_ddl(ddl(fields)) == fields
    assert parse_ddl("struct<a: int>") == (Field("a", "int"),)
    for bad, pattern in [
        ("", "expected a DDL schema"),
        ("a", "expected a type"),
        ("a int,", "expected a column name"),
        ("a int, a string", "appears twice"),
        ("a map<int, string>", "keys are strings"),
        ("a decimal(40, 2)", "precision"),
        ("a int b", "',' or the end"),
        ("a widget", "expected a type"),
    ]:
        with pytest.raises(InvalidOptionError, match=rf"^valueSchema: .*{pattern}"):
            parse_ddl(bad)


def test_value_decoder_modes() -> None:
    from datetime import date
    from decimal import Decimal

    from jssync.spark._values import DROP, ValueDecoder, _Bad, parse_ddl

    fields = parse_ddl("id int, name string, price decimal(6,2), day date, at timestamp, tags array<string>, "
                       "attrs map<string,long>, who struct<n: string>")
    d = ValueDecoder("json", fields, "PERMISSIVE")
    good = b'{"id": 7, "name": "x", "price": 1.5, "day": "2025-01-31", "at": "2025-01-31T12:00:00Z", ' \
           b'"tags": ["a"], "attrs": {"k": 2}, "who": {"n": "z"}, "extra": 1}'
    assert d.decode(good) == [7, "x", Decimal("1.50"), date(2025, 1, 31), 1738324800 * 1_000_000, ["a"],
                              [("k", 2)], {"n": "z"}, None]
    assert d.decode(b'{"name": 5}')[:2] == [None, "5"]  # a number in a string column: its JSON text
    bad = d.decode(b'{"id": "seven", "name": "x"}')
    assert bad[:2] == [None, "x"] and bad[-1] == '{"id": "seven", "name": "x"}'  # partial row + the payload
    assert d.decode(b"not json")[-1] == "not json" and d.decode(b"[1]")[-1] == "[1]"
    assert d.decode(b"")[-1] == ""
    assert d.decode(b'{"id": 2147483648}')[-1] is not None  # out of int range
    assert ValueDecoder("json", fields, "DROPMALFORMED").decode(b"{") is DROP
    with pytest.raises(_Bad, match="id: expected a int, got \"seven\""):
        ValueDecoder("json", fields, "FAILFAST").decode(b'{"id": "seven"}')
    s = ValueDecoder("string", (), "PERMISSIVE")
    assert s.decode(b"caf\xc3\xa9") == ["café", None]
    assert s.decode(b"\xff") == [None, "\ufffd"]
    assert ValueDecoder("string", (), "DROPMALFORMED").decode(b"\xff") is DROP
    nn = ValueDecoder("json", parse_ddl("a int not null"), "PERMISSIVE")
    assert nn.decode(b"{}")[-1] == "{}"


def test_json_encoder_like_to_json() -> None:
    from datetime import date, datetime, timezone
    from decimal import Decimal

    from jssync.spark._values import json_encoder

    enc = json_encoder()
    row = {"d": Decimal("1.50"), "t": datetime(2025, 1, 31, 12, tzinfo=timezone.utc), "day": date(2025, 1, 31),
           "b": b"ab", "m": {"k": [1, None]}}
    assert enc(row) == b'{"d":1.50,"t":"2025-01-31T12:00:00Z","day":"2025-01-31","b":"YWI=","m":{"k":[1,null]}}'


def test_split_by_subject_and_abort_descriptions() -> None:
    pytest.importorskip("pyspark")
    from jssync.spark.datasource import JetStreamCommitMessage, _describe_tasks, split_by_subject

    parts = split_by_subject({"a": 10, "b": 250, "c": 0}, 1, 1000, max_records_per_partition=100)
    assert [(p.subjects, p.start, p.end) for p in parts] == [
        (("a",), 1, 1000), (("b",), 1, 334), (("b",), 335, 667), (("b",), 668, 1000),
    ]
    assert [p.index for p in parts] == [0, 1, 2, 3]
    more = split_by_subject({"a": 10, "b": 20}, 1, 9, min_partitions=5)
    assert len(more) == 5 and sum(1 for p in more if p.subjects == ("b",)) >= 3
    assert split_by_subject({}, 1, 10) == [] and split_by_subject({"a": 1}, 5, 4) == []
    with pytest.raises(InvalidOptionError, match="^partitionBy: the read matches 10001 subjects"):
        split_by_subject({f"s{i}": 1 for i in range(10_001)}, 1, 10)
    text = _describe_tasks([JetStreamCommitMessage(0, 1200), None, JetStreamCommitMessage(2, 800), None])
    assert text.startswith("2 of 4 tasks finished and stored 2000 rows (partition 0: 1200, partition 2: 800); 2 did not finish")
    assert _describe_tasks([None, None]).startswith("0 of 2 tasks finished and stored 0 rows; 2 did not finish")


def test_failed_partition_logs_the_rows_it_stored(server: NatsServer, caplog: pytest.LogCaptureFixture) -> None:
    js = _js(server.url)
    js.create_stream(name="HALF", subjects=["half.>"])
    cfg = NatsConfig(servers=(server.url,))

    def rows() -> Iterator[bytes]:
        yield from [b"x"] * 300
        raise RuntimeError("the task was interrupted")

    with caplog.at_level("WARNING", logger="jssync.spark"), pytest.raises(RuntimeError):
        write_rows(rows(), cfg, WriteOptions(subject="half.a", max_pending=64), write_id="wf", partition_id=3)
    stored = js.stream("HALF").info().state.messages
    assert 0 < stored <= 300
    line = next(r.getMessage() for r in caplog.records if "partition 3 failed" in r.getMessage())
    assert "jetstream write wf partition 3 failed (RuntimeError) after" in line
    assert int(line.split(" after ")[1].split()[0]) <= stored  # what it confirmed, at most what is stored


def test_driver_checks_fail_fast_and_mark_the_options(server: NatsServer) -> None:
    from jssync.spark._writer import check_captured, check_targets

    js = _js(server.url)
    js.create_stream(name="CAP", subjects=["cap.*"])
    js.create_stream(name="PLAINS", subjects=["plains.>"])
    client = _cache.get_client(NatsConfig(servers=(server.url,)))
    started = time.monotonic()
    with pytest.raises(NoStreamResponseError, match="^subject: no stream captures 'nope.x'"):
        check_targets(client, WriteOptions(subject="nope.x"))
    assert time.monotonic() - started < 5  # not the 180 s of publish retries
    with pytest.raises(InvalidOptionError, match="^stream: stream 'PLAINS' does not capture subject 'cap.a'"):
        check_targets(client, WriteOptions(subject="cap.a", stream="PLAINS"))
    with pytest.raises(InvalidOptionError, match="^dedupeMode: .*discard_new_per_subject"):
        check_targets(client, WriteOptions(subject="plains", dedupe_mode="subject"))
    ok = check_targets(client, WriteOptions(subject="cap.a", stream="CAP", min_duplicate_window=0))
    assert ok.checked and ok.captures is None
    assert check_targets(client, WriteOptions(subject="nope.x", check_subjects=False)).checked
    # A subject column: the stream's filters travel to the tasks, which check each new value.
    col = check_targets(client, WriteOptions(stream="CAP", min_duplicate_window=0), columns=True)
    assert col.captures == ("cap.*",)
    seen: set[str] = set()
    check_captured(["cap.a", "cap.b", "cap.a"], col, seen)
    assert seen == {"cap.a", "cap.b"}
    with pytest.raises(NoStreamResponseError, match="^subjectColumn: subject 'cap.a.b' .* is not captured by stream 'CAP'"):
        check_captured(["cap.a.b"], col, seen)
    every = check_targets(client, WriteOptions(min_duplicate_window=0), columns=True)
    assert set(every.captures or ()) >= {"cap.*", "plains.>"}


# --------------------------------------------------------------------------- kvBucket: the key listing (no Spark)


def _raw_publish(url: str, subjects: list[str]) -> None:
    """Publish like a client that checks neither keys nor subjects (a raw, non-pedantic PUB)."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(url)
    with socket.create_connection((u.hostname or "127.0.0.1", u.port or 4222), timeout=5) as sock:
        f = sock.makefile("rb")
        assert f.readline().startswith(b"INFO ")
        out = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
        for s in subjects:
            out += b"PUB " + s.encode() + b" 1\r\nv\r\n"
        sock.sendall(out + b"PING\r\n")
        assert f.readline() == b"PONG\r\n"


@pytest.mark.parametrize("page_size", [1000, 5])
def test_kv_keys_are_listed_as_of_the_snapshot_while_keys_go(server: NatsServer, page_size: int) -> None:
    """The keys a kvBucket read lists on the driver: every key that may hold a value at the
    snapshot, whatever is deleted, purged, overwritten or added after it, before and during the
    listing (one stream-info reply up to page_size keys, an ordered consumer above)."""
    from jssync.spark._kvlist import list_bucket_keys

    js = _js(server.url)
    bucket = f"LIST{page_size}"
    kv = js.create_key_value(bucket, history=3)
    for i in range(40):
        kv.put(f"k{i:02d}", b"0")
    kv.delete("k05")                                             # no value at the snapshot
    _raw_publish(server.url, [f"$KV.{bucket}.caf\u00e9", f"$KV.{bucket}.a@b", f"$KV.{bucket}.*"])
    snapshot = js.stream_info(f"KV_{bucket}")
    kv.put("k30", b"1")                                          # overwritten after the snapshot
    kv.delete("k31")                                             # deleted after the snapshot
    calls = [0]
    real = js.stream_info

    def stream_info(name: str, **kw: Any) -> Any:
        out = real(name, **kw)
        calls[0] += 1
        if calls[0] == 1:  # the listing's first request is answered: keys go, and one comes
            for i in range(5):
                kv.delete(f"k{i:02d}")
            kv.purge_deletes(older_than=0)
            kv.put("late", b"x")
        return out

    js.stream_info = stream_info  # type: ignore[method-assign]
    listed = list_bucket_keys(js, kv, snapshot, page_size=page_size, timeout=5)
    assert calls[0] >= 1
    assert listed.method == ("info" if page_size > 40 else "consumer")
    keys = set(listed.keys)
    must = {f"k{i:02d}" for i in range(6, 40)} | {"caf\u00e9", "a@b"}
    assert must <= keys, sorted(must - keys)
    assert "late" not in keys                                    # written after the snapshot and the listing's start
    assert keys - must <= {f"k{i:02d}" for i in range(6)}        # nothing else (purged keys may still be listed)
    if listed.method == "consumer":
        assert "k05" not in keys                                 # its last message, at the snapshot, is a delete
    assert listed.unreadable == ("*",)
    assert list(listed.keys) == sorted(listed.keys)


# --------------------------------------------------------------------------- value_format in the writer functions


def test_row_payloads_json_and_string_like_the_data_source() -> None:
    """The writer functions' value_format: the same plan and serialisation as the data source's
    valueFormat (one copy: RowPayloads, json_plan, json_encoder), and the same errors."""
    from jssync.spark._values import RowPayloads, json_plan, payload_rows

    wo = WriteOptions(value_format="json")
    conv = RowPayloads(wo)
    row = {"id": 1, "name": "x", "subject": "s.a", "headers": {"k": "v"}, "at": None}
    assert conv(row) == (b'{"id":1,"name":"x","at":null}', "s.a", {"k": "v"}, None)
    assert conv({"value": {"a": 1}, "subject": "s.b"}) == (b'{"a":1}', "s.b", None, None)  # a struct: the object
    assert conv({"value": 5, "subject": "s.c"})[0] == b'{"value":5}'                     # not one: a column
    fixed = RowPayloads(WriteOptions(value_format="json", subject="s.x", msg_id_column="id"))
    assert fixed({"id": "r1", "subject": "col"}) == (b'{"id":"r1","subject":"col"}', None, None, "r1")
    with pytest.raises(InvalidOptionError, match=r"^valueFormat: json serialises a struct column 'value'.*\['subject', 'headers'\]"):
        conv({"subject": "s.a", "headers": None})
    with pytest.raises(InvalidOptionError, match=r"^valueFormat: json serialises the fields of pyspark Rows or dicts"):
        conv((b"x", "s.a"))
    assert json_plan(["value", "subject"], True, wo).struct
    text = RowPayloads(WriteOptions(value_format="string", subject="s"))
    assert text({"data": 5}) == ("5", None, None, None) and text({"data": None})[0] == b""
    assert text((2.5, "s.t")) == ("2.5", "s.t", None, None) and text(7) == "7" and text(b"raw") == b"raw"
    with pytest.raises(InvalidOptionError, match=r"^dataColumn: column 'data' holds a struct; valueFormat=string"):
        text({"data": {"a": 1}})
    with pytest.raises(InvalidOptionError, match=r"^dataColumn: the rows have no column 'data'"):
        text({"other": 1})
    rows = [{"data": b"x"}]
    assert payload_rows(rows, WriteOptions()).__next__() is rows[0]  # binary: the rows as they are

    pytest.importorskip("pyspark")
    from pyspark.sql import Row
    from pyspark.sql import types as T

    from jssync.spark.datasource import plan_write_columns

    assert conv(Row(value=Row(a=1, b=Row(c="z")), subject="s.r")) == (b'{"a":1,"b":{"c":"z"}}', "s.r", None, None)
    assert conv(Row(value={"m": 1}, id=2, subject="s.r"))[0] == b'{"value":{"m":1},"id":2}'  # a map is a column
    schema = T.StructType([T.StructField("value", T.StructType([T.StructField("a", T.LongType())])),
                           T.StructField("subject", T.StringType())])
    plan = plan_write_columns(schema, wo)
    assert plan is not None and plan.struct
    assert RowPayloads(wo, plan)(Row(value=None, subject="s.n")) == (b"", "s.n", None, None)  # a null struct


def test_row_timestamps_are_written_in_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark hands a timestamp as a datetime without zone in the process's local time; the
    payload is the instant in UTC, as the data source's Arrow path writes it."""
    pytest.importorskip("pyspark")
    from datetime import datetime

    from pyspark.sql import Row

    from jssync.spark._values import RowPayloads

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        local = datetime.fromtimestamp(1738324800)  # 2025-01-31T12:00:00Z, as pyspark makes it here
        assert local.hour == 21
        out = RowPayloads(WriteOptions(value_format="json", subject="s"))(Row(at=local, xs=[Row(t=local)]))
        assert out[0] == b'{"at":"2025-01-31T12:00:00Z","xs":[{"t":"2025-01-31T12:00:00Z"}]}'
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_publish_partition_and_foreach_writer_value_format(server: NatsServer) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql import Row

    from jssync.spark import JetStreamForeachWriter, publish_partition

    js = _js(server.url)
    js.create_stream(name="VF", subjects=["vf.>"])
    rows = [Row(id=i, name=f"n{i}", subject="vf.a") for i in range(3)]
    assert publish_partition(rows, servers=server.url, run_id="vf1", partition_id=0, value_format="json") == 3
    assert [js.stream("VF").get_msg(i + 1).data for i in range(3)] == [
        f'{{"id":{i},"name":"n{i}"}}'.encode() for i in range(3)
    ]
    assert publish_partition([{"data": 12.5}], servers=server.url, subject="vf.s", run_id="vf2", partition_id=0,
                             value_format="string") == 1
    assert js.stream("VF").get_msg(4).data == b"12.5"
    with pytest.raises(InvalidOptionError, match="^valueFormat: expected 'binary', 'string' or 'json'"):
        publish_partition(rows, servers=server.url, run_id="vf3", partition_id=0, value_format="xml")
    writer = JetStreamForeachWriter(servers=server.url, subject="vf.fe", run_id="q1", value_format="json")
    writer.open(0, 1)
    writer.process(Row(value=Row(k="v"), subject="ignored"))
    writer.process({"a": 1})
    writer.close(None)
    assert writer.last_result is not None and writer.last_result.written == 2
    assert [js.stream("VF").get_msg(s).data for s in (5, 6)] == [b'{"k":"v"}', b'{"a":1}']
    assert pickle.loads(pickle.dumps(writer))._payloads is None  # only the settings travel
    writer.open(0, 2)
    with pytest.raises(InvalidOptionError, match="^valueFormat: json serialises a struct column"):
        writer.process({"headers": {"k": "v"}})
    writer.close(InvalidOptionError("x"))


def test_publish_partition_takes_arrow_record_batches(server: NatsServer) -> None:
    """Record batches (what ``mapInArrow`` hands over) are written as the same rows given as
    tuples would be: same msg ids (so one hand-off after the other stores nothing new), subjects,
    headers and payload formats; the first batch's columns are checked before anything is sent."""
    pytest.importorskip("pyspark")
    pa = pytest.importorskip("pyarrow")
    from jssync.spark import publish_partition

    js = _js(server.url)
    js.create_stream(name="ARW", subjects=["arw.>"])
    headers_t = pa.map_(pa.string(), pa.list_(pa.string()))
    cols = {
        "data": pa.array([b"a", None, b"c", b"d"], pa.binary()),
        "subject": pa.array(["arw.1", "arw.2", "arw.1", "arw.3"]),
        "headers": pa.array([[("K", ["v", "w"])], None, [], [("K", ["x"])]], headers_t),
    }
    batch = pa.RecordBatch.from_pydict(cols)
    assert publish_partition([batch.slice(0, 3), batch.slice(3)], servers=server.url, run_id="arw1", partition_id=0) == 4
    stream = js.stream("ARW")
    got = [stream.get_msg(s) for s in (1, 2, 3, 4)]
    assert [m.subject for m in got] == ["arw.1", "arw.2", "arw.1", "arw.3"]
    assert [m.data for m in got] == [b"a", b"", b"c", b"d"]
    assert got[0].headers is not None and got[0].headers.get_all("K") == ["v", "w"]
    assert [m.headers.get("Nats-Msg-Id") if m.headers else None for m in got] == [f"arw1-0-{i}" for i in range(4)]
    # The same rows as tuples, same run id: the same msg ids, nothing stored again.
    tuples = [(b"a", "arw.1", {"K": ["v", "w"]}, None), (b"", "arw.2", None, None), (b"c", "arw.1", None, None),
              (b"d", "arw.3", {"K": ["x"]}, None)]
    assert publish_partition(tuples, servers=server.url, run_id="arw1", partition_id=0) == 4
    assert stream.info().state.messages == 4

    numbers = pa.RecordBatch.from_pydict({"id": [1, 2], "k": ["x", "y"]})
    assert publish_partition([numbers], servers=server.url, subject="arw.j", run_id="arw2", partition_id=0,
                             value_format="json") == 2
    assert publish_partition([numbers], servers=server.url, subject="arw.s", run_id="arw3", partition_id=0,
                             value_format="string", data_column="id") == 2
    assert [stream.get_msg(s).data for s in (5, 6, 7, 8)] == [b'{"id":1,"k":"x"}', b'{"id":2,"k":"y"}', b"1", b"2"]

    with pytest.raises(InvalidOptionError, match="^dataColumn: the DataFrame has no column 'data'"):
        publish_partition([numbers], servers=server.url, subject="arw.x", run_id="arw4", partition_id=0)
    with pytest.raises(InvalidOptionError, match="^dataColumn: column 'id' is bigint; it must be binary or string"):
        publish_partition([numbers], servers=server.url, subject="arw.x", run_id="arw5", partition_id=0,
                          data_column="id")
    with pytest.raises(InvalidOptionError, match="^subject: no subject option and the DataFrame has no column"):
        publish_partition([numbers], servers=server.url, run_id="arw6", partition_id=0, value_format="json")
    assert stream.info().state.messages == 8  # nothing sent for a refused schema

    # Tables are read as their batches; a column the writer does not read may be of a type
    # Spark has none for, one it reads may not (a typed error, nothing sent).
    table = pa.Table.from_batches([batch.slice(0, 2), batch.slice(2)]).append_column("odd", pa.array([1, 2, 3, 4], pa.uint8()))
    assert publish_partition([table], servers=server.url, run_id="arw8", partition_id=0) == 4
    assert [stream.get_msg(s).data for s in range(9, 13)] == [b"a", b"", b"c", b"d"]
    assert [stream.get_msg(s).headers.get("Nats-Msg-Id") for s in range(9, 13)] == [f"arw8-0-{i}" for i in range(4)]
    odd = pa.RecordBatch.from_pydict({"data": pa.array([1], pa.uint8())})
    with pytest.raises(InvalidOptionError, match="^rows: the record batches have a column Spark cannot take"):
        publish_partition([odd], servers=server.url, subject="arw.x", run_id="arw9", partition_id=0, value_format="string")
    pd = pytest.importorskip("pandas")
    with pytest.raises(InvalidOptionError, match="^rows: a pandas DataFrame"):
        publish_partition([pd.DataFrame({"data": [b"x"]})], servers=server.url, subject="arw.x", run_id="arw10",
                          partition_id=0)
    # An empty partition, and one whose first batch has no rows.
    assert publish_partition(iter([]), servers=server.url, subject="arw.x", run_id="arw11", partition_id=0) == 0
    assert publish_partition([batch.slice(0, 0), batch.slice(3)], servers=server.url, run_id="arw12", partition_id=0) == 1
    last = stream.get_msg(13)
    assert (last.subject, last.data, last.headers.get("Nats-Msg-Id")) == ("arw.3", b"d", "arw12-0-0")
    assert stream.info().state.messages == 13
    # A subject column the writer does not read (a fixed subject) may be of any type; large
    # binary data is written as it is with value_format="string", as binary is.
    big = pa.RecordBatch.from_pydict({"data": pa.array([b"\xffL"], pa.large_binary()), "subject": pa.array([7], pa.uint8())})
    assert publish_partition([big], servers=server.url, subject="arw.l", run_id="arw13", partition_id=0,
                             value_format="string") == 1
    assert (stream.get_msg(14).subject, stream.get_msg(14).data) == ("arw.l", b"\xffL")
    # Every batch must bring the columns of the first: a later one that differs fails there.
    other = pa.RecordBatch.from_pydict({"data": pa.array([1], pa.int64())})
    with pytest.raises(InvalidOptionError, match="^rows: item 1 of the partition has other columns than the first"):
        publish_partition([pa.RecordBatch.from_pydict({"data": [b"z"]}), other], servers=server.url, subject="arw.o",
                          run_id="arw14", partition_id=0)
    # Items are checked as they come: a row after batches fails the partition there (the
    # batches before it may be stored; a retry of the partition sends the same msg ids).
    with pytest.raises(InvalidOptionError, match="^rows: item 1 of the partition is a tuple, after Arrow record"):
        publish_partition([batch, (b"x", "arw.9", None, None)], servers=server.url, run_id="arw7", partition_id=0)


def test_arrow_rows_converts_large_batches_a_slice_at_a_time() -> None:
    """A batch of more than _SLICE_ROWS rows gives the same rows, in order, as converting it
    whole, and no more than a slice of them exists as Python objects at a time."""
    pa = pytest.importorskip("pyarrow")
    from jssync.spark import datasource as D

    n = 2 * D._SLICE_ROWS + 17
    data = [b"%d" % i for i in range(n)]
    subjects = [f"s.{i % 3}" for i in range(n)]
    batch = pa.RecordBatch.from_arrays([pa.array(data, pa.binary()), pa.array(subjects)], names=["data", "subject"])
    small = pa.RecordBatch.from_arrays([pa.array([b"x"], pa.binary()), pa.array(["s.0"])], names=["data", "subject"])
    rows = list(D.arrow_rows(iter([batch, small]), WriteOptions()))
    assert rows == [(d, s, None, None) for d, s in zip(data + [b"x"], subjects + ["s.0"])]
    assert [b.num_rows for b in D._slices(iter([batch, small]))] == [D._SLICE_ROWS, D._SLICE_ROWS, 17, 1]
    only_data = list(D.arrow_rows(iter([batch]), WriteOptions(subject="s.1")))
    assert only_data == data
