"""jssync: a synchronous NATS and JetStream client for Python.

    import jssync
    with jssync.connect("nats://127.0.0.1:4222") as nc:
        nc.publish("greet", b"hello")
        js = nc.jetstream()
        js.create_stream(name="ORDERS", subjects=["orders.>"])
"""

from jscore.headers import Headers
from jscore.models import (
    AccountInfo,
    AckPolicy,
    Compression,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    PersistMode,
    Placement,
    PriorityPolicy,
    PubAck,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StoredMsg,
    StreamConfig,
    StreamInfo,
    StreamState,
)
from jscore.jsmsg import MsgMetadata, SequencePair
from jscore.models import PauseResponse
from jscore.times import NatsTime

from . import errors, events
from .client import Client, Subscription, connect
from .consumer import Consumer
from .events import (
    ConsumerReconnected,
    ConsumeTerminated,
    HeartbeatMissed,
    PinIdChanged,
    PinIdCleared,
    StatusWarning,
)
from .jetstream import JetStream
from .msg import JsMsg, Msg
from .ordered import OrderedConsumeContext, OrderedConsumer, OrderedMessageStream
from .objstore import ObjectInfo, ObjectLink, ObjectResult, ObjectStore, ObjectStoreStatus, ObjectWatcher
from .pull import ConsumeContext, FetchResult, MessageStream
from .stream import Stream
from .kv import KeyValue, KeyWatcher, KeyValueEntry, KeyValueOp, KeyValueStatus

__version__ = "0.1.0"

__all__ = [
    "connect",
    "Client",
    "Subscription",
    "Msg",
    "Headers",
    "errors",
    "events",
    "__version__",
    # JetStream
    "JetStream",
    "Stream",
    "Consumer",
    "JsMsg",
    "FetchResult",
    "ConsumeContext",
    "MessageStream",
    "OrderedConsumer",
    "ObjectInfo",
    "ObjectLink",
    "ObjectResult",
    "ObjectStore",
    "ObjectStoreStatus",
    "ObjectWatcher",
    "OrderedConsumeContext",
    "OrderedMessageStream",
    # consume notifications
    "HeartbeatMissed",
    "StatusWarning",
    "PinIdChanged",
    "PinIdCleared",
    "ConsumerReconnected",
    "ConsumeTerminated",
    # key-value store
    "KeyValue",
    "KeyWatcher",
    "KeyValueEntry",
    "KeyValueOp",
    "KeyValueStatus",
    # models
    "StreamConfig",
    "StreamInfo",
    "StreamState",
    "ConsumerConfig",
    "ConsumerInfo",
    "PubAck",
    "AccountInfo",
    "StoredMsg",
    "MsgMetadata",
    "SequencePair",
    "PauseResponse",
    "Placement",
    "NatsTime",
    # enums
    "RetentionPolicy",
    "DiscardPolicy",
    "StorageType",
    "Compression",
    "PersistMode",
    "AckPolicy",
    "DeliverPolicy",
    "ReplayPolicy",
    "PriorityPolicy",
]
