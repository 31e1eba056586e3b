"""`vanilla-transformer serve`: the translation server (LibreTranslate's API) on one model, with dynamic batching
across requests, backpressure, API keys and a graceful shutdown."""

import argparse
import os
import signal
import threading

from ..errors import CommandError, MissingDependencyError
from ..training.options.arguments import PositiveFloat, PositiveInt

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SERVE_EXTRA = "the server needs FastAPI, uvicorn and friends: pip install 'vanilla-transformer[serve]'"


def serve_command_parser(subparsers) -> argparse.ArgumentParser:
    serve = subparsers.add_parser("serve", help="a translation server with LibreTranslate's API")
    serve.add_argument("model", metavar="MODEL", help="a model folder or an exported CTranslate2 folder")
    serve.add_argument(
        "--engine",
        choices=["auto", "torch", "ctranslate2"],
        default="auto",
        help="what runs the model: auto is CTranslate2 for an export and torch for a model folder; ctranslate2 "
        "on a model folder exports it first, into a temporary folder",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=PositiveInt, default=5000, help="the port to listen on")
    serve.add_argument("--source-lang", help="the model's source language (default: its model card's)")
    serve.add_argument("--target-lang", help="the model's target language (default: its model card's)")
    serve.add_argument("--num-beams", type=PositiveInt, help="beam size (default: the model's generation config)")
    serve.add_argument("--length-penalty", type=float, help="default: the model's generation config")
    serve.add_argument("--max-length", type=PositiveInt, default=256, help="most new tokens per sentence")
    serve.add_argument(
        "--max-sentence-tokens",
        type=PositiveInt,
        default=256,
        help="longer sentences are refused with 413 (and at most the model's positions)",
    )
    serve.add_argument("--threads", type=PositiveInt, help="the engine's CPU threads (default: every core)")
    serve.add_argument("--max-batch-tokens", type=PositiveInt, default=4096, help="source tokens per batch")
    serve.add_argument(
        "--max-wait-ms", type=float, default=10.0, help="the longest a batch's first sentence waits for others"
    )
    serve.add_argument(
        "--max-queue-tokens", type=PositiveInt, default=65536, help="source tokens waiting beyond which 429"
    )
    serve.add_argument(
        "--max-queue-requests", type=PositiveInt, default=1024, help="unanswered requests beyond which 429"
    )
    serve.add_argument("--max-chars", type=PositiveInt, default=20000, help="characters of one request (413 beyond)")
    serve.add_argument("--max-alternatives", type=int, default=4, help="the most `alternatives` a request may ask")
    serve.add_argument("--timeout", type=float, default=60.0, help="seconds a request may wait (504 beyond)")
    serve.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds to answer the queued requests on SIGTERM"
    )
    connection_flags(serve)
    serve.add_argument("--api-keys", metavar="FILE", help="only these keys may translate (403), each at its rate")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=serve_command)
    return serve


def connection_flags(serve: argparse.ArgumentParser) -> None:
    """The flags that bound slow, idle and too many clients."""
    serve.add_argument(
        "--read-timeout",
        type=PositiveFloat,
        default=15.0,
        help="seconds a client may take to send a request's headers (then 408 and the connection closed), and again "
        "its body (408)",
    )
    serve.add_argument(
        "--keep-alive-timeout",
        type=PositiveFloat,
        default=5.0,
        help="seconds an idle connection stays open between requests (behind a reverse proxy that keeps connections "
        "to the server open: more than the proxy's idle timeout)",
    )
    serve.add_argument(
        "--limit-concurrency",
        type=PositiveInt,
        default=2048,
        help="requests in progress at once, beyond which 503 (the queue's own limits answer 429)",
    )


def serve_command(args: argparse.Namespace) -> int:
    """The server, until SIGTERM or SIGINT: a stop signal that comes while it starts ends it at once, exit status 0."""
    stopped = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopped.set()) for sig in STOP_SIGNALS}
    try:
        return run_server(args, stopped)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_server(args: argparse.Namespace, stopped: threading.Event) -> int:
    try:
        import uvicorn

        from ..serving.access import KeyFileError, KeyRing, read_key_file
        from ..serving.app import ServerSettings, create_app
        from ..serving.connections import header_timeout_protocol
        from ..serving.engine import EngineSettings, load_engine
    except ImportError as error:
        raise MissingDependencyError(f"{SERVE_EXTRA} ({error})") from error
    if not os.path.isdir(args.model):
        raise CommandError(f"MODEL {args.model}: no such folder (a model folder or a CTranslate2 export)", 2)
    try:
        keys = KeyRing(read_key_file(args.api_keys)) if args.api_keys else None
    except KeyFileError as error:
        raise CommandError(f"--api-keys {error}", exit_code=2) from error
    engine = EngineSettings(
        args.model, args.engine, args.threads, args.num_beams,
        args.length_penalty, args.max_length, args.max_sentence_tokens, args.source_lang, args.target_lang,
    )  # fmt: skip
    settings = ServerSettings(
        args.max_batch_tokens, args.max_wait_ms, args.max_queue_tokens, args.max_queue_requests, args.max_chars,
        args.max_alternatives, args.timeout, args.drain_timeout, args.read_timeout, args.keep_alive_timeout,
        args.limit_concurrency,
    )  # fmt: skip
    failures = []

    def stop_on_failure(error: BaseException) -> None:
        failures.append(error)
        server.should_exit = True

    app = create_app(lambda: load_engine(engine), settings, keys, on_failure=stop_on_failure)
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
        timeout_graceful_shutdown=args.drain_timeout, timeout_keep_alive=args.keep_alive_timeout,
        http=header_timeout_protocol(args.read_timeout),
    )  # fmt: skip
    server = draining_server(uvicorn, config)
    # uvicorn re-raises the signal that stopped it once it has drained; this handler makes that the end of a
    # normal run (exit status 0) rather than a kill, and stops the server if a signal comes before uvicorn's own
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    if stopped.is_set():
        return 0
    server.run()
    if failures:
        raise CommandError(f"MODEL {args.model}: could not load it: {failures[0]}", exit_code=1)
    return 0


def draining_server(uvicorn, config):
    """uvicorn's server, which on SIGTERM or SIGINT first marks the app as draining (/ready and new translations
    answer 503), then stops listening, answers every request it accepted and ends the worker."""

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame) -> None:
            config.app.state.server.draining = True
            super().handle_exit(sig, frame)

    return DrainingServer(config)
