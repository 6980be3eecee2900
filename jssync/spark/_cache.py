"""The executor-side connection cache: one :class:`~jssync.Client` per (process, config).

A PySpark Python worker process runs many tasks one after the other; connecting once per task
(the Scala connector connects once per partition) costs a TCP and TLS handshake, an INFO/CONNECT
exchange and a new PubAck inbox every time. Here a client is

* created lazily by the first task of a process that needs it (``get_client`` / ``lease``);
* reused by the following tasks with an equal :class:`NatsConfig` (the config is the key: it is
  a frozen, hashable value; the client itself is never pickled);
* evicted once idle: no lease held and not used for :data:`IDLE_TIMEOUT` seconds (60). Evictions
  happen on every access and in a small daemon sweeper thread that runs while the cache is not
  empty, so an idle worker does not hold a connection for long;
* closed and dropped with :func:`discard_client` after a failed task, so the retry starts on a
  fresh connection;
* forgotten (not closed: its socket belongs to the parent) in a forked child: the cache is keyed
  by ``os.getpid()`` and reset after ``fork``.

Nothing here waits for publishes: a writer task settles every ack before it returns, because
Spark may kill an idle worker without running ``atexit`` handlers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._config import NatsConfig

if TYPE_CHECKING:
    from jssync.client import Client
    from jssync.jetstream import JetStream

__all__ = [
    "IDLE_TIMEOUT",
    "get_client",
    "get_jetstream",
    "lease",
    "acquire",
    "release",
    "memo",
    "discard_client",
    "close_all",
    "sweep",
    "cached_configs",
]

_log = logging.getLogger("jssync.spark")

IDLE_TIMEOUT: float = float(os.environ.get("JSSYNC_SPARK_IDLE_TIMEOUT", "60"))
"""Seconds a cached client may stay unused (and unleased) before it is closed."""

_now = time.monotonic


class _Entry:
    __slots__ = ("client", "last_used", "leases", "contexts", "checked")

    def __init__(self, client: Client, now: float) -> None:
        self.client = client
        self.last_used = now
        self.leases = 0
        self.contexts: dict[tuple[int, float], JetStream] = {}
        self.checked: set[object] = set()  # per-client memo (e.g. duplicate-window checks done)


class _State:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.entries: dict[NatsConfig, _Entry] = {}
        self.sweeper: threading.Thread | None = None
        self.wake = threading.Event()


_state = _State()


def _after_fork_in_child() -> None:
    # The parent's clients (and their I/O threads) do not exist here: forget them, never close
    # them (their sockets are shared with the parent).
    global _state
    _state = _State()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _current() -> _State:
    global _state
    st = _state
    if st.pid != os.getpid():  # a fork we did not see (e.g. a fork before this module's hook)
        st = _state = _State()
    return st


def _close_quietly(client: Client) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - closing a broken client must not fail the caller
        _log.debug("jssync.spark: closing a cached client failed", exc_info=True)


def _sweep_locked(st: _State, now: float) -> list[Client]:
    victims: list[Client] = []
    for config, entry in list(st.entries.items()):
        if entry.client.is_closed or (entry.leases <= 0 and now - entry.last_used > IDLE_TIMEOUT):
            del st.entries[config]
            victims.append(entry.client)
    return victims


def sweep(now: float | None = None) -> int:
    """Close the cached clients idle for more than :data:`IDLE_TIMEOUT` (or already closed);
    returns how many were dropped. Called on every access and by the sweeper thread."""
    st = _current()
    with st.lock:
        victims = _sweep_locked(st, _now() if now is None else now)
    for client in victims:
        _close_quietly(client)
    return len(victims)


def _next_expiry_locked(st: _State) -> float | None:
    """When the first idle client (no lease) becomes evictable, if any is idle."""
    due = [e.last_used + IDLE_TIMEOUT for e in st.entries.values() if e.leases <= 0]
    return min(due) if due else None


def _run_sweeper(st: _State) -> None:
    """Sleeps until the first idle client's eviction time (or until a lease is given back or
    the cache is cleared), evicts what is due, and ends when the cache is empty."""
    while True:
        with st.lock:
            if not st.entries:
                st.sweeper = None
                return
            due = _next_expiry_locked(st)
        st.wake.wait(None if due is None else max(0.0, due - _now()) + 0.05)
        st.wake.clear()
        if st is not _state:  # forked / reset
            return
        sweep()


def _ensure_sweeper_locked(st: _State) -> None:
    if st.sweeper is None or not st.sweeper.is_alive():
        t = threading.Thread(target=_run_sweeper, args=(st,), name="jssync-spark-cache-sweeper", daemon=True)
        st.sweeper = t
        t.start()


def _entry(config: NatsConfig) -> _Entry:
    """The live entry for ``config`` (connecting if needed), marked used. Caller: no lock held."""
    if not isinstance(config, NatsConfig):
        raise TypeError(f"expected a NatsConfig, got {type(config).__name__}")
    st = _current()
    with st.lock:
        now = _now()
        victims = _sweep_locked(st, now)
        entry = st.entries.get(config)
        if entry is None:
            # Connect under the lock: two tasks of one process never open two connections for
            # one config (tasks of a Python worker run one at a time anyway).
            entry = _Entry(config.connect(), _now())
            st.entries[config] = entry
            _ensure_sweeper_locked(st)
        entry.last_used = now
    for client in victims:
        _close_quietly(client)
    return entry


def get_client(config: NatsConfig) -> Client:
    """The cached client of this process for ``config``, connecting on first use."""
    return _entry(config).client


def get_jetstream(config: NatsConfig, *, max_pending: int = 4000, ack_timeout: float = 30.0) -> JetStream:
    """A JetStream context of the cached client, with its async-publish window configured.
    One context per (client, max_pending, ack_timeout): its PubAck inbox and worker are reused."""
    entry = _entry(config)
    key = (max_pending, float(ack_timeout))
    st = _current()
    with st.lock:
        js = entry.contexts.get(key)
        if js is None:
            js = entry.client.jetstream()
            js.configure_publish(max_pending=max_pending, ack_timeout=ack_timeout)
            entry.contexts[key] = js
    return js


def acquire(config: NatsConfig) -> Client:
    """Take a lease on the cached client of ``config`` (connecting if needed): it is not
    evicted until :func:`release` is called, however long that takes."""
    entry = _entry(config)
    st = _current()
    with st.lock:
        entry.leases += 1
    return entry.client


def release(config: NatsConfig, client: Client) -> None:
    """Give back a lease taken by :func:`acquire` (a no-op if the client was dropped since)."""
    st = _current()
    with st.lock:
        entry = st.entries.get(config)
        if entry is not None and entry.client is client:
            entry.leases = max(0, entry.leases - 1)
            entry.last_used = _now()
            if entry.leases == 0:
                st.wake.set()  # (a new idle client: the sweeper recomputes when to wake)


@contextlib.contextmanager
def lease(config: NatsConfig) -> Iterator[Client]:
    """Hold the cached client for the block: it is not evicted while leased, however long."""
    client = acquire(config)
    try:
        yield client
    finally:
        release(config, client)


def memo(config: NatsConfig, key: object) -> bool:
    """True the first time ``key`` is seen for the cached client of ``config`` (then False until
    the client is dropped): "do this once per connection" (e.g. check the duplicate window)."""
    entry = _entry(config)
    st = _current()
    with st.lock:
        if key in entry.checked:
            return False
        entry.checked.add(key)
        return True


def discard_client(config: NatsConfig, client: Client | None = None) -> bool:
    """Close and drop the cached client of ``config`` (only if it is ``client``, when given).
    Call it after a failed task, so the retry starts on a fresh connection. True if one was
    dropped."""
    st = _current()
    with st.lock:
        entry = st.entries.get(config)
        if entry is None or (client is not None and entry.client is not client):
            victim = None
        else:
            del st.entries[config]
            victim = entry.client
    if client is not None and victim is None and not client.is_closed:
        # Not (or no longer) the cached one: still close the caller's broken client.
        _close_quietly(client)
    if victim is None:
        return False
    _close_quietly(victim)
    return True


def close_all() -> None:
    """Close and drop every cached client of this process."""
    st = _current()
    with st.lock:
        victims = [e.client for e in st.entries.values()]
        st.entries.clear()
        st.wake.set()
    for client in victims:
        _close_quietly(client)


def cached_configs() -> list[NatsConfig]:
    """The configs with a cached client in this process (for tests and diagnostics)."""
    st = _current()
    with st.lock:
        return list(st.entries)
