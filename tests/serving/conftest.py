"""The real server in a subprocess on a free loopback port, and real HTTP clients."""

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from ..apps import free_port

SERVE = [sys.executable, "-m", "vanilla_transformer.cli", "serve"]


class Server:
    def __init__(self, process: subprocess.Popen, url: str, log):
        self.process, self.url, self.log = process, url, log

    def post(self, **fields) -> httpx.Response:
        return httpx.post(self.url + "/translate", json=fields, timeout=60)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples whose line starts with `name` (a name and, optionally, labels)."""
        text = httpx.get(self.url + "/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()


def wait_until_ready(server: Server, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"serve exited with {server.process.returncode}: {server.output()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + "/ready", timeout=5).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"not ready within {timeout} s: {server.output()[-3000:]}")


@contextlib.contextmanager
def serving(model, *flags: str, tmp_path=None, env: dict | None = None, command: list[str] = SERVE, ready=True):
    """`vanilla-transformer serve MODEL FLAGS` on a free port (`command` instead of `vanilla-transformer serve`,
    `env` added to the environment), ready unless `ready` is False; stopped (SIGTERM) at the end."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    command = [*command, str(model), "--port", str(port), "--threads", "1", *flags]
    with open(os.devnull if tmp_path is None else tmp_path / "serve.log", "w+") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        server = Server(process, f"http://127.0.0.1:{port}", log)
        try:
            if ready:
                wait_until_ready(server)
            yield server
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)


def burst(url: str, bodies: list[dict]) -> list[httpx.Response]:
    """POST every body to /translate at once, each on its own connection."""

    async def send():
        limits = httpx.Limits(max_connections=len(bodies))
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            return await asyncio.gather(*(client.post(url + "/translate", json=body) for body in bodies))

    return asyncio.run(send())


# each sentence's offline translation, by model and flags: one process translates every sentence not yet asked for
TRANSLATED: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}


def offline(model, sentences: list[str], *flags: str, per_line: bool = False) -> list[str]:
    """`vanilla-transformer translate` on the same sentences, in a process of its own. A sentence's translation does
    not depend on the sentences beside it (the server's answers are compared with these whatever it batched), so each
    is translated once per model and flags; with `per_line` flags (a file read line by line beside the input) the
    sentences are translated as given, every time."""
    if per_line:
        return translate_offline(model, sentences, flags)
    known = TRANSLATED.setdefault((str(model), flags), {})
    missing = [sentence for sentence in dict.fromkeys(sentences) if sentence not in known]
    if missing:
        known.update(zip(missing, translate_offline(model, missing, flags), strict=True))
    return [known[sentence] for sentence in sentences]


def translate_offline(model, sentences: list[str], flags: tuple[str, ...]) -> list[str]:
    command = [sys.executable, "-m", "vanilla_transformer.cli", "translate", "--model", str(model), *flags]
    done = subprocess.run(
        command, input="\n".join(sentences) + "\n", capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def error_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


def wait_for(condition, timeout: float = 60) -> None:
    """Until `condition()` is true, or an AssertionError after `timeout` seconds."""
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def answers(url: str, status: int = 200) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=5).status_code == status
    return False


@contextlib.contextmanager
def in_process(app, **config):
    """`app` served by uvicorn in a thread of this process on a free port (`config` to `uvicorn.Config`), once it
    answers /health; stopped at the end. Yields its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **config))
    thread = threading.Thread(target=server.run)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(url + "/health"), timeout=30)
        yield url
    finally:
        server.should_exit = True
        thread.join(30)


def connect(url: str, timeout: float) -> socket.socket:
    """A raw connection to the server at `url`, its reads given up after `timeout` seconds."""
    connection = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    connection.settimeout(timeout)
    return connection


def received(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
    return data


def held_engine(folder, release: threading.Event, translated: list):
    """A loader of the model's engine, whose batches (not its warm-up) record their sentences in `translated` and
    wait until `release` is set."""
    from vanilla_transformer.serving.engine import EngineSettings, load_engine

    def load():
        engine = load_engine(EngineSettings(str(folder), threads=1))
        translate = engine.translate

        def held(sentences, *args, **kwargs):
            translated.extend(sentences)
            if sentences != ["warm up"]:  # the engine's own, before the server is ready
                release.wait(30)
            return translate(sentences, *args, **kwargs)

        engine.translate = held
        return engine

    return load
