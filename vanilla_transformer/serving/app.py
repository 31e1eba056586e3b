"""The ASGI app (FastAPI) of `vanilla-transformer serve`: LibreTranslate's API and the operator's endpoints.

- `POST /translate`: `q` (a string or a list of strings), `source`, `target`, `format` (`text`), `alternatives`
  (how many other translations to add) and `api_key`, as JSON, a form or the query string; the answer is
  `{"translatedText": ...}`, with `"alternatives"` when asked for. Beyond LibreTranslate's fields, `terms` (a list
  of strings per text) asks for translations that contain them (lexically constrained decoding, the torch engine);
- `POST /score`: `q` and `translation` (strings, or lists of one length) and `api_key`; the answer is each pair's
  score, `{"scores": [{"tokens", "token_log_probs", "log_prob", "normalized", "log_prob_without_eos"}]}` (one
  object for strings), as `vanilla-transformer score` writes it;
- `GET /languages`: the model's source language and its one target; `POST /detect` (`q`): that source language,
  as LibreTranslate's language detection answers (nothing is detected: the model reads one language);
- `GET /health` (the process answers), `GET /ready` (503 until the model is loaded and warmed up, and again while
  draining), `GET /metrics` (Prometheus text); `HEAD` on each.

Every error is JSON, `{"error": "..."}`, naming the field or the limit: 400 a malformed body, a missing field, text
that is not whole characters or not UTF-8, a request that is not HTTP or an unknown language pair; 403 a missing or
unknown API key; 404 and 405 a path or method the server lacks; 408 a request whose headers or body did not arrive
within `--read-timeout`; 413 a body, a text over `--max-chars` or a sentence over the token limit; 415 a body neither
JSON nor a form; 422 a field of the wrong type; 429 a full queue or a key over its limit, with `Retry-After`; 431
headers over 64 KiB; 500 an
unexpected error, logged once with the request's id (every answer carries it in `X-Request-ID`); 503 loading,
draining or more requests in progress than `--limit-concurrency`; 504 a request still unanswered after `--timeout`
seconds, whose sentences are dropped from the queue. A client that disconnects before its answer is counted under
status 499 and logged at info, and its sentences are dropped from the queue too."""

import asyncio
import contextlib
import threading
import time
from asyncio import FIRST_COMPLETED
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..inference.translators import UnsupportedError
from .access import KeyRing
from .batcher import Batcher, QueueFull
from .documents import Document, split_document
from .engine import Engine
from .envelope import Envelope
from .fields import RequestError, described, kind, read_fields, texts, whole_number
from .metrics import ServerMetrics
from .settings import ServerSettings

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French",
    "it": "Italian", "ja": "Japanese", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip
CONFIDENCE = 100.0  # LibreTranslate's detection confidence, in percent: the model reads one source language


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
        self.drain_started: float | None = None  # time.monotonic() when a stop signal came

    @property
    def draining(self) -> bool:
        return self.drain_started is not None

    def drain(self) -> None:
        """Answer no new work (503), and what is queued without waiting for fuller batches: the server is stopping."""
        if self.drain_started is None:
            self.drain_started = time.monotonic()
            if self.batcher is not None:
                self.batcher.hurry()

    def drain_left(self) -> float:
        """Seconds left of the drain's `drain_timeout`, which the requests in progress and the queue share."""
        return max(0.0, self.settings.drain_timeout - (time.monotonic() - self.drain_started))

    def start(self, load) -> None:
        """Load the engine with `load()`, warm it up and start the batcher's worker (in a thread of its own); the
        error that stopped it is kept in `error`."""
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

    def check_admission(self) -> None:
        """A request for the queue: the server serving, and a full queue answered at once, before the body is read."""
        self.check_serving()
        refusal = self.batcher.refusal()
        if refusal is not None:
            raise RequestError(429, f"the server is busy: {refusal}", retry_after=refusal.retry_after)


def create_app(load, settings: ServerSettings | None = None, keys: KeyRing | None = None, on_failure=None):
    """The app. `load()` returns the `Engine`; it runs in a thread at startup while /health answers and /ready says
    503. If it fails, `on_failure(error)` is called (the command stops the server)."""
    settings = settings or ServerSettings()
    state = ServerState(settings, keys)
    app = FastAPI(
        title="vanilla-transformer", lifespan=lifespan(state, load, on_failure), docs_url=None, redoc_url=None,
        redirect_slashes=False,  # "/translate/" is 404, not a redirect that a POST's client may not follow
    )  # fmt: skip
    app.state.server = state
    app.add_middleware(Envelope, metrics=state.metrics, limit=settings.limit_concurrency)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestError, request_error)
    for path, endpoint in (("/translate", translate), ("/score", score), ("/detect", detect)):
        app.add_api_route(path, endpoint, methods=["POST"])
    for path, endpoint in (("/languages", languages), ("/health", health), ("/ready", ready), ("/metrics", metrics)):
        app.add_api_route(path, endpoint, methods=["GET", "HEAD"])  # HEAD: as load balancers probe
    return app


def lifespan(state: ServerState, load, on_failure):
    """Load the engine once the server listens, in a daemon thread: a SIGTERM while it loads stops the server at
    once, without waiting for the load to end. On shutdown, drain: answer what is queued."""

    @asynccontextmanager
    async def run(app):
        loop = asyncio.get_running_loop()

        def start() -> None:
            try:
                state.start(load)
            except BaseException as error:  # kept in state.error, and reported to the command
                if on_failure is not None:
                    with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped meanwhile
                        loop.call_soon_threadsafe(on_failure, error)

        threading.Thread(target=start, name="load-model", daemon=True).start()
        yield
        state.drain()
        if state.batcher is not None:
            await asyncio.to_thread(state.batcher.stop, state.drain_left())

    return run


async def http_error(request: Request, error: HTTPException) -> JSONResponse:
    """The router's errors (404, 405 with its `Allow` header) as JSON."""
    return JSONResponse({"error": str(error.detail)}, status_code=error.status_code, headers=error.headers)


async def request_error(request: Request, error: RequestError) -> JSONResponse:
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else None
    return JSONResponse({"error": str(error)}, status_code=error.status, headers=headers)


async def health():
    return {"status": "ok"}


async def ready(request: Request):
    state = request.app.state.server
    if state.draining or state.batcher is None or not state.batcher.worker.is_alive():  # a worker that failed
        status = "draining" if state.draining else ("failed" if state.error or state.batcher else "loading")
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
    state.check_admission()
    params = await request_fields(request, state)
    asked = parse_translate(params, state.engine, state.settings)
    return JSONResponse(await translate_texts(state, request, asked))


async def score(request: Request) -> JSONResponse:
    """Given translations scored (forced decoding): the pairs go through the queue, in batches of pairs, as the
    sentences to translate do."""
    state = request.app.state.server
    state.check_admission()
    params = await request_fields(request, state)
    sources, targets, single = parse_score(params, state.settings)
    lengths = [a + b for a, b in zip(token_lengths(state.engine, sources, "q", "item"),
                                     token_lengths(state.engine, targets, "translation", "item"))]  # fmt: skip
    found = [pair.as_dict() for pair in await queued(state, request, sources, lengths, targets=targets)]
    return JSONResponse({"scores": found[0] if single else found})


def token_lengths(engine: Engine, texts: list[str], field: str, item: str) -> list[int]:
    """Each text's length in tokens; 413 naming the field and the text over the sentence limit."""
    lengths = engine.count_tokens(texts) if texts else []
    for index, length in enumerate(lengths):
        if length > engine.max_sentence_tokens:
            raise RequestError(
                413,
                f"{field}: {item} {index + 1} has {length} tokens; the model reads at most "
                f"{engine.max_sentence_tokens} tokens a sentence: split it",
            )
    return lengths


async def queued(state: ServerState, request: Request, sentences: list[str], lengths: list[int], **job) -> list:
    """The results of a request's sentences through the batcher (`Batcher.submit`'s `job` arguments): 429 when the
    queue is full, 504 past the request's deadline; there, and when the client leaves first, its sentences are
    dropped from the queue (a client gone is a `ClientDisconnect`, counted under 499)."""
    try:
        submitted = state.batcher.submit(sentences, lengths, **job)
    except QueueFull as error:
        raise RequestError(429, f"the server is busy: {error}", retry_after=error.retry_after) from None
    answered, left = asyncio.wrap_future(submitted.future), asyncio.ensure_future(disconnected(request))
    done = set()
    try:
        done, _ = await asyncio.wait({answered, left}, timeout=state.settings.timeout, return_when=FIRST_COMPLETED)
    finally:
        left.cancel()
        if answered not in done:  # past the deadline, the client gone, or this request's task cancelled
            answered.cancel()
            state.batcher.cancel(submitted)
    if answered in done:
        return answered.result()
    if left in done:
        raise ClientDisconnect()
    raise RequestError(504, f"no answer within {state.settings.timeout:g} s (--timeout)")


async def disconnected(request: Request) -> None:
    """Returns once the client has gone: with the body read, the server's next message is its disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def detect(request: Request) -> JSONResponse:
    """LibreTranslate's language detection: the model's one source language, for any `q`."""
    state = request.app.state.server
    state.check_serving()
    texts(await request_fields(request, state), "q")
    return JSONResponse([detected(state.engine.source_lang)])


def detected(language: str) -> dict:
    return {"confidence": CONFIDENCE, "language": language}


async def request_fields(request: Request, state: ServerState) -> dict:
    """The request's fields, read and checked (`fields.read_fields`), once its API key is admitted."""
    params = await read_fields(request, state.settings.max_body_bytes, state.settings.read_timeout)
    check_key(state.keys, params.get("api_key"))
    return params


def parse_score(params: dict, settings: ServerSettings) -> tuple[list[str], list[str], bool]:
    """The pairs of a /score request: `q` and `translation`, both strings or both lists of one length."""
    sources, targets = texts(params, "q"), texts(params, "translation")
    if isinstance(params["q"], str) != isinstance(params["translation"], str) or len(sources) != len(targets):
        raise RequestError(422, "q and translation: expected two strings or two lists of one length")
    characters = sum(map(len, sources + targets))
    if characters > settings.max_chars:
        raise RequestError(413, f"q and translation have {characters} characters; at most {settings.max_chars}")
    return sources, targets, isinstance(params["q"], str)


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
    q, items = params.get("q"), texts(params, "q")  # q first: its error comes first
    for name in ("source", "target"):
        if params.get(name) is None:
            raise RequestError(400, f"Invalid request: missing {name} parameter")
    for name in ("source", "target", "format"):
        if name in params and not isinstance(params[name], str):
            raise RequestError(422, f"{name}: expected a string, got {kind(params[name])}")
    source, target = params["source"], params["target"]
    if source not in (engine.source_lang, "auto") or target != engine.target_lang:
        raise RequestError(
            400,
            f"source {described(source)}, target {described(target)}: this server translates {engine.source_lang} -> "
            f"{engine.target_lang} only (GET /languages)",
        )
    if params.get("format", "text") != "text":
        raise RequestError(400, f"format {described(params['format'])}: this server translates plain text only (text)")
    alternatives = whole_number(params.get("alternatives", 0), "alternatives")
    if not 0 <= alternatives <= settings.max_alternatives:
        raise RequestError(400, f"alternatives {alternatives}: expected 0 to {settings.max_alternatives}")
    terms = parse_terms(params.get("terms"), items, isinstance(q, str))
    characters = sum(map(len, items)) + sum(len(term) for row in terms or [] for term in row)
    if characters > settings.max_chars:
        fields = "q and terms have" if terms else "q has"
        raise RequestError(413, f"{fields} {characters} characters; this server takes at most {settings.max_chars}")
    return TranslateRequest(items, isinstance(q, str), alternatives, source == "auto", terms)


def parse_terms(terms, texts: list[str], single: bool) -> list[list[str]] | None:
    """The `terms` field: for a string q, a list of strings; for a list q, a list of them, one per text."""
    if terms is None:
        return None
    if single and isinstance(terms, str):  # one term, as a form sends a field given once
        terms = [terms]
    rows = [terms] if single else terms
    shape = "a list of strings" if single else "a list of lists of strings, one per text of q"
    well_formed = isinstance(rows, list) and len(rows) == len(texts)
    if not well_formed or not all(isinstance(row, list) and all(isinstance(t, str) for t in row) for row in rows):
        raise RequestError(422, f"terms: expected {shape}")
    return rows


async def translate_texts(state: ServerState, request: Request, asked: TranslateRequest) -> dict:
    engine = state.engine
    if asked.terms is not None:
        try:
            engine.check_terms(asked.terms)
        except UnsupportedError as error:
            raise RequestError(400, f"terms: {error}") from None
        except ValueError as error:
            raise RequestError(422, f"terms: {error}") from None
        documents = [Document([text], [0]) for text in asked.texts]  # a text with terms is translated whole
    else:  # off the event loop, which would answer nothing while a long text is split ("a) b) " * 3000: 5 s)
        documents = await asyncio.to_thread(split_documents, asked.texts, engine.source_lang)
    sentences = [sentence for document in documents for sentence in document.sentences]
    lengths = token_lengths(engine, sentences, "q", "sentence")
    results = await queued(state, request, sentences, lengths, n_best=asked.alternatives + 1, terms=asked.terms)
    return answer(documents, results, asked, engine.source_lang)


def split_documents(texts: list[str], language: str) -> list[Document]:
    return [split_document(text, language) for text in texts]


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
    if asked.auto:  # the model's one source language, for each text: nothing is detected
        body["detectedLanguage"] = detected(source) if asked.single else [detected(source) for _ in texts]
    return body
