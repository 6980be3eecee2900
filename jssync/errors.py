"""The exception hierarchy (``jscore.errors``), importable as ``jssync.errors``."""

from jscore.errors import *  # noqa: F403
from jscore.errors import __all__ as __all__
