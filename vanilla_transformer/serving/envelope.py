"""What every request to the server goes through, before and after its endpoint: `Envelope`."""

import asyncio
import json
import logging
import time
import uuid

from starlette.requests import ClientDisconnect

from .metrics import ServerMetrics

LOG = logging.getLogger("uvicorn.error")  # the server's log, which uvicorn configures
ENDPOINTS = ("/translate", "/score", "/detect", "/languages", "/health", "/ready", "/metrics")
PROBES = ("/health", "/ready", "/metrics")  # answered whatever the load, for the operator's monitoring
DISCONNECTED = 499  # the status a request is counted under when its client left before the answer (nginx's code)


class Envelope:
    """What every request goes through (a plain ASGI middleware: it adds next to nothing to a request's cost):
    an id, sent back in `X-Request-ID`; 503 beyond `limit` requests in progress (the probes excepted); an
    unexpected error answered as a JSON 500 and logged once with the id; a client that left before its answer
    counted under status 499 and logged at info; and every answer in the metrics, by endpoint and status, with its
    latency."""

    def __init__(self, app, metrics: ServerMetrics, limit: int):
        self.app, self.metrics, self.limit = app, metrics, limit
        self.in_progress = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, request_id, status = time.perf_counter(), uuid.uuid4().hex[:16], [None]
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.answer(scope, receive, send_with_id, endpoint)
        except ClientDisconnect:
            LOG.info("request %s: %s %s: the client disconnected before its answer", request_id, scope["method"],
                     scope["path"])  # fmt: skip
        except asyncio.CancelledError:  # uvicorn ends what its drain did not finish: the request ends here
            LOG.warning("request %s: %s %s: not answered within --drain-timeout", request_id, scope["method"],
                        scope["path"])  # fmt: skip
            if status[0] is None:
                await json_response(send_with_id, 503, {"error": "the server stopped before answering it"})
        except Exception:
            LOG.exception("request %s: %s %s failed", request_id, scope["method"], scope["path"])
            if status[0] is None:
                error = f"internal error: the server's log has its details under request id {request_id}"
                await json_response(send_with_id, 500, {"error": error})
        finally:
            labels = (endpoint, str(status[0] or DISCONNECTED))
            self.metrics.requests.labels(*labels).inc()
            self.metrics.latency.labels(*labels).observe(time.perf_counter() - start)

    async def answer(self, scope, receive, send, endpoint: str) -> None:
        if self.in_progress >= self.limit and endpoint not in PROBES:
            error = f"the server has {self.in_progress} requests in progress, its limit (--limit-concurrency)"
            return await json_response(send, 503, {"error": error}, retry_after=1)
        self.in_progress += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_progress -= 1


async def json_response(send, status: int, body: dict, retry_after: int | None = None) -> None:
    """A JSON answer sent on a bare ASGI `send`."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
