"""The serve suite's open loop (bench/serve/open_loop.py) against a real HTTP server over loopback: requests go out
when due, spread over the run rather than in bursts, on kept-alive connections, and every request is in the CSV
with the status it got (0 where the connection failed)."""

import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


class Answers(http.server.BaseHTTPRequestHandler):
    """200 to every request but each fifth, which gets 429; records when each request arrived, on which
    connection."""

    protocol_version = "HTTP/1.1"  # keep-alive
    arrivals: list[tuple[float, int]] = []

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.arrivals.append((time.perf_counter(), id(self.connection)))
        status = 429 if len(self.arrivals) % 5 == 0 else 200
        body = b'{"translatedText": "x"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class ClosingIdle(Answers):
    """The same answers, and a connection idle for 0.1 s closed, as servers close idle kept-alive connections
    (uvicorn after 5 s)."""

    timeout = 0.1


@pytest.fixture(params=[Answers])
def server(request):
    Answers.arrivals = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), request.param)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/translate"
    httpd.shutdown()
    httpd.server_close()


def open_loop(url: str, rate: float, duration: float, tmp_path) -> list[list[str]]:
    body = tmp_path / "body.json"
    body.write_text('{"q": "a sentence", "source": "en", "target": "de"}')
    command = [sys.executable, "-m", "bench.serve.open_loop", url, str(rate), str(duration), str(body)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert lines[0] == "offset,response-time,status-code"
    return [line.split(",") for line in lines[1:]]


def test_requests_go_out_when_due_not_in_bursts(server, tmp_path):
    rows = open_loop(server, 200, 1.0, tmp_path)
    assert len(rows) == 200 and [float(row[0]) for row in rows] == pytest.approx([i / 200 for i in range(200)])
    assert [row[2] for row in rows].count("429") == 40 and {row[2] for row in rows} == {"200", "429"}
    assert all(0 < float(row[1]) < 1 for row in rows)
    arrived = sorted(when for when, _ in Answers.arrivals)
    # 5 ms apart: no 20 ms holds more than a few, and most hold four (hey's paced workers would all send at once,
    # tens together); a stall of a loaded machine sends what fell due during it together, so a few more may meet
    in_20_ms = sorted(sum(start <= t < start + 0.02 for t in arrived) for start in arrived)
    assert in_20_ms[len(in_20_ms) // 2] <= 5 and in_20_ms[-1] <= 10
    assert len({connection for _, connection in Answers.arrivals}) < 50  # connections kept alive and used again


@pytest.mark.parametrize("server", [ClosingIdle], indirect=True)
def test_a_connection_the_server_closed_is_not_used_again(server, tmp_path):
    rows = open_loop(server, 5, 2.0, tmp_path)  # 0.2 s apart: each connection closed before the next request
    assert len(rows) == 10 and {row[2] for row in rows} <= {"200", "429"}


def test_a_connection_that_fails_is_a_status_0(tmp_path):
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rows = open_loop(f"http://127.0.0.1:{port}/translate", 50, 0.2, tmp_path)
    assert len(rows) == 10 and {row[2] for row in rows} == {"0"}
