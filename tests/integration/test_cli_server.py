"""``jssync server``: nats-server lives and dies with the command, leaves nothing behind, and
start failures are one line."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

CLI = [sys.executable, "-m", "jssync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tmp_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "jssync-nats-*")))


def _start(port: int, *, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    def ignore_sigint() -> None:  # what a shell does to a command it starts in the background
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(CLI + ["server", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=ignore_sigint if sigint_ignored else None)
    deadline = time.monotonic() + 15
    while not _listening(port):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    return proc


def _wait_closed(port: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while _listening(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_the_server_stops_with_the_command_and_leaves_nothing(sig: int) -> None:
    before = _tmp_dirs()
    port = _free_port()
    proc = _start(port)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert _wait_closed(port, 5.0), "nats-server outlived the command"
    assert _tmp_dirs() <= before, "the temporary store was left behind"


def test_sigint_stops_the_server_even_when_started_with_sigint_ignored() -> None:
    """A background job of a shell starts with SIGINT ignored (and Python then leaves it so):
    the command still stops on it, as nats-server does."""
    port = _free_port()
    proc = _start(port, sigint_ignored=True)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert _wait_closed(port, 5.0), "nats-server outlived the command"


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux only")
def test_the_server_dies_even_when_the_command_is_killed() -> None:
    port = _free_port()
    proc = _start(port)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=5)
    assert _wait_closed(port, 5.0), "nats-server outlived a killed command"
    # (a SIGKILL runs no cleanup: its temporary folder stays, like any killed process's)


def test_start_failures_are_one_line_and_leave_nothing() -> None:
    port = _free_port()
    holder = _start(port)
    try:
        before = _tmp_dirs()
        r = subprocess.run(CLI + ["server", "--port", str(port)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("jssync server:"), r.stderr
        assert "Traceback" not in r.stderr
        assert _tmp_dirs() <= before
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=15)
    r = subprocess.run(CLI + ["server", "--port", "99999"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--port" in r.stderr
    with tempfile.NamedTemporaryFile() as f:
        before = _tmp_dirs()
        r = subprocess.run(CLI + ["server", "--port", "0", "--store-dir", f.name], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--store-dir" in r.stderr
        assert _tmp_dirs() <= before


def test_server_help_shows_the_defaults() -> None:
    r = subprocess.run(CLI + ["server", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert "default 4222" in r.stdout and "temporary" in r.stdout


def test_cli_finds_the_server_like_the_nats_cli(nats_url: str) -> None:
    """--server, else NATS_URL, else nats://127.0.0.1:4222."""
    env = {**os.environ, "NATS_URL": nats_url}
    r = subprocess.run(CLI + ["stream", "ls"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    port = _free_port()  # nothing listens there
    env["NATS_URL"] = f"nats://127.0.0.1:{port}"
    r = subprocess.run(CLI + ["stream", "ls"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and str(port) in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(CLI + ["stream", "ls", "--server", nats_url], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(CLI + ["--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("jssync ")
