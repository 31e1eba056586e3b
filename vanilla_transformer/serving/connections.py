"""The server's HTTP connections: uvicorn's httptools protocol with a header timeout.

uvicorn closes a connection that stays idle between requests (`timeout_keep_alive`), but not one that opens and
sends its headers slowly or never: such clients could hold sockets for ever. Here a connection gets `seconds` to send
each request's headers, from the moment it opens or the request's first byte arrives; past that it is answered 408
(JSON, as every error) and closed; what is not HTTP is answered 400 in JSON, and closed. The body has its own limit,
in the app (`fields.read_fields`)."""

import json
import uuid

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def json_answer(status: str, error: str) -> bytes:
    """A whole HTTP answer with the JSON error `error`, that closes the connection, with a request id."""
    body = json.dumps({"error": error}).encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"x-request-id: {uuid.uuid4().hex[:16]}\r\nconnection: close\r\n\r\n".encode()
        + body
    )


def header_timeout_protocol(seconds: float) -> type:
    """The protocol class for `uvicorn.Config(http=...)`. A request that is not HTTP (a malformed header, a method
    or path with bytes HTTP does not allow) is answered 400 in JSON too, where uvicorn answers in plain text."""

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        header_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.start_header_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.start_header_timer()

        def on_headers_complete(self) -> None:
            self.stop_header_timer()
            super().on_headers_complete()

        def connection_lost(self, exc) -> None:
            self.stop_header_timer()
            super().connection_lost(exc)

        def start_header_timer(self) -> None:
            self.stop_header_timer()
            self.header_timer = self.loop.call_later(seconds, self.headers_timed_out)

        def stop_header_timer(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def headers_timed_out(self) -> None:
            self.header_timer = None
            if not self.transport.is_closing():
                self.logger.info("a client sent no complete request headers within %g s: closed", seconds)
                self.transport.write(
                    json_answer("408 Request Timeout", f"the request's headers did not arrive within {seconds:g} s")
                )
                self.transport.close()

        def send_400_response(self, msg: str) -> None:
            self.stop_header_timer()
            self.transport.write(json_answer("400 Bad Request", f"not an HTTP request this server can read: {msg}"))
            self.transport.close()

    return HeaderTimeoutProtocol
