"""The access log: one JSON line per request, written in batches.

Going through `logging` for every request costs about 30 µs (a LogRecord, the formatter's
dict and json.dumps, a handler lock, a flush syscall), as much as a repeated estimate itself
(bench/profile.txt). Here a line is one f-string (the fields from outside are JSON-escaped,
the rest are known safe), appended to a buffer that goes to the log handler's stream in one
write per `FLUSH_INTERVAL_S` or `FLUSH_BYTES`, like nginx's buffered access log. The lines
keep the JSON layout of every other log line (service/api/middleware.py: JsonLogFormatter).

A crash can lose at most the last interval's lines; shutdown flushes them (the app's lifespan).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

FLUSH_INTERVAL_S = 0.2
FLUSH_BYTES = 64 * 1024

access_logger = logging.getLogger("service.access")


class AccessLog:
    def __init__(self, handler: logging.StreamHandler) -> None:  # type: ignore[type-arg]
        self.handler = handler
        self.parts: list[str] = []
        self.size = 0
        self.flush_scheduled = False
        self.second = -1
        self.stamp = ""

    def enabled(self) -> bool:
        return access_logger.isEnabledFor(logging.INFO)

    def write(
        self,
        request_id: str,
        method: str,
        path: str,
        route: str,
        status: int,
        seconds: float,
        client: str,
    ) -> None:
        now = int(time.time())
        if now != self.second:  # strftime once per second, not per line
            self.second, self.stamp = now, time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
        # request_id is [A-Za-z0-9._:-] (validated or generated) and route a template or
        # "unmatched": safe as they are. method, path and client come from outside: escaped.
        line = (
            f'{{"time":"{self.stamp}","level":"info","logger":"service.access",'
            f'"message":"request","request_id":"{request_id}","method":{json.dumps(method)},'
            f'"path":{json.dumps(path)},"route":"{route}","status":{status},'
            f'"duration_ms":{round(seconds * 1000, 3)},"client":{json.dumps(client)}}}\n'
        )
        self.parts.append(line)
        self.size += len(line)
        if self.size >= FLUSH_BYTES:
            self.flush()
        elif not self.flush_scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on an event loop: nothing would flush later
                self.flush()
                return
            self.flush_scheduled = True
            loop.call_later(FLUSH_INTERVAL_S, self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        if not self.parts:
            return
        text = "".join(self.parts)
        self.parts.clear()
        self.size = 0
        self.handler.acquire()
        try:
            self.handler.stream.write(text)
            self.handler.flush()
        finally:
            self.handler.release()
