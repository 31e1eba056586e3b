"""The ASGI app (FastAPI) of `vanilla-transformer serve`: LibreTranslate's API and the operator's endpoints.

- `POST /translate`: `q` (a string or a list of strings), `source`, `target`, `format` (`text`), `alternatives`
  (how many other translations to add) and `api_key`, as JSON, a form or the query string; the answer is
  `{"translatedText": ...}`, with `"alternatives"` when asked for. Beyond LibreTranslate's fields, `terms` (a list
  of strings per text) asks for translations that contain them (lexically constrained decoding, the torch engine);
- `POST /score`: `q` and `translation` (strings, or lists of one length) and `api_key`; the answer is each pair's
  score, `{"scores": [{"tokens", "token_log_probs", "log_prob", "normalized", "log_prob_without_eos"}]}` (one
  object for strings), as `vanilla-transformer score` writes it;
- `GET /languages`: the model's source language and its one target;
- `GET /health` (the process answers), `GET /ready` (503 until the model is loaded and warmed up, and again while
  draining), `GET /metrics` (Prometheus text).

Every error is JSON, `{"error": "..."}`, naming the field or the limit: 400 a malformed body, a missing field or an
unknown language pair; 403 a missing or unknown API key; 413 a text over `--max-chars` or a sentence over the token
limit; 422 a field of the wrong type; 429 a full queue or a key over its limit, with `Retry-After`; 503 loading or
draining; 504 a request still unanswered after `--timeout` seconds, whose sentences are dropped from the queue."""

import asyncio
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from .access import KeyRing
from .batcher import Batcher, QueueFull
from .documents import Document, split_document
from .engine import Engine
from .metrics import ServerMetrics

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French",
    "it": "Italian", "ja": "Japanese", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip
ENDPOINTS = ("/translate", "/score", "/languages", "/health", "/ready", "/metrics")


@dataclass(frozen=True)
class ServerSettings:
    max_batch_tokens: int = 4096  # source tokens per batch
    max_wait_ms: float = 10.0  # the longest the first sentence of a batch waits for others
    max_queue_tokens: int = 65536  # source tokens waiting, beyond which requests get 429
    max_queue_requests: int = 1024  # requests accepted and unanswered, beyond which requests get 429
    max_chars: int = 20000  # characters of one request's q, all items together
    max_alternatives: int = 4
    timeout: float = 60.0  # seconds a request may wait for its translation
    drain_timeout: float = 30.0  # seconds to finish the queued requests on SIGTERM


class RequestError(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after

    def response(self) -> JSONResponse:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        return JSONResponse({"error": str(self)}, status_code=self.status, headers=headers)


@dataclass(frozen=True)
class TranslateRequest:
    texts: list[str]
    single: bool  # q was a string, not a list
    alternatives: int
    auto: bool  # source was "auto"
    terms: list[list[str]] | None = None  # each text's terms, which its translation must contain


class ServerState:
    """What the endpoints share: the engine and its batcher once loaded, and whether the server is draining."""

    def __init__(self, settings: ServerSettings, keys: KeyRing | None):
        self.settings, self.keys = settings, keys
        self.metrics = ServerMetrics()
        self.engine: Engine | None = None
        self.batcher: Batcher | None = None
        self.error: BaseException | None = None  # why the engine did not load
        self.draining = False

    def start(self, load) -> None:
        """Load the engine with `load()`, warm it up and start the batcher's worker (in a thread of its own)."""
        try:
            engine = load()
            engine.warm_up()
        except BaseException as error:
            self.error = error
            raise
        s = self.settings
        batcher = Batcher(
            engine, s.max_batch_tokens, s.max_wait_ms / 1000, s.max_queue_tokens, s.max_queue_requests, self.metrics
        )
        batcher.start()
        self.engine, self.batcher = engine, batcher

    def check_serving(self) -> None:
        if self.draining:
            raise RequestError(503, "the server is shutting down", retry_after=1)
        if self.batcher is None:
            raise RequestError(503, "the model is loading", retry_after=1)


def create_app(load, settings: ServerSettings = ServerSettings(), keys: KeyRing | None = None, on_failure=None):
    """The app. `load()` returns the `Engine`; it runs in a thread at startup while /health answers and /ready says
    503. If it fails, `on_failure(error)` is called (the command stops the server)."""
    state = ServerState(settings, keys)
    app = FastAPI(
        title="vanilla-transformer", lifespan=lifespan(state, load, on_failure), docs_url=None, redoc_url=None
    )
    app.state.server = state
    app.add_middleware(CountRequests, metrics=state.metrics)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestError, request_error)
    app.add_api_route("/translate", translate, methods=["POST"])
    app.add_api_route("/score", score, methods=["POST"])
    for path, endpoint in (("/languages", languages), ("/health", health), ("/ready", ready), ("/metrics", metrics)):
        app.add_api_route(path, endpoint, methods=["GET"])
    return app


def lifespan(state: ServerState, load, on_failure):
    """Load the engine in a thread once the server listens; on shutdown, drain: answer what is queued."""

    @asynccontextmanager
    async def run(app):
        loading = asyncio.create_task(asyncio.to_thread(state.start, load))
        loading.add_done_callback(lambda task: report_failure(task, on_failure))
        yield
        state.draining = True
        if state.batcher is not None:
            await asyncio.to_thread(state.batcher.stop, state.settings.drain_timeout)

    return run


class CountRequests:
    """Every answer in the metrics, by endpoint and status, with its latency (a plain ASGI middleware: it adds
    next to nothing to a request's cost)."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), [500]

        async def send_and_note(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            labels = (scope["path"] if scope["path"] in ENDPOINTS else "other", str(status[0]))
            self.metrics.requests.labels(*labels).inc()
            self.metrics.latency.labels(*labels).observe(time.perf_counter() - start)


async def http_error(request: Request, error: HTTPException) -> JSONResponse:
    return JSONResponse({"error": str(error.detail)}, status_code=error.status_code)


async def request_error(request: Request, error: RequestError) -> JSONResponse:
    return error.response()


async def health():
    return {"status": "ok"}


async def ready(request: Request):
    state = request.app.state.server
    if state.draining or state.batcher is None:
        status = "draining" if state.draining else ("failed" if state.error else "loading")
        return JSONResponse({"status": status}, status_code=503)
    return {"status": "ready", "engine": state.engine.name}


async def metrics(request: Request) -> Response:
    text = request.app.state.server.metrics.text()
    return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")


async def languages(request: Request):
    state = request.app.state.server
    state.check_serving()
    source, target = state.engine.source_lang, state.engine.target_lang
    return [
        {"code": source, "name": LANGUAGE_NAMES.get(source, source), "targets": [target]},
        {"code": target, "name": LANGUAGE_NAMES.get(target, target), "targets": []},
    ]


async def translate(request: Request) -> JSONResponse:
    state = request.app.state.server
    state.check_serving()
    refusal = state.batcher.refusal()  # a full queue answers at once, before the body is read
    if refusal is not None:
        raise RequestError(429, f"the server is busy: {refusal}", retry_after=refusal.retry_after)
    params = await read_params(request)
    check_key(state.keys, params.get("api_key"))
    asked = parse_translate(params, state.engine, state.settings)
    return JSONResponse(await translate_texts(state, asked))


async def score(request: Request) -> JSONResponse:
    """Given translations scored (forced decoding), in the engine's worker-free path: one teacher-forced pass."""
    state = request.app.state.server
    state.check_serving()
    params = await read_params(request)
    check_key(state.keys, params.get("api_key"))
    sources, targets, single = parse_score(params, state.settings)
    for side, texts in (("q", sources), ("translation", targets)):
        for index, length in enumerate(state.engine.count_tokens(texts)):
            if length > state.engine.max_sentence_tokens:
                raise RequestError(413, f"{side}: item {index + 1} has {length} tokens; at most "
                                        f"{state.engine.max_sentence_tokens}")  # fmt: skip
    found = [pair.as_dict() for pair in await asyncio.to_thread(state.engine.score, sources, targets)]
    return JSONResponse({"scores": found[0] if single else found})


def parse_score(params: dict, settings: ServerSettings) -> tuple[list[str], list[str], bool]:
    """The pairs of a /score request: `q` and `translation`, both strings or both lists of one length."""
    sides = []
    for name in ("q", "translation"):
        value = params.get(name)
        if value is None:
            raise RequestError(400, f"Invalid request: missing {name} parameter")
        if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(t, str) for t in value))):
            raise RequestError(422, f"{name}: expected a string or a list of strings, got {type(value).__name__}")
        sides.append([value] if isinstance(value, str) else value)
    if isinstance(params["q"], str) != isinstance(params["translation"], str) or len(sides[0]) != len(sides[1]):
        raise RequestError(422, "q and translation: expected two strings or two lists of one length")
    characters = sum(map(len, sides[0] + sides[1]))
    if characters > settings.max_chars:
        raise RequestError(413, f"q and translation have {characters} characters; at most {settings.max_chars}")
    return sides[0], sides[1], isinstance(params["q"], str)


def report_failure(task: asyncio.Task, on_failure) -> None:
    if on_failure is not None and not task.cancelled() and task.exception() is not None:
        on_failure(task.exception())


async def read_params(request: Request) -> dict:
    """The request's fields, from the query string and the body (JSON or a form), as LibreTranslate reads them."""
    params = {key: value for key, value in request.query_params.items()}
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        body = await request.body()
        if body.strip():
            try:
                data = json.loads(body)
            except ValueError as error:
                raise RequestError(400, f"the body is not valid JSON: {error}") from None
            if not isinstance(data, dict):
                raise RequestError(400, f"the JSON body must be an object of fields, got {type(data).__name__}")
            params.update(data)
    elif kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        for key in form.keys():
            values = form.getlist(key)
            params[key] = values[0] if len(values) == 1 else values
    return params


def check_key(keys: KeyRing | None, key) -> None:
    if keys is None:
        return
    verdict = keys.admit(key if isinstance(key, str) else None)
    if verdict == "forbidden":
        raise RequestError(403, "Invalid API key" if key else "api_key: this server needs an API key")
    if verdict != "ok":
        raise RequestError(
            429, "api_key: this key's requests per minute are used up", retry_after=max(1, round(verdict))
        )


def parse_translate(params: dict, engine: Engine, settings: ServerSettings) -> TranslateRequest:
    for name in ("q", "source", "target"):
        if params.get(name) is None:
            raise RequestError(400, f"Invalid request: missing {name} parameter")
    q = params["q"]
    if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(text, str) for text in q))):
        raise RequestError(422, f"q: expected a string or a list of strings, got {type(q).__name__}")
    for name in ("source", "target", "format"):
        if name in params and not isinstance(params[name], str):
            raise RequestError(422, f"{name}: expected a string, got {type(params[name]).__name__}")
    source, target = params["source"], params["target"]
    if source not in (engine.source_lang, "auto") or target != engine.target_lang:
        raise RequestError(
            400,
            f"source {source!r}, target {target!r}: this server translates {engine.source_lang} -> "
            f"{engine.target_lang} only (GET /languages)",
        )
    if params.get("format", "text") != "text":
        raise RequestError(400, f"format {params['format']!r}: this server translates plain text only ('text')")
    alternatives = whole_number(params.get("alternatives", 0), "alternatives")
    if not 0 <= alternatives <= settings.max_alternatives:
        raise RequestError(400, f"alternatives {alternatives}: expected 0 to {settings.max_alternatives}")
    texts = [q] if isinstance(q, str) else q
    characters = sum(map(len, texts))
    if characters > settings.max_chars:
        raise RequestError(413, f"q has {characters} characters; this server takes at most {settings.max_chars}")
    terms = parse_terms(params.get("terms"), texts, isinstance(q, str))
    return TranslateRequest(texts, isinstance(q, str), alternatives, source == "auto", terms)


def parse_terms(terms, texts: list[str], single: bool) -> list[list[str]] | None:
    """The `terms` field: for a string q, a list of strings; for a list q, a list of them, one per text."""
    if terms is None:
        return None
    rows = [terms] if single else terms
    shape = "a list of strings" if single else "a list of lists of strings, one per text of q"
    well_formed = isinstance(rows, list) and len(rows) == len(texts)
    if not well_formed or not all(isinstance(row, list) and all(isinstance(t, str) for t in row) for row in rows):
        raise RequestError(422, f"terms: expected {shape}")
    return rows


def whole_number(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise RequestError(422, f"{name}: expected a whole number, got {value!r}")
    return int(value)


async def translate_texts(state: ServerState, asked: TranslateRequest) -> dict:
    engine, batcher = state.engine, state.batcher
    if asked.terms is not None:
        try:
            engine.check_terms(asked.terms)
        except ValueError as error:
            raise RequestError(400 if engine.name != "torch" else 422, f"terms: {error}") from None
        documents = [Document([text], [0]) for text in asked.texts]  # a text with terms is translated whole
    else:
        documents = [split_document(text, engine.source_lang) for text in asked.texts]
    sentences = [sentence for document in documents for sentence in document.sentences]
    lengths = engine.count_tokens(sentences) if sentences else []
    for index, length in enumerate(lengths):
        if length > engine.max_sentence_tokens:
            raise RequestError(
                413,
                f"q: sentence {index + 1} has {length} tokens; the model reads at most {engine.max_sentence_tokens} "
                f"tokens a sentence: split it",
            )
    try:
        job = batcher.submit(sentences, lengths, n_best=asked.alternatives + 1, terms=asked.terms)
    except QueueFull as error:
        raise RequestError(429, f"the server is busy: {error}", retry_after=error.retry_after) from None
    try:
        results = await asyncio.wait_for(asyncio.wrap_future(job.future), state.settings.timeout)
    except TimeoutError:
        batcher.cancel(job)
        raise RequestError(504, f"no translation within {state.settings.timeout:g} s (--timeout)") from None
    return answer(documents, results, asked, engine.source_lang)


def answer(documents: list[Document], results: list, asked: TranslateRequest, source: str) -> dict:
    """LibreTranslate's answer: each text reassembled from its sentences' translations, and its alternatives."""
    texts, alternatives, start = [], [], 0
    for document in documents:
        choices = [[t.text for t in result] for result in results[start : start + len(document.sentences)]]
        start += len(document.sentences)
        best = document.assemble([options[0] for options in choices])
        others = []
        for k in range(1, asked.alternatives + 1):
            other = document.assemble([options[min(k, len(options) - 1)] for options in choices])
            if other != best and other not in others:
                others.append(other)
        texts.append(best)
        alternatives.append(others)
    body = {"translatedText": texts[0] if asked.single else texts}
    if asked.alternatives:
        body["alternatives"] = alternatives[0] if asked.single else alternatives
    if asked.auto:
        body["detectedLanguage"] = {"language": source}  # the model's one source language: nothing is detected
    return body
