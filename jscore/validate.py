"""Checks of the plain values every API takes (timeouts, flags), made before anything is sent.

One rule for every blocking call: a timeout is a real number of seconds, finite, and greater
than zero (or, where the call says so, zero or ``None``); anything else is an
:class:`~jscore.errors.InvalidOptionError` naming the option, raised before a frame is queued.
"""

from __future__ import annotations

import math

from .errors import InvalidOptionError

__all__ = ["check_timeout", "check_optional_timeout", "check_poll_timeout", "check_bool", "check_optional_flag"]


def check_timeout(value: object, name: str = "timeout") -> float:
    """``value`` as float seconds if it is a finite number > 0, else :class:`InvalidOptionError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOptionError(f"{name} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidOptionError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


def check_optional_timeout(value: object, name: str = "timeout") -> float | None:
    """Like :func:`check_timeout`, but ``None`` (wait for ever) and ``0`` (do not wait) pass."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOptionError(f"{name} must be a number of seconds or None, got {value!r}")
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise InvalidOptionError(f"{name} must be a finite number of seconds >= 0 or None, got {value!r}")
    return seconds


def check_poll_timeout(value: object, name: str = "timeout") -> float:
    """The timeout of a blocking ``next`` of an iterator: finite seconds >= 0, where ``0`` polls
    (an item already there, else the timeout error at once). ``None`` is refused like any other
    non-number: every blocking call has a timeout (iterate to wait without one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOptionError(f"{name} must be a number of seconds (0 polls), got {value!r}")
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise InvalidOptionError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


def check_bool(value: object, name: str) -> bool:
    """``value`` if it is a bool, else :class:`InvalidOptionError` naming the option (a truthy
    string such as ``"no"`` must not switch an option on)."""
    if not isinstance(value, bool):
        raise InvalidOptionError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_optional_flag(value: object, name: str) -> bool | None:
    """``value`` if it is a bool or None (the default applies), else :class:`InvalidOptionError`."""
    return None if value is None else check_bool(value, name)
