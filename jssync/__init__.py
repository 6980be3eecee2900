"""jssync: a synchronous NATS and JetStream client for Python.

    import jssync
    with jssync.connect("nats://127.0.0.1:4222") as nc:
        nc.publish("greet", b"hello")
"""

from . import errors
from jscore.headers import Headers

from . import events
from .client import Client, Subscription, connect
from .msg import Msg

__version__ = "0.1.0"

__all__ = ["connect", "Client", "Subscription", "Msg", "Headers", "errors", "events", "__version__"]
