"""One whole HTTP/1.1 message off a raw stream, parsed by h11 (a test's hand-made server or client)."""

from __future__ import annotations

import h11
import trio


async def next_message(conn: h11.Connection, stream: trio.abc.ReceiveStream,
                       ) -> tuple[h11.Request | h11.Response, bytes] | None:
    """The next message on `conn` (its head and its whole body), or None when the peer closes
    the connection (or sends anything else) before the message is whole."""
    head: h11.Request | h11.Response | None = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(bytes(data))
            if not data and conn.their_state is not h11.DONE:
                return None
        elif isinstance(event, h11.Request | h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and head is not None:
            return head, body
        else:
            return None
