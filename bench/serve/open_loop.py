"""An open loop of HTTP requests, as a process of its own for the serve suite's open loops: a POST every 1/RATE
seconds for DURATION seconds, each sent on time whatever the answers, on a kept-alive connection that is free or a
new one. hey's `-q` cannot make one: it paces each of its workers from their common start, so they all send at
once, one burst of every worker per interval.

    python -m bench.serve.open_loop URL RATE DURATION BODY_FILE

writes a CSV line per request to stdout: `offset` (when it was due, in seconds from the start), `response-time` (from
then to its answer, in seconds: a request sent late counts its lateness) and `status-code` (0 for a connection that
failed or a request without an answer within 120 s, as an error). HTTP/1.1 is written and read here on asyncio's
streams, a small fraction of a millisecond a request, so that the generator keeps to its schedule at the server's
rates; an answer is read by its Content-Length, which the server's JSON answers have. Only the standard library is
imported.
"""

import asyncio
import sys
import time
from urllib.parse import urlsplit

TIMEOUT = 120.0


class Connections:
    """Kept-alive connections to one server: a free one, or a new one."""

    def __init__(self, host: str, port: int):
        self.host, self.port, self.free = host, port, []

    async def take(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connection used last of those free (the server closes one idle for a few seconds: one it closed is
        dropped), else a new one."""
        while self.free:
            reader, writer = self.free.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    def give_back(self, connection, keep: bool) -> None:
        if keep:
            self.free.append(connection)
        else:
            connection[1].close()


def request_bytes(url: str, body: bytes) -> bytes:
    parts = urlsplit(url)
    head = (
        f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def exchange(connections: Connections, payload: bytes) -> int:
    """Send one request and read its whole answer; its status."""
    connection = await connections.take()
    reader, writer = connection
    try:
        writer.write(payload)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").lower().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        await reader.readexactly(int(headers.get("content-length", 0)))
    except BaseException:
        writer.close()
        raise
    connections.give_back(connection, headers.get("connection") != "close")
    return int(lines[0].split()[1])


async def timed(connections: Connections, payload: bytes, due: float, records: list) -> None:
    try:
        status = await asyncio.wait_for(exchange(connections, payload), TIMEOUT)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
        status = 0
    records.append((due, time.perf_counter() - due, status))


async def open_loop(url: str, rate: float, duration: float, body: bytes) -> list[tuple[float, float, int]]:
    """(offset, latency, status) of each request: the i-th due at i / rate seconds from the start."""
    parts = urlsplit(url)
    connections, payload = Connections(parts.hostname, parts.port or 80), request_bytes(url, body)
    records, tasks, start = [], [], time.perf_counter()
    for i in range(int(rate * duration)):
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        tasks.append(asyncio.create_task(timed(connections, payload, due, records)))
    await asyncio.gather(*tasks)
    return [(due - start, latency, status) for due, latency, status in sorted(records)]


def main(argv: list[str]) -> int:
    url, rate, duration, body_file = argv
    with open(body_file, "rb") as handle:
        body = handle.read()
    records = asyncio.run(open_loop(url, float(rate), float(duration), body))
    lines = ["offset,response-time,status-code", *(f"{o:.6f},{t:.6f},{s}" for o, t, s in records)]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
