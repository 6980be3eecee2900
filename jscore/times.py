"""Server timestamps that keep their nanoseconds.

nats-server stamps every stored message with nanosecond precision, and finds a message by time
(``start_time`` of a direct get, ``opt_start_time`` of a consumer, ``up_to_time``) with that
precision: the first message stored *at or after* the given time. A :class:`datetime` holds
microseconds only, so a stamp rounded to the nearest microsecond is later than the message's
own stamp about half the time, and asking for "at or after" it skips the message.

:class:`NatsTime` is a :class:`datetime` (so it compares, formats and computes like one) that
remembers the nanoseconds below the microsecond:

* its datetime value is the server's time *truncated* to microseconds, never later than the
  message's stamp, so even code that only sees a plain datetime finds the message again;
* :attr:`NatsTime.ns` is the exact time in integer nanoseconds since the Unix epoch, and
  :meth:`NatsTime.rfc3339` the exact RFC 3339 text; requests built by :mod:`jscore.models`
  send a ``NatsTime`` with all nine digits, so ``start_time=msg.time`` names exactly ``msg``;
* two ``NatsTime`` values compare by their nanoseconds; against a plain datetime the
  datetime rules apply (the nanoseconds below the microsecond are not seen).

Every server timestamp the client decodes is a ``NatsTime``: the times of stored messages
(direct get, ``STREAM.MSG.GET``), message metadata, and the timestamps of API responses.
Arithmetic (``t + timedelta``, ``t.replace(...)``) gives a value without the extra
nanoseconds (truncated, still never later than the original).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Final

__all__ = ["NatsTime", "parse_nats_time", "format_rfc3339", "from_unix_ns", "unix_ns"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_UTC: Final = timezone.utc
_SECONDS_LIMIT: Final = 1024  # entries of each cache of seconds below
_new_datetime: Final = datetime.__new__  # (makes a NatsTime without its checks: callers give valid fields)
_US: Final = timedelta(microseconds=1)

_TIME_RE: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
    r"(?:\s*(Z|[+-]\d\d:?\d\d))?(?:\s+(?:[A-Za-z]{1,5}|[+-]\d{2,4}))?"
)


class NatsTime(datetime):
    """An aware datetime (truncated to microseconds) plus the server's nanoseconds below the
    microsecond (:attr:`nanosecond`, 0-999). See the module docstring."""

    __slots__ = ("_nanosecond",)
    _nanosecond: int

    def __new__(
        cls,
        year: int,
        month: int,
        day: int,
        hour: int = 0,
        minute: int = 0,
        second: int = 0,
        microsecond: int = 0,
        tzinfo: tzinfo | None = None,
        *,
        fold: int = 0,
        nanosecond: int = 0,
    ) -> NatsTime:
        if isinstance(nanosecond, bool) or not isinstance(nanosecond, int) or not 0 <= nanosecond <= 999:
            raise ValueError(f"nanosecond must be an int in 0..999, got {nanosecond!r}")
        self = super().__new__(cls, year, month, day, hour, minute, second, microsecond, tzinfo, fold=fold)
        self._nanosecond = nanosecond
        return self

    @property
    def nanosecond(self) -> int:
        """The nanoseconds below :attr:`microsecond` (0-999)."""
        return _nanos(self)

    @property
    def ns(self) -> int:
        """The exact time in nanoseconds since the Unix epoch (needs a timezone)."""
        return unix_ns(self)

    def rfc3339(self) -> str:
        """The exact time as RFC 3339 in UTC with nine fractional digits (what the server sends)."""
        return format_rfc3339(self)

    # -- comparisons: two NatsTime values by their nanoseconds ---------------------------

    def _key(self, other: object) -> tuple[int, int] | None:
        if isinstance(other, NatsTime) and self.tzinfo is not None and other.tzinfo is not None:
            return unix_ns(self), unix_ns(other)
        return None

    def __eq__(self, other: object) -> bool:
        k = self._key(other)
        return datetime.__eq__(self, other) if k is None else k[0] == k[1]

    def __ne__(self, other: object) -> bool:
        k = self._key(other)
        return datetime.__ne__(self, other) if k is None else k[0] != k[1]

    def __lt__(self, other: datetime) -> bool:  # type: ignore[override]
        k = self._key(other)
        return datetime.__lt__(self, other) if k is None else k[0] < k[1]

    def __le__(self, other: datetime) -> bool:  # type: ignore[override]
        k = self._key(other)
        return datetime.__le__(self, other) if k is None else k[0] <= k[1]

    def __gt__(self, other: datetime) -> bool:  # type: ignore[override]
        k = self._key(other)
        return datetime.__gt__(self, other) if k is None else k[0] > k[1]

    def __ge__(self, other: datetime) -> bool:  # type: ignore[override]
        k = self._key(other)
        return datetime.__ge__(self, other) if k is None else k[0] >= k[1]

    __hash__ = datetime.__hash__  # equal NatsTimes have equal microseconds: equal hashes

    # -- copies and pickles keep the nanoseconds ------------------------------------------

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                self.year, self.month, self.day, self.hour, self.minute, self.second,
                self.microsecond, self.tzinfo, self.fold, _nanos(self),
            ),
        )  # fmt: skip

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__reduce_ex__(2)

    def __repr__(self) -> str:
        base = datetime.__repr__(self)
        nanos = _nanos(self)
        return f"{base[:-1]}, nanosecond={nanos})" if nanos else base


def _nanos(value: datetime) -> int:
    # (0 for a plain datetime, and for a NatsTime made by a C path that skipped __new__)
    return getattr(value, "_nanosecond", 0) if isinstance(value, NatsTime) else 0


def _rebuild(
    year: int, month: int, day: int, hour: int, minute: int, second: int, microsecond: int,
    tz: tzinfo | None, fold: int, nanosecond: int,
) -> NatsTime:  # fmt: skip
    return NatsTime(year, month, day, hour, minute, second, microsecond, tz, fold=fold, nanosecond=nanosecond)


def unix_ns(value: datetime) -> int:
    """Nanoseconds since the Unix epoch of an aware datetime (a :class:`NatsTime` exactly)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"a naive datetime has no position in time: {value!r}")
    micros = (value - _EPOCH) // _US
    return micros * 1000 + _nanos(value)


_utc_seconds: dict[int, tuple[int, int, int, int, int, int]] = {}


def from_unix_ns(ns: int, tz: tzinfo = timezone.utc) -> NatsTime:
    """The :class:`NatsTime` of ``ns`` nanoseconds since the Unix epoch."""
    if tz is _UTC:
        # (the common case, every message's metadata: the date and time of the second cached)
        seconds, below = divmod(ns, 1_000_000_000)
        fields = _utc_seconds.get(seconds)
        if fields is None:
            d = _EPOCH + timedelta(seconds=seconds)
            if len(_utc_seconds) >= _SECONDS_LIMIT:
                _utc_seconds.clear()
            fields = _utc_seconds[seconds] = (d.year, d.month, d.day, d.hour, d.minute, d.second)
        value: NatsTime = _new_datetime(NatsTime, *fields, below // 1000, _UTC)
        value._nanosecond = below % 1000
        return value
    micros, nanos = divmod(ns, 1000)
    d = (_EPOCH + timedelta(microseconds=micros)).astimezone(tz)
    return NatsTime(d.year, d.month, d.day, d.hour, d.minute, d.second, d.microsecond, d.tzinfo, nanosecond=nanos)


def format_rfc3339(value: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.fffffffffZ`` in UTC with nine fractional digits (exact for a
    :class:`NatsTime`, the microseconds and ``000`` otherwise). Needs an aware datetime."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"a naive datetime has no position in time: {value!r}")
    nanos = _nanos(value)
    u = value.astimezone(timezone.utc)
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        f".{u.microsecond:06d}{nanos:03d}Z"
    )


# The form nats-server 2.15 sends (``2026-11-22T01:44:53.269610481Z``, trailing zeros of the
# fraction left out) is read
# without the general expression: the date and time before the fraction, checked once, are
# cached (the messages of one batch share a handful of seconds), so a stamp costs two slices,
# one int() and the datetime constructor.
_SECOND_RE: Final = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")
_seconds: dict[str, tuple[int, int, int, int, int, int]] = {}
_FRACTION_SCALE: Final = tuple(10 ** (9 - digits) for digits in range(10))


def _second_fields(head: str) -> tuple[int, int, int, int, int, int] | None:
    """The fields of ``YYYY-MM-DDTHH:MM:SS`` when it is a valid time (cached), else None."""
    m = _SECOND_RE.fullmatch(head)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    try:
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None
    if len(_seconds) >= _SECONDS_LIMIT:
        _seconds.clear()
    fields = _seconds[head] = (year, month, day, hour, minute, second)
    return fields


def check_server_stamp(text: str) -> None:
    """What :func:`parse_server_stamp` checks of such a stamp (that its date and time exist),
    without making the datetime: ValueError if they do not."""
    head = text[:19]
    if head not in _seconds and _second_fields(head) is None:
        raise ValueError(f"invalid timestamp {text[:64]!r}")


def parse_server_stamp(text: str) -> NatsTime:
    """:func:`parse_nats_time` of a stamp already matched as ``YYYY-MM-DDTHH:MM:SS.f...Z`` with
    ASCII digits and 1 to 9 fractional digits (a direct get reply's, checked by the header
    parser's match): only whether that date and time exist is left to check. ValueError if
    they do not."""
    head = text[:19]
    fields = _seconds.get(head) or _second_fields(head)
    if fields is None:
        raise ValueError(f"invalid timestamp {text[:64]!r}")
    frac = text[20:-1]
    nanos = int(frac) * _FRACTION_SCALE[len(frac)]
    value: NatsTime = _new_datetime(NatsTime, *fields, nanos // 1000, _UTC)
    value._nanosecond = nanos % 1000
    return value


def parse_nats_time(text: str) -> NatsTime:
    """Parse a server timestamp: RFC 3339 with up to nanoseconds (``2026-11-22T01:44:53.269610481Z``,
    what nats-server 2.15 sends) or Go's ``time.String()`` form (``2022-08-06 00:29:27.587861324
    +0000 UTC``, older servers' ``Nats-Time-Stamp``). Returns an exact :class:`NatsTime`.
    Raises ValueError if it is neither."""
    if 22 <= len(text) <= 30 and text[-1] == "Z" and text[19] == ".":
        frac = text[20:-1]  # 1 to 9 digits (Go leaves out trailing zeros)
        if frac.isdecimal():
            head = text[:19]
            fields = _seconds.get(head) or _second_fields(head)
            if fields is not None:
                nanos = int(frac) * _FRACTION_SCALE[len(frac)]
                value: NatsTime = _new_datetime(NatsTime, *fields, nanos // 1000, _UTC)
                value._nanosecond = nanos % 1000
                return value
    m = _TIME_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"invalid timestamp {text[:64]!r}")
    year, month, day, hour, minute, second, frac, tz = m.groups()
    nanos = int((frac or "0").ljust(9, "0"))
    zone: tzinfo
    if tz is None or tz == "Z":
        zone = timezone.utc
    else:
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        zone = timezone.utc if not offset else timezone(sign * offset)
    try:
        return NatsTime(
            int(year), int(month), int(day), int(hour), int(minute), int(second),
            nanos // 1000, zone, nanosecond=nanos % 1000,
        )  # fmt: skip
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"invalid timestamp {text[:64]!r}: {exc}") from None
