"""`vanilla-transformer serve`: the translation server (LibreTranslate's API) on one model, with dynamic batching
across requests, backpressure, API keys and a graceful shutdown."""

import argparse
import atexit
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
import typing

from ..errors import CommandError, MissingDependencyError
from ..inference.devices import PlacementError
from ..training.options.argument_types import (
    BeamSize,
    FiniteFloat,
    LengthPenalty,
    NonNegativeFloat,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
    at_most,
)
from .engine import checked_engine, flag_error
from .process_settings import apply_decoding_process_settings

LOG = logging.getLogger("uvicorn.error")  # the server's log, which uvicorn configures

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SERVE_EXTRA = "the server needs FastAPI, uvicorn and friends: pip install 'vanilla-transformer[serve]'"


def serve_command_parser(subparsers) -> argparse.ArgumentParser:
    from ..serving.settings import EngineSettings, ServerSettings  # neither needs the serve extra

    serve = subparsers.add_parser("serve", help="a translation server with LibreTranslate's API")
    serve.add_argument("model", metavar="MODEL", help="a model folder or an exported CTranslate2 folder")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=Port, default=5000, help="the port to listen on")
    settings_flags(serve, EngineSettings, skip=("model",))
    settings_flags(serve, ServerSettings)
    serve.add_argument("--api-keys", metavar="FILE", help="only these keys may translate (403), each at its rate")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=serve_command)
    return serve


def settings_flags(parser: argparse.ArgumentParser, settings, skip=()) -> None:
    """A flag for each field of a settings dataclass, its default, type, choices and help read from the field."""
    for setting in dataclasses.fields(settings):
        if setting.name in skip:
            continue
        kinds = [kind for kind in typing.get_args(setting.type) or (setting.type,) if kind is not type(None)]
        kind = {int: int, float: FiniteFloat}.get(kinds[0], kinds[0])
        if setting.metadata.get("positive"):
            kind = PositiveInt if kind is int else PositiveFloat
        elif setting.metadata.get("non_negative"):
            kind = NonNegativeInt if kind is int else NonNegativeFloat
        if setting.metadata.get("beams"):
            kind = BeamSize
        if setting.metadata.get("length_penalty"):
            kind = LengthPenalty
        if setting.metadata.get("most") is not None:
            kind = at_most(kind, *setting.metadata["most"])
        parser.add_argument(
            "--" + setting.name.replace("_", "-"), type=kind, default=setting.default,
            choices=setting.metadata.get("choices"), help=setting.metadata["help"],
        )  # fmt: skip


def settings_from(args: argparse.Namespace, settings, **given):
    """A settings dataclass built by keyword from the flags of its fields (and `given` values)."""
    return settings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(settings) if f.name not in given},
                    **given)  # fmt: skip


def check_address(host: str, port: int | None) -> None:
    """That the server can listen on --host and --port (None: any port), tried before anything loads: an empty host
    (which would be every interface), a name that does not resolve or an address in use is named here (uvicorn
    would exit while the model loads, and the process abort)."""
    if not host.strip():
        raise CommandError(f"--host {host!r}: expected a host name or address (0.0.0.0: every interface)", 2)
    try:
        addresses = socket.getaddrinfo(host, port or 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise CommandError(f"--host {host}: {error.strerror}", exit_code=2) from error
    for family, kind, protocol, _, address in addresses:  # each, as asyncio binds them
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio sets them
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as error:
                where = f"--host {host}" + (f" --port {port}" if port else "")
                message = f"{where}: cannot listen there: {error.strerror}"
                raise CommandError(message, exit_code=2) from error


class StoppedStarting(BaseException):
    """A stop signal that came while the server started, before it listens: the end of a normal run."""


def stop_starting(signum: int, frame) -> None:
    raise StoppedStarting()


def waiting_for(function, *args):
    """`function(*args)` run in a thread of its own while this one waits, waking often: a stop signal that the
    system gives another thread (torch's) still stops the start, which a read blocked here (a FIFO without its
    writer) would not let this thread see."""
    outcome = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args)
        except Exception as error:  # raised here, in the waiting thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name="read-at-start", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def serve_command(args: argparse.Namespace) -> int:
    """The server, until SIGTERM or SIGINT: a stop signal that comes while it starts (reading a key file that never
    ends, say) ends it at once, exit status 0."""
    previous = {sig: signal.signal(sig, stop_starting) for sig in STOP_SIGNALS}
    try:
        return run_server(args)
    except StoppedStarting:
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_server(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..serving.access import KeyFileError, KeyRing, read_key_file
        from ..serving.app import create_app
        from ..serving.connections import header_timeout_protocol
        from ..serving.engine import languages, load_engine
        from ..serving.settings import EngineSettings, ServerSettings
    except ImportError as error:
        raise MissingDependencyError(f"{SERVE_EXTRA} ({error})") from error
    if not os.path.isdir(args.model):
        raise CommandError(f"MODEL {args.model}: no such folder (a model folder or a CTranslate2 export)", 2)
    check_address(args.host, args.port)
    try:
        keys = KeyRing(waiting_for(read_key_file, args.api_keys)) if args.api_keys else None
    except KeyFileError as error:
        raise CommandError(f"--api-keys {error}", exit_code=2) from error
    engine, settings = settings_from(args, EngineSettings, model=args.model), settings_from(args, ServerSettings)
    try:
        placement = engine.placement
    except PlacementError as error:
        raise flag_error(error) from error
    apply_decoding_process_settings(checked_engine(args.model, args.engine, placement), placement)
    try:
        languages(engine)  # before the server listens: no card, or a code that is not one, is bad input
    except ValueError as error:
        raise CommandError(str(error), exit_code=2) from error
    failures = []

    def stop_on_failure(error: BaseException) -> None:
        failures.append(error)
        server.should_exit = True

    app = create_app(lambda: load_engine(engine), settings, keys, on_failure=stop_on_failure)
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
        timeout_graceful_shutdown=args.drain_timeout, timeout_keep_alive=args.keep_alive_timeout,
        http=header_timeout_protocol(args.read_timeout), ws="none",  # no WebSocket: an upgrade is a plain request
    )  # fmt: skip
    server = draining_server(uvicorn, config)
    # uvicorn re-raises the signal that stopped it once it has drained; this handler makes that the end of a
    # normal run (exit status 0) rather than a kill, and stops the server if a signal comes before uvicorn's own
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    server.run()
    if failures:
        raise CommandError(f"MODEL {args.model}: could not load it: {failures[0]}", exit_code=1)
    batcher = app.state.server.batcher
    if batcher is not None and batcher.worker.is_alive():  # a batch outlasted --drain-timeout: its requests got 503
        LOG.warning("a batch was still being translated after --drain-timeout %g s: stopped", args.drain_timeout)
        atexit._run_exitfuncs()  # the exit's own cleanups: an export made on the fly is removed
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # the interpreter's shutdown would abort, tearing torch's threads down under the batch
    return 0


def draining_server(uvicorn, config):
    """uvicorn's server, which on SIGTERM or SIGINT first marks the app as draining (/ready and new translations
    answer 503), then stops listening, answers every request it accepted and ends the worker."""

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame) -> None:
            config.app.state.server.drain()
            super().handle_exit(sig, frame)

    return DrainingServer(config)
