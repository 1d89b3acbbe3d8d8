"""``throttle_time_ms`` written into a response already encoded (KIP-219).

Most responses are kio entities, re-encoded with the field set. Produce is written
straight to bytes around stored batches; its field (v1+) is patched in place, last in the
body before the flexible versions' tagged fields (none written). A throttled Fetch is
answered empty, its throttle time first in the body: Kafka's throttled full-session
response, the client fetches the same offsets again once it may. A ShareFetch's field is
first in its body too, patched there: its records, already acquired for the member, go
out with it.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
from collections.abc import Sequence
from typing import Any

from kplane.broker.utils.file_region import Transferable
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.fetch_codec import encode_fetch_response

_I32 = struct.Struct(">i")
_PRODUCE_FLEXIBLE_SINCE = 9


def with_throttle_time(body: Any, throttle_ms: int) -> Any | None:
    """``body`` with its ``throttle_time`` set, or ``None`` when it has no such field."""
    if "throttle_time" not in getattr(body, "__dataclass_fields__", {}):
        return None
    return dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


def patch_throttle_time(
    api_key: int, version: int, pieces: Sequence[Transferable], throttle_ms: int
) -> list[Transferable]:
    """Body pieces of a Produce response with ``throttle_time_ms`` set (unchanged for
    versions without the field, or pieces not laid out as expected); a Fetch's throttled
    answer, empty (v1+); a ShareFetch response with its first field set."""
    value = _I32.pack(min(throttle_ms, 2**31 - 1))
    if api_key == ApiKey.SHARE_FETCH and pieces:
        head = pieces[0]
        if isinstance(head, bytes | memoryview) and len(head) >= 4:
            return [value + bytes(head[4:]), *pieces[1:]]
    if api_key == ApiKey.FETCH and version >= 1:
        return list(
            encode_fetch_response(version, [], throttle_time_ms=min(throttle_ms, 2**31 - 1))
        )
    if api_key == ApiKey.PRODUCE and version >= 1 and pieces:
        tail = pieces[-1]
        if isinstance(tail, bytes | memoryview):
            data = bytes(tail)
            if version >= _PRODUCE_FLEXIBLE_SINCE:
                if len(data) >= 5 and data[-1] == 0:
                    return [*pieces[:-1], data[:-5] + value + data[-1:]]
            elif len(data) >= 4:
                return [*pieces[:-1], data[:-4] + value]
    return list(pieces)
