"""The server's connections (serving/connections.py) against clients over raw sockets: headers without end, a body
trickled after its answer, pipelined requests cut short or abandoned. The slow requests are held in an engine of
this process, which answers when released."""

import json
import threading
import time

import httpx
import pytest

from .conftest import answers, connect, held_engine, in_process, received, serving, wait_for

READ_TIMEOUT = 1  # seconds: --read-timeout
WAIT = READ_TIMEOUT + 10  # seconds a raw connection's read waits
TRANSLATE = {"source": "en", "target": "de"}


def request_bytes(path: str = "/translate", **fields) -> bytes:
    body = json.dumps({**TRANSLATE, **fields}).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.fixture(scope="module")
def server(trained_folder, tmp_path_factory):
    flags = ("--read-timeout", str(READ_TIMEOUT), "--keep-alive-timeout", "2")
    with serving(trained_folder, *flags, tmp_path=tmp_path_factory.mktemp("connections")) as running:
        yield running


def test_headers_without_end_are_answered_431_and_closed(server):
    connection = connect(server.url, WAIT)
    connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    with pytest.raises(OSError):  # the server closes the connection while the headers keep coming
        for _ in range(10_000):
            connection.sendall(b"X-Padding: " + b"a" * 100 + b"\r\n")
    refused = received(connection)
    assert refused.startswith(b"HTTP/1.1 431 ") and b"x-request-id" in refused
    assert b"the request's line and headers exceed 65536 bytes" in refused
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_url_over_the_limit_is_answered_414_and_headers_over_it_431(server):
    for line, status in ((b"a" * 70_000, b"414 "), (b"a" * 60_000 + b" HTTP/1.1\r\nX: " + b"b" * 10_000, b"431 ")):
        connection = connect(server.url, WAIT)
        connection.sendall(b"GET /languages?" + line + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert received(connection).startswith(b"HTTP/1.1 " + status)


def test_a_body_the_answer_did_not_wait_for_has_the_read_timeout_to_come_then_the_connection_closes(server):
    """Its bytes, trickled after the answer, would otherwise hold the connection open for ever."""
    connection = connect(server.url, WAIT)
    connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
    start = time.time()
    answer = received(connection)  # and closed once the rest of the body has not come within --read-timeout
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"status":"ok"}')
    assert READ_TIMEOUT <= time.time() - start < READ_TIMEOUT + 2
    assert "the body of a request answered already did not come within 1 s: closed" in server.output()


def test_a_keep_alive_client_goes_on_after_a_413_for_a_body_it_sent_whole(server):
    with httpx.Client() as client:
        for _ in range(5):
            too_big = client.post(server.url + "/translate", content=b"x" * 400_000,
                                  headers={"content-type": "application/json"})  # fmt: skip
            assert too_big.status_code == 413
            assert client.get(server.url + "/health").status_code == 200


def test_the_header_limit_counts_headers_not_the_body_before_them(server):
    connection = connect(server.url, WAIT)
    body = json.dumps({"q": "x" * 100_000}).encode()  # a body over 64 KiB, then the next request's start
    post = b"POST /detect HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    connection.sendall(post % len(body) + body + b"GET /health HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.5)
    connection.sendall(b"Connection: close\r\n\r\n")
    answers = received(connection)
    assert answers.count(b"HTTP/1.1 200 ") == 2 and b" 431 " not in answers
    # on a connection that answered a request already, headers over 64 KiB in one write
    later = connect(server.url, WAIT)
    later.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert later.recv(65536).startswith(b"HTTP/1.1 200 ")
    later.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Padding: " + b"a" * 100_000 + b"\r\n\r\n")
    assert b"HTTP/1.1 431 " in received(later)


@pytest.fixture
def held(trained_folder, caplog):
    """A server in this process on a held engine: (its URL, the release, the sentences translated)."""
    from vanilla_transformer.serving.app import ServerSettings, create_app
    from vanilla_transformer.serving.connections import header_timeout_protocol

    release, translated = threading.Event(), []
    app = create_app(held_engine(trained_folder, release, translated), ServerSettings(max_wait_ms=1))
    try:
        with in_process(app, log_config=None, http=header_timeout_protocol(READ_TIMEOUT)) as url:
            wait_for(lambda: answers(url + "/ready"))
            translated.clear()
            yield url, release, translated
    finally:
        release.set()


def test_a_pipelined_request_cut_short_waits_for_the_answer_before_it_not_408(held):
    url, release, translated = held
    connection = connect(url, WAIT)
    connection.sendall(request_bytes(q="six") + b"GET /hea")  # the next request's start, behind the first
    wait_for(lambda: translated == ["six"])
    time.sleep(READ_TIMEOUT * 1.7)  # the first is still being answered: its header time has not begun
    release.set()
    first = connection.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ") and b"translatedText" in first
    time.sleep(READ_TIMEOUT / 2)  # within the read timeout from the answer, not from when the headers began
    connection.sendall(b"lth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert received(connection).startswith(b"HTTP/1.1 200 ")


def test_a_pipelining_client_that_hangs_up_is_gone_for_the_request_being_answered(held, caplog):
    url, release, translated = held
    connection = connect(url, WAIT)
    connection.sendall(request_bytes(q="six") + request_bytes(q="seven"))
    wait_for(lambda: translated == ["six"])
    connection.close()
    gone = 'vanilla_transformer_requests_total{endpoint="/translate",status="499"} 1.0'
    wait_for(lambda: gone in httpx.get(url + "/metrics").text, timeout=10)  # before its batch is done
    release.set()
    assert httpx.post(url + "/translate", json={"q": "eight", **TRANSLATE}).status_code == 200
    assert "seven" not in translated  # never started
    assert not [record for record in caplog.records if record.levelname == "ERROR"]
