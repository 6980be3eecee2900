"""Whether a caller waiting for an answer spins before it sleeps, and for how long.

A thread that sleeps in ``poll`` is woken late when its answer comes: on a virtual machine an
idle processor is handed back to the host, and getting it back costs tens of microseconds. The
server's threads are woken late too when the caller was slow to send its next request. On
loopback that nearly doubles a round trip: a synchronous publish is answered in about 43 us to
a caller that polls without sleeping, in about 80 us to one that sleeps (nats-server on a
2-core virtual machine).

Two rules, both pure (the caller measures and tells; these decide):

* :class:`ReplySpin`, per connection: spin for up to :data:`SPIN_LIMIT` while the waits that
  spun got their first bytes within it on average. A sample is the time from the start of the
  wait to the first bytes on the socket, counted as :data:`SAMPLE_CAP` at most, so that one
  slow request (a stream create) weighs little. Once the average is past the limit (a server
  across a network, a slow responder) waits sleep at once, but every :data:`PROBE_EVERY`-th
  one spins again and is measured: the rule turns itself back on when answers come quickly
  again, and costs a remote server one short spin in that many waits.
* :class:`Callers`, per process: spin only while a single thread has been waiting for answers
  lately. Threads taking turns at round trips (several callers on one connection, or one
  connection each) lose more to a spinner, which holds a processor and takes the GIL back
  after every poll, than they gain: after another thread waited, nobody spins for
  :data:`SHARED_HOLD`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ReplySpin", "Callers", "SPIN_LIMIT", "SAMPLE_CAP", "PROBE_EVERY", "SHARED_HOLD"]

SPIN_LIMIT: Final = 150e-6  # the longest spin, and the average answer time up to which it spins (s)
SAMPLE_CAP: Final = 1e-3  # a sample counts as at most this (s)
PROBE_EVERY: Final = 16  # while spinning is off, every this many waits spin anyway, to measure
SHARED_HOLD: Final = 0.05  # no spin for this long after a second thread waited for an answer (s)
_WEIGHT: Final = 0.125  # of a new sample in the moving average


class ReplySpin:
    """A moving average of how long the waits that spun took to their first bytes, and the spin
    budget it allows."""

    __slots__ = ("average", "_skipped")

    def __init__(self) -> None:
        self.average = 0.0  # starts fast: the first waits spin, and teach it otherwise
        self._skipped = 0

    def budget(self, probe: bool = True) -> float:
        """Seconds to poll without sleeping before the next wait sleeps (0: sleep at once). Call
        once per wait, and :meth:`observe` what a wait given a budget took. A wait that will
        not be measured (``probe=False``: a long poll) spins only while the rule is on, and
        takes no probe's turn."""
        if self.average < SPIN_LIMIT:
            return SPIN_LIMIT
        if not probe:
            return 0.0
        self._skipped += 1
        if self._skipped >= PROBE_EVERY:
            self._skipped = 0
            return SPIN_LIMIT  # a probe
        return 0.0

    def observe(self, waited: float) -> None:
        """A wait that was given a budget had its first bytes after ``waited`` seconds."""
        if waited > SAMPLE_CAP:
            waited = SAMPLE_CAP
        elif waited < 0.0:
            waited = 0.0
        self.average += (waited - self.average) * _WEIGHT


class Callers:
    """Which thread of the process waited for an answer last, and whether one has been alone
    at it lately (the threads are named by any hashable the caller picks, its ident)."""

    __slots__ = ("last", "shared_until")

    def __init__(self) -> None:
        self.last: object = None
        self.shared_until = 0.0

    def note(self, caller: object, now: float) -> None:
        """``caller`` is about to wait for an answer at ``now``."""
        last = self.last
        if caller != last:
            self.last = caller
            if last is not None:
                self.shared_until = now + SHARED_HOLD

    def alone(self, now: float) -> bool:
        """No second thread waited for an answer in the last :data:`SHARED_HOLD` seconds."""
        return now >= self.shared_until
