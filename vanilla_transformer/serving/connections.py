"""The server's HTTP connections: uvicorn's httptools protocol with a header timeout.

uvicorn closes a connection that stays idle between requests (`timeout_keep_alive`), but not one that opens and
sends its headers slowly or never: such clients could hold sockets for ever. Here a connection gets `seconds` to send
each request's headers, from the moment it opens or the request's first byte arrives; past that it is answered 408
(JSON, as every error) and closed. The body has its own limit, in the app (`fields.read_fields`)."""

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def header_timeout_protocol(seconds: float) -> type:
    """The protocol class for `uvicorn.Config(http=...)`."""
    body = json.dumps({"error": f"the request's headers did not arrive within {seconds:g} s"}).encode()
    timed_out = (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )

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
                self.transport.write(timed_out)
                self.transport.close()

    return HeaderTimeoutProtocol
