"""The server against broken, odd and hostile clients: the real server in a subprocess for both engines (the
CTranslate2 server in the slow tier), a table of requests each with its expected status and JSON, and a normal request
answered after each; clients that stall or hang up over raw sockets; an unexpected error in the engine."""

import gzip
import json
import socket
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

from .conftest import answers, connect, error_of, held_engine, in_process, received, serving, wait_for

READ_TIMEOUT = 1  # seconds: --read-timeout, short for the stalled clients' tests
LIMIT = 2  # --limit-concurrency
TRANSLATE = {"source": "en", "target": "de"}


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes  # sent as application/json
    status: int
    expected: str | dict | list  # an error's words, the fields the JSON answer must have, or the whole JSON list
    path: str = "/translate"


def fields(**values) -> bytes:
    return json.dumps({**TRANSLATE, **values}).encode()


def nested(depth: int) -> bytes:
    return b'{"q": ' + b"[" * depth + b"]" * depth + b', "source": "en", "target": "de"}'


HOSTILE = [
    Case("a lone surrogate", b'{"q": "forty\\ud83d", "source": "en", "target": "de"}', 400,
         "q: character 6 is a lone UTF-16 surrogate (U+D83D, half a character)"),
    Case("a lone surrogate in an item", b'{"q": ["one", "\\udc00"], "source": "en", "target": "de"}', 400,
         "q, item 2: character 1 is a lone UTF-16 surrogate"),
    Case("a lone surrogate in a score", b'{"q": "one", "translation": "\\ud800x"}', 400,
         "translation: character 1 is a lone UTF-16 surrogate", path="/score"),
    Case("a lone surrogate in a field's name", b'{"q": "one", "source": "en", "target": "de", "\\ud800": "\\udfff"}',
         400, "a field's name: character 1 is a lone UTF-16 surrogate (U+D800"),
    Case("a lone surrogate in a key", b'{"q": "one", "source": "en", "target": "de", "x": {"\\ud800": 1}}', 400,
         "x, a key: character 1 is a lone UTF-16 surrogate (U+D800"),
    Case("JSON nested 20,000 deep", nested(20_000), 400, "the body is not valid JSON: it nests too deeply"),
    Case("JSON nested 100,000 deep", nested(100_000), 413,
         "the body has 200039 bytes; this server takes at most 69136"),
    Case("invalid UTF-8", b'{"q": "\xff\xfe", "source": "en", "target": "de"}', 400, "the body is not valid JSON"),
    Case("a Unicode digit", fields(q="one", alternatives="²"), 422,
         'alternatives: expected a whole number (at most 9 ASCII digits), got "²"'),
    Case("a 5,000-digit string", fields(q="one", alternatives="9" * 5000), 422,
         'alternatives: expected a whole number (at most 9 ASCII digits), got "999'),
    Case("a 5,000-digit number", b'{"q": "one", "source": "en", "target": "de", "alternatives": ' + b"9" * 5000 + b"}",
         400, "the body is not valid JSON: Exceeds the limit"),
    Case("a 4,000-digit number", b'{"q": "one", "source": "en", "target": "de", "alternatives": ' + b"9" * 4000 + b"}",
         422, "got a number of 4000 digits"),
    Case("a negative number", fields(q="one", alternatives=-1), 422, "alternatives: expected a whole number"),
    Case("a fraction", fields(q="one", alternatives=1.5), 422, "alternatives: expected a whole number"),
    Case("an item that is not text", fields(q=["one", None]), 422, "q: item 2 is null; expected a string"),
    Case("a body that is not an object", b"null", 400, "the JSON body must be an object of fields, got null"),
    Case("an empty list to translate", fields(q=[]), 200, {"translatedText": []}),
    Case("two empty lists to score", b'{"q": [], "translation": []}', 200, {"scores": []}, path="/score"),
    Case("auto with a list", fields(q=["six", "seven"], source="auto"), 200,
         {"detectedLanguage": [{"confidence": 100.0, "language": "en"}] * 2}),
    Case("auto with a string", fields(q="six", source="auto"), 200,
         {"detectedLanguage": {"confidence": 100.0, "language": "en"}}),
    Case("detection", b'{"q": "six"}', 200, [{"confidence": 100.0, "language": "en"}], path="/detect"),
]  # fmt: skip
# the fast tier's cases: one of each class
FAST = {
    "a lone surrogate", "a lone surrogate in a field's name",
    "JSON nested 20,000 deep", "a Unicode digit", "two empty lists to score", "auto with a list",
}  # fmt: skip


@pytest.fixture(scope="module", params=["torch", pytest.param("ctranslate2", marks=pytest.mark.slow)])
def server(request, trained_folder, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp(f"hostile-{request.param}")
    flags = ("--engine", request.param, "--max-chars", "300", "--read-timeout", str(READ_TIMEOUT))
    with serving(trained_folder, *flags, "--limit-concurrency", str(LIMIT), tmp_path=log_dir) as running:
        running.engine = request.param
        yield running


def translates(server) -> bool:
    answer = server.post(q="six", **TRANSLATE)
    return answer.status_code == 200 and isinstance(answer.json()["translatedText"], str)


@pytest.mark.parametrize(
    "case", [c if c.name in FAST else pytest.param(c, marks=pytest.mark.slow) for c in HOSTILE], ids=lambda c: c.name
)
def test_a_hostile_request_gets_its_status_and_json_and_the_server_goes_on(server, case):
    response = httpx.post(server.url + case.path, content=case.body, headers={"content-type": "application/json"})
    assert response.status_code == case.status, response.text
    if isinstance(case.expected, str):
        assert case.expected in error_of(response)
    elif isinstance(case.expected, dict):
        assert {field: response.json()[field] for field in case.expected} == case.expected
    else:
        assert response.json() == case.expected
    assert response.headers["x-request-id"]
    assert translates(server)


def raw(server) -> socket.socket:
    return connect(server.url, READ_TIMEOUT + 10)


def answer(connection: socket.socket) -> bytes:
    """One whole answer: its headers, then as many bytes of body as its Content-Length says."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
    while len(body) < length:
        body += connection.recv(4096)
    return head + b"\r\n\r\n" + body


HEADERS = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"


def test_clients_that_stall_in_their_headers_are_answered_408_and_closed(server):
    silent, partial = raw(server), raw(server)
    partial.sendall(HEADERS[:30])
    start = time.time()
    for connection in (silent, partial):
        refused = received(connection)  # and closed
        assert refused.startswith(b"HTTP/1.1 408 ") and b"headers did not arrive within 1 s" in refused
    assert time.time() - start < READ_TIMEOUT + 3
    assert translates(server)


def test_a_body_that_stalls_gets_408_and_one_that_stops_is_counted_as_a_disconnect(server):
    stalled = raw(server)
    stalled.sendall(HEADERS + b'{"q": ')
    refused = answer(stalled)
    assert refused.startswith(b"HTTP/1.1 408 ") and b"the request's body did not arrive within 1 s" in refused
    errors = server.metric('vanilla_transformer_requests_total{endpoint="/translate",status="500"}')
    gone = server.metric('vanilla_transformer_requests_total{endpoint="/translate",status="499"}')
    hung_up = raw(server)
    hung_up.sendall(HEADERS + b'{"q": ')
    time.sleep(0.3)
    hung_up.close()
    deadline = time.time() + 10
    while server.metric('vanilla_transformer_requests_total{endpoint="/translate",status="499"}') == gone:
        assert time.time() < deadline, "the disconnect was not counted"
        time.sleep(0.1)
    assert server.metric('vanilla_transformer_requests_total{endpoint="/translate",status="500"}') == errors
    assert "the client disconnected before its answer" in server.output()
    assert "Traceback" not in server.output() and "ERROR" not in server.output()


def test_requests_beyond_the_concurrency_limit_get_503_and_the_probes_still_answer(server):
    holding = [raw(server) for _ in range(LIMIT)]
    for connection in holding:  # in progress: their bodies still arriving
        connection.sendall(HEADERS + b'{"q": ')
    time.sleep(0.5)
    refused = server.post(q="six", **TRANSLATE)
    assert refused.status_code == 503 and "its limit (--limit-concurrency)" in error_of(refused)
    assert refused.headers["retry-after"] == "1"
    assert httpx.get(server.url + "/ready").status_code == 200
    for connection in holding:
        assert answer(connection).startswith(b"HTTP/1.1 408 ")  # once their read timeout passes
    assert translates(server)


def test_an_unexpected_error_is_a_json_500_logged_once_with_the_request_id(trained_folder, caplog):
    from vanilla_transformer.serving.app import create_app
    from vanilla_transformer.serving.engine import EngineSettings, load_engine

    def broken_engine():
        engine = load_engine(EngineSettings(str(trained_folder), threads=1))
        engine.count_tokens = lambda texts: 1 / 0  # a fault of the engine's, not of the request
        return engine

    with in_process(create_app(broken_engine), log_config=None) as url:  # log_config None: records reach caplog
        wait_for(lambda: answers(url + "/ready"))
        response = httpx.post(url + "/translate", json={"q": "six", **TRANSLATE})
        request_id = response.headers["x-request-id"]
        assert response.status_code == 500
        assert error_of(response) == f"internal error: the server's log has its details under request id {request_id}"
        logged = [record for record in caplog.records if request_id in record.getMessage()]
        assert len(logged) == 1 and logged[0].levelname == "ERROR" and "ZeroDivisionError" in logged[0].exc_text
        metrics = httpx.get(url + "/metrics").text
        assert 'vanilla_transformer_requests_total{endpoint="/translate",status="500"} 1.0' in metrics
        assert httpx.get(url + "/health").status_code == 200


def test_scores_go_through_the_queue_with_its_limit_and_deadline(trained_folder):
    """/score shares the translations' queue: 429 when it is full, 504 past the deadline, the pair then dropped."""
    from vanilla_transformer.serving.app import ServerSettings, create_app
    from vanilla_transformer.serving.engine import EngineSettings, load_engine

    release = threading.Event()

    def held_engine():  # its scoring waits until released: a slow batch
        engine = load_engine(EngineSettings(str(trained_folder), threads=1))
        scoring = engine.score
        engine.score = lambda sources, targets: release.wait(30) and scoring(sources, targets)
        return engine

    settings = ServerSettings(max_queue_requests=1, timeout=1.5, max_wait_ms=1)
    pair = {"q": "six", "translation": "sechs"}
    try:
        with in_process(create_app(held_engine, settings), log_level="warning") as url:
            wait_for(lambda: answers(url + "/ready"))
            first = []
            sender = threading.Thread(target=lambda: first.append(httpx.post(url + "/score", json=pair, timeout=30)))
            sender.start()
            wait_for(lambda: "vanilla_transformer_queue_requests 1.0" in httpx.get(url + "/metrics").text)
            full = httpx.post(url + "/score", json=pair)
            assert full.status_code == 429 and "--max-queue-requests" in error_of(full)
            sender.join(30)
            assert first[0].status_code == 504 and "--timeout" in error_of(first[0])
            release.set()
            scored = httpx.post(url + "/score", json=pair, timeout=30)
            assert scored.status_code == 200 and scored.json()["scores"]["tokens"][-1] == "</s>"
    finally:
        release.set()


@pytest.mark.parametrize(
    "request_line, status, words",
    [
        (b"POST /translate HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400, "not an HTTP request"),
        (b"P\xc3\xb6ST /translate HTTP/1.1\r\nHost: x\r\n\r\n", 400, "not an HTTP request this server can read"),
        (b"POST /transl\xe4te HTTP/1.1\r\nHost: x\r\n\r\n", 400, "not an HTTP request this server can read"),
    ],
)
def test_what_is_not_http_is_answered_400_in_json_with_a_request_id(server, request_line, status, words):
    connection = raw(server)
    connection.sendall(request_line)
    head, _, body = received(connection).partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()) and b"x-request-id: " in head
    assert words in json.loads(body)["error"]
    assert translates(server)


def test_the_router_answers_wrong_methods_and_paths_in_json(server):
    wrong_method = httpx.get(server.url + "/translate")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert error_of(wrong_method) == "Method Not Allowed"
    slash = httpx.post(server.url + "/translate/", json={"q": "six", **TRANSLATE})
    assert slash.status_code == 404 and error_of(slash) == "Not Found"  # not a redirect
    for probe in ("/health", "/ready"):
        head = httpx.head(server.url + probe)
        assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize(
    "how, field",
    [("query", 'the query string: field "q"'), ("form", 'the form: field "q"')],
)
def test_text_that_is_not_utf8_in_the_query_or_a_form_is_refused_not_replaced(server, how, field):
    for encoded in ("%ED%A0%80", "%FF", "six%C3"):  # a surrogate in UTF-8, a byte no UTF-8 has, a cut character
        query = f"q={encoded}&source=en&target=de"
        if how == "query":
            response = httpx.post(f"{server.url}/translate?{query}")
        else:
            headers = {"content-type": "application/x-www-form-urlencoded"}
            response = httpx.post(server.url + "/translate", content=query.encode(), headers=headers)
        assert response.status_code == 400 and f"{field}: byte " in error_of(response), response.text
        assert "is not UTF-8 text; send UTF-8" in error_of(response)
    form = httpx.post(server.url + "/translate", data={"q": "six", "terms": "sechs", **TRANSLATE})
    if server.engine == "torch":  # the CTranslate2 engine has no lexically constrained search
        assert form.status_code == 200 and "sechs" in form.json()["translatedText"]  # one term, as a form sends it
    repeated = httpx.post(f"{server.url}/translate?q=six&q=seven&source=en&target=de")
    assert repeated.status_code == 200 and len(repeated.json()["translatedText"]) == 2


def multipart_body(*parts: bytes) -> bytes:
    return b"".join(b"--B\r\n" + part + b"\r\n" for part in parts) + b"--B--\r\n"


def part(name: bytes, value: bytes, filename: bytes | None = None) -> bytes:
    disposition = b'form-data; name="' + name + b'"' + (b'; filename="' + filename + b'"' if filename else b"")
    return b"Content-Disposition: " + disposition + b"\r\n\r\n" + value


LANGUAGES = (part(b"source", b"en"), part(b"target", b"de"))
MULTIPART = [
    ("not UTF-8", multipart_body(part(b"q", b"six\xff"), *LANGUAGES), "; boundary=B", 400,
     'the form: field "q": byte 4 (0xff) is not UTF-8 text; send UTF-8'),
    ("a charset", multipart_body(part(b"q", b"six"), *LANGUAGES), "; boundary=B; charset=latin-1", 415,
     'the form: charset "latin-1"; send UTF-8'),
    ("no boundary", multipart_body(part(b"q", b"six")), "", 400, "the form: its Content-Type names no boundary"),
    ("cut short", multipart_body(part(b"q", b"six"), *LANGUAGES)[:-9], "; boundary=B", 400,
     "it ends before its closing boundary"),
    ("a part without a name", multipart_body(part(b"", b"six")).replace(b'; name=""', b""), "; boundary=B", 400,
     "the form: part 1 has no name"),
    ("a file for q", multipart_body(part(b"q", b"six", filename=b"q.txt"), *LANGUAGES), "; boundary=B", 422,
     "q: expected a string or a list of strings, got a file"),
    ("not multipart", b"six", "; boundary=B", 400, "the form is not valid multipart/form-data: "),
]  # fmt: skip


@pytest.mark.parametrize(
    "body, parameters, status, words", [case[1:] for case in MULTIPART], ids=[c[0] for c in MULTIPART]
)
def test_a_multipart_form_is_read_strictly(server, body, parameters, status, words):
    content_type = "multipart/form-data" + parameters
    response = httpx.post(server.url + "/translate", content=body, headers={"content-type": content_type})
    assert response.status_code == status and words in error_of(response), response.text


def test_a_multipart_forms_preamble_is_ignored_and_a_body_it_cannot_read_is_not_logged(server):
    """What comes before a form's first boundary line and after its last (RFC 2046's preamble and epilogue) is not
    part of it. A body that is no form is the client's 400, and leaves no line in the server's log."""
    sent = b"A preamble, which a form's reader ignores.\r\n" + multipart_body(part(b"q", b"six"), *LANGUAGES)
    headers = {"content-type": "multipart/form-data; boundary=B"}
    form = httpx.post(server.url + "/translate", content=sent + b"An epilogue.\r\n", headers=headers)
    assert form.status_code == 200, form.text
    assert form.json() == server.post(q="six", **TRANSLATE).json()
    logged = len(server.output())
    for body in (b"six", b"no boundary line\r\n--C\r\n"):
        refused = httpx.post(server.url + "/translate", content=body, headers=headers)
        assert refused.status_code == 400 and "the form is not valid multipart/form-data" in error_of(refused)
    assert server.output()[logged:] == ""


def test_a_multipart_form_is_held_to_the_body_limit_when_it_is_streamed(server):
    """Without a Content-Length, a multipart body is counted as it arrives: neither a field nor a file is kept past
    the server's limit (a file was spooled to disk, whatever its size)."""

    def streamed(filename: bytes | None):
        yield b"--B\r\n" + part(b"q", b"", filename)
        yield from (b"x" * 1000 for _ in range(200))
        yield b"\r\n--B--\r\n"

    for filename in (None, b"big.txt"):
        response = httpx.post(
            server.url + "/translate",
            content=streamed(filename),
            headers={"content-type": "multipart/form-data; boundary=B"},
        )
        assert response.status_code == 413 and "this server takes at most" in error_of(response)
    fields = [("q", (None, b"six")), ("q", (None, b"seven")), ("source", (None, b"en"))]
    answer = httpx.post(server.url + "/translate", files=fields + [("target", (None, b"de"))])
    assert answer.status_code == 200 and len(answer.json()["translatedText"]) == 2
    assert translates(server)


def test_a_body_of_another_content_type_is_refused_not_ignored(server):
    body = json.dumps({"q": "six", **TRANSLATE}).encode()
    refused = httpx.post(server.url + "/translate", content=body, headers={"content-type": "text/plain"})
    assert refused.status_code == 415
    assert error_of(refused) == 'a body of Content-Type "text/plain": send JSON (application/json) or a form'
    empty = httpx.post(f"{server.url}/translate?q=six&source=en&target=de", headers={"content-type": "text/plain"})
    assert empty.status_code == 200  # no body: the query string's fields
    gzipped = httpx.post(server.url + "/translate", content=gzip.compress(body),
                         headers={"content-type": "application/json", "content-encoding": "gzip"})  # fmt: skip
    assert gzipped.status_code == 415
    assert error_of(gzipped) == 'a body of Content-Encoding "gzip": send it uncompressed'


def test_a_websocket_upgrade_is_answered_as_a_plain_request_in_json(server):
    upgrade = {"connection": "Upgrade", "upgrade": "websocket", "sec-websocket-version": "13",
               "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="}  # fmt: skip
    answer = httpx.get(server.url + "/translate", headers=upgrade)
    assert answer.status_code == 405 and error_of(answer) == "Method Not Allowed" and answer.headers["x-request-id"]


def test_a_list_item_that_is_not_text_is_named_in_jsons_words(server):
    answer = server.post(q=["six", None], **TRANSLATE)
    assert answer.status_code == 422 and error_of(answer) == ("q: item 2 is null; expected a string")
    answer = server.post(q="six", alternatives=True, **TRANSLATE)
    assert "got true" in error_of(answer)


def test_a_client_that_leaves_while_its_sentences_wait_is_counted_as_gone_and_they_are_dropped(trained_folder):
    from vanilla_transformer.serving.app import ServerSettings, create_app

    release, translated = threading.Event(), []
    held = held_engine(trained_folder, release, translated)  # its first batch waits: the next request is queued
    try:
        with in_process(create_app(held, ServerSettings(max_wait_ms=1)), log_level="info") as url:
            wait_for(lambda: answers(url + "/ready"))
            translated.clear()
            first = []
            sender = threading.Thread(
                target=lambda: first.append(httpx.post(url + "/translate", json={"q": "six", **TRANSLATE}, timeout=30))
            )
            sender.start()
            wait_for(lambda: translated == ["six"])
            with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
                httpx.post(url + "/translate", json={"q": "seven", **TRANSLATE}, timeout=1)
            gone = 'vanilla_transformer_requests_total{endpoint="/translate",status="499"} 1.0'
            wait_for(lambda: gone in httpx.get(url + "/metrics").text, timeout=10)
            assert "vanilla_transformer_queue_sentences 0.0" in httpx.get(url + "/metrics").text  # the first in work
            release.set()
            sender.join(30)
            assert first[0].status_code == 200
            assert httpx.post(url + "/translate", json={"q": "eight", **TRANSLATE}).status_code == 200
            assert "seven" not in translated  # dropped from the queue, never translated
    finally:
        release.set()
