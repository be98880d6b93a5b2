"""A load generator in its own process (so it never competes for the server's GIL or the
test's): N keep-alive connections POSTing one path as fast as answers come, for a duration.
A client told `503` with `Retry-After` waits that long before its next request, as a
scheduler calling the service should (set LOAD_IGNORE_RETRY_AFTER=1 to hammer instead).

`python -m tests.server.load URL PATH CONNECTIONS SECONDS [BODY]` prints one JSON line of
counts: each status, "error" (transport errors) and "retry-after N" (Retry-After values seen).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import time
from urllib.parse import urlsplit

IGNORE_RETRY_AFTER = os.environ.get("LOAD_IGNORE_RETRY_AFTER") == "1"


async def _client(
    host: str, port: int, request: bytes, deadline: float, tally: collections.Counter[str]
) -> None:
    reader = writer = None
    while time.monotonic() < deadline:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            assert reader is not None
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1].decode()
            length = 0
            retry_after = 0.0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                if name.lower() == b"retry-after":
                    tally[f"retry-after {value.strip().decode()}"] += 1
                    retry_after = float(value)
                if name.lower() == b"connection" and value.strip().lower() == b"close":
                    writer.close()
                    writer = None
            await reader.readexactly(length)
            tally[status] += 1
            if retry_after and not IGNORE_RETRY_AFTER:
                await asyncio.sleep(min(retry_after, max(0.0, deadline - time.monotonic())))
        except (OSError, asyncio.IncompleteReadError):
            tally["error"] += 1
            writer = None
            await asyncio.sleep(0.01)
    if writer is not None:
        writer.close()


async def main(url: str, path: str, connections: int, seconds: float, body: bytes) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    tally: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + seconds
    await asyncio.gather(
        *(_client(host, port, request, deadline, tally) for _ in range(connections))
    )
    print(json.dumps(dict(tally)), flush=True)


if __name__ == "__main__":
    url, path, conns, secs = sys.argv[1:5]
    payload = sys.argv[5].encode() if len(sys.argv) > 5 else b"{}"
    asyncio.run(main(url, path, int(conns), float(secs), payload))
