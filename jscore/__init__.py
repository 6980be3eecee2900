"""jscore: the sans-IO core of jssync.

The NATS wire protocol, the connection machine and (in later modules) the JetStream models and
pull-consumer engine, driven by events and an injected ``now``. Nothing here does I/O, starts a
thread, reads a clock or touches the global random generator.
"""

from . import errors, events
from .connection import ConnectOptions, Connection, State, parse_server_url
from .headers import Headers, encode_headers, parse_header_block
from .protocol import Parser

__all__ = [
    "errors",
    "events",
    "ConnectOptions",
    "Connection",
    "State",
    "parse_server_url",
    "Headers",
    "encode_headers",
    "parse_header_block",
    "Parser",
]
