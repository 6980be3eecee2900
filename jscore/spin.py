"""How long a caller waiting for an answer spins before it sleeps.

A thread that sleeps in ``poll`` is woken late when its answer comes: on a virtual machine an
idle processor is handed back to the host, and getting it back costs tens of microseconds. The
server's threads are woken late too when the caller was slow to send its next request. On
loopback that doubles a round trip: a synchronous publish answered in about 45 us to a caller
that polls without sleeping takes about 80 us to one that sleeps (nats-server on a 2-core
virtual machine).

:class:`ReplySpin` decides, for each wait, whether the caller first polls without sleeping, and
for how long: while answers come quickly on average, up to :data:`SPIN_LIMIT`; when they do not
(a server across a network, a slow responder), not at all, so a remote server costs no CPU.
The average is of how long each wait took until its first bytes came, a sample capped at
:data:`SAMPLE_CAP` so that one slow request (a stream create, a long fetch) turns spinning off
for a few waits, not for a hundred. Pure: the caller measures, this decides.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ReplySpin", "SPIN_LIMIT", "SAMPLE_CAP"]

SPIN_LIMIT: Final = 150e-6  # the longest spin, and the average answer time up to which it spins (s)
SAMPLE_CAP: Final = 1e-3  # a sample counts as at most this (s)
_WEIGHT: Final = 0.125  # of a new sample in the moving average


class ReplySpin:
    """A moving average of how long waits for an answer took; the spin budget it allows."""

    __slots__ = ("average",)

    def __init__(self) -> None:
        self.average = 0.0  # starts fast: the first waits spin, and teach it otherwise

    def budget(self) -> float:
        """Seconds to poll without sleeping before the next wait sleeps (0: sleep at once)."""
        return SPIN_LIMIT if self.average < SPIN_LIMIT else 0.0

    def observe(self, waited: float) -> None:
        """A wait took ``waited`` seconds until its first bytes came (or it gave up)."""
        if waited > SAMPLE_CAP:
            waited = SAMPLE_CAP
        elif waited < 0.0:
            waited = 0.0
        self.average += (waited - self.average) * _WEIGHT
