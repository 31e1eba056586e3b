"""The server's HTTP connections: uvicorn's httptools protocol with limits on what a client may hold.

uvicorn closes a connection that stays idle between requests (`timeout_keep_alive`), but not one that opens and
sends its headers slowly or never, sends headers without end, or trickles a body the server never reads: such
clients could hold sockets and memory for ever. Here a connection gets `seconds` to send each request's headers, from
the moment it opens, or the request's first byte arrives once the answer before it is sent; past that it is answered
408 (JSON, as every error) and closed. A request line and headers over `MAX_HEADER_BYTES` are answered 431 and closed
(414 where the URL alone is over it); what is not HTTP is answered 400 in JSON, and closed. A request answered before
its body was all received (a 413) gets `seconds` more for the rest, which is read and dropped, and the connection
goes on; past that it is closed, as bytes trickled would otherwise keep it open. A client that hangs up is marked
gone on the request being answered, not only on the last one it sent (pipelined). The body has its own limits, in
the app (`fields.read_fields`)."""

import json
import uuid

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = 64 * 1024  # a request line and headers beyond this are answered 431


def json_answer(status: str, error: str) -> bytes:
    """A whole HTTP answer with the JSON error `error`, that closes the connection, with a request id."""
    body = json.dumps({"error": error}).encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"x-request-id: {uuid.uuid4().hex[:16]}\r\nconnection: close\r\n\r\n".encode()
        + body
    )


class HeadersTooLarge(Exception):
    """Raised from the parser's callbacks (httptools then stops, and uvicorn calls `send_400_response`)."""


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits the module's docstring gives; `seconds`: --read-timeout."""

    seconds = 15.0
    header_timer = None
    header_bytes = 0  # of the request whose headers are awaited: its line and headers parsed so far
    waiting_bytes = 0  # the bytes of the reads since those headers began, not parsed yet (a header still arriving)
    reads = headers_began = 0  # which read of the connection this is, and in which the headers began
    too_large = ""  # what is over the limit: "url" or "headers"
    url_bytes = 0  # of the request whose headers are awaited
    drain_timer = None  # while the rest of an answered request's body comes
    running = None  # the request-response cycle being answered

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.start_header_timer()

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        super().data_received(data)
        if self.header_timer is not None and self.headers_began < self.reads and not self.transport.is_closing():
            self.waiting_bytes += len(data)  # the whole read is the same request's headers: they began before it
            if self.waiting_bytes > MAX_HEADER_BYTES:
                self.too_large = "headers"
                self.send_400_response("")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.start_header_timer()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self.url_bytes += len(url)
        self.count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self.count_header_bytes(len(name) + len(value) + 4)

    def count_header_bytes(self, count: int) -> None:
        self.header_bytes += count
        if self.header_bytes > MAX_HEADER_BYTES:
            self.too_large = "url" if self.url_bytes > MAX_HEADER_BYTES else "headers"
            raise HeadersTooLarge()

    def on_headers_complete(self) -> None:
        self.stop_header_timer()
        before = self.cycle
        super().on_headers_complete()
        if before is None or before.response_complete:  # started at once, not queued behind another
            self.running = self.cycle

    def on_response_complete(self) -> None:
        unread = not self.pipeline and self.cycle is not None and self.cycle.more_body
        queued = self.pipeline[-1][0] if self.pipeline else None
        super().on_response_complete()
        if queued is not None and not (self.pipeline and self.pipeline[-1][0] is queued):
            self.running = queued  # the next pipelined request, started
        if unread and not self.transport.is_closing():  # the rest of the body gets `seconds` to come, unread
            self.drain_timer = self.loop.call_later(self.seconds, self.body_timed_out)
        elif self.header_timer is not None:  # a next request's headers, begun: their time starts now
            self.start_header_timer(restart=True)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self.drain_timer is not None:  # the body the answer did not wait for has come: the connection goes on
            self.drain_timer.cancel()
            self.drain_timer = None
            self._unset_keepalive_if_required()  # its bytes stopped the idle timer; it starts again
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def body_timed_out(self) -> None:
        self.drain_timer = None
        if not self.transport.is_closing():
            self.logger.info("the body of a request answered already did not come within %g s: closed", self.seconds)
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.stop_header_timer()
        if self.drain_timer is not None:
            self.drain_timer.cancel()
        super().connection_lost(exc)
        for cycle in [self.running, *(queued for queued, _ in self.pipeline)]:
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    def start_header_timer(self, restart: bool = False) -> None:
        self.stop_header_timer()
        if not restart:
            self.header_bytes = self.waiting_bytes = self.url_bytes = 0
            self.headers_began = self.reads
        self.header_timer = self.loop.call_later(self.seconds, self.headers_timed_out)

    def stop_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def headers_timed_out(self) -> None:
        self.header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:  # reading waits for the answer before
            self.start_header_timer(restart=True)
        elif not self.transport.is_closing():
            self.logger.info("a client sent no complete request headers within %g s: closed", self.seconds)
            self.refuse("408 Request Timeout", f"the request's headers did not arrive within {self.seconds:g} s")

    def send_400_response(self, msg: str) -> None:
        if self.too_large == "url":
            self.refuse("414 URI Too Long", f"the request's URL exceeds {MAX_HEADER_BYTES} bytes, this server's limit")
        elif self.too_large:
            error = f"the request's line and headers exceed {MAX_HEADER_BYTES} bytes, this server's limit"
            self.refuse("431 Request Header Fields Too Large", error)
        else:
            self.refuse("400 Bad Request", f"not an HTTP request this server can read: {msg}")

    def refuse(self, status: str, error: str) -> None:
        self.stop_header_timer()
        if not self.transport.is_closing():
            self.transport.write(json_answer(status, error))
            self.transport.close()


def header_timeout_protocol(seconds: float) -> type:
    """The protocol class for `uvicorn.Config(http=...)`, with `seconds` for each request's headers. A request that
    is not HTTP (a malformed header, a method or path with bytes HTTP does not allow) is answered 400 in JSON too,
    where uvicorn answers in plain text."""
    return type("HeaderTimeoutProtocol", (LimitedProtocol,), {"seconds": seconds})
