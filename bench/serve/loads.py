"""Who sends the serve suite's requests: Debian's `hey` (a native load generator) for the closed loops and
`open_loop.py` for the open ones, each a process on cores of its own, or the asyncio + httpx loops here, in the
suite's process. Each load gives (start, latency, status) per request."""

import asyncio
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from ..common.report import ROOT


async def post(client, url: str, sentence: str, records: list, due: float | None = None) -> None:
    """One request, timed from when it was `due` (an open loop's schedule; None: now)."""
    start = time.perf_counter() if due is None else due
    try:
        response = await client.post(url, json={"q": sentence, "source": "en", "target": "de"})
        status = response.status_code
    except Exception:  # a refused or dropped connection counts as an error
        status = 0
    records.append((start, time.perf_counter() - start, status))


async def closed_loop(url: str, sentences: list[str], clients: int, duration: float) -> list:
    """`clients` clients, each sending its next sentence once it has its answer, for `duration` seconds."""
    import httpx

    records, end = [], time.perf_counter() + duration

    async def client_loop(client, first: int):
        i = first
        while time.perf_counter() < end:
            await post(client, url, sentences[i % len(sentences)], records)
            i += clients

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=clients)) as client:
        await asyncio.gather(*(client_loop(client, k) for k in range(clients)))
    return records


async def open_loop(url: str, sentences: list[str], rate: float, duration: float) -> list:
    """A request every 1/`rate` seconds for `duration` seconds, whatever the answers, each timed from when it was
    due (as `open_loop.py` times them)."""
    import httpx

    records, tasks, start = [], [], time.perf_counter()
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=1000)) as client:
        for i in range(int(rate * duration)):
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(post(client, url, sentences[i % len(sentences)], records, due)))
        await asyncio.gather(*tasks)
    return records


@dataclass(frozen=True)
class Generator:
    """Who sends the requests: "hey" (Debian's hey, a native load generator, for the closed loops and
    `open_loop.py` for the open ones, each a process on its own `cores`) or "python" (the asyncio + httpx loops
    above, in this process)."""

    name: str
    cores: str | None = None  # taskset's list for the generator's processes; None: any core
    server_core: int | None = None  # the core left to the server

    def closed(self, url: str, sentences: list[str], clients: int, duration: float) -> list:
        if self.name == "python":
            return asyncio.run(closed_loop(url, sentences, clients, duration))
        return self.run(["hey", "-z", f"{duration:g}s", "-m", "POST", "-T", "application/json", "-D", "{body}", "-t",
                         "120", "-o", "csv", "-c", str(clients), url], sentences)  # fmt: skip

    def open(self, url: str, sentences: list[str], rate: float, duration: float) -> list:
        """A request every 1/`rate` seconds, whatever the answers: `open_loop.py` in a process of its own (hey's
        `-q` would send in bursts, each of its workers at once)."""
        if self.name == "python":
            return asyncio.run(open_loop(url, sentences, rate, duration))
        module = [sys.executable, "-m", "bench.serve.open_loop", url, f"{rate:.6f}", f"{duration:g}", "{body}"]
        return self.run(module, sentences)

    def run(self, command: list[str], sentences: list[str]) -> list:
        """(start, latency, status) of each request from the CSV that `command` writes (hey's, or open_loop's in the
        same columns; hey leaves a failed connection out). The `{body}` argument is a file with the request's JSON:
        the sentence of median length, the one body either sends."""
        sentence = sorted(sentences, key=len)[len(sentences) // 2]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as body:
            json.dump({"q": sentence, "source": "en", "target": "de"}, body)
        pinned = ["taskset", "-c", self.cores] if self.cores else []
        command = [*pinned, *(body.name if part == "{body}" else part for part in command)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
        finally:
            os.unlink(body.name)
        rows = list(csv.DictReader(io.StringIO(done.stdout)))
        return [(float(r["offset"]), float(r["response-time"]), int(r["status-code"])) for r in rows]


def default_generator(cores: int | None = None) -> Generator:
    """hey on every core but the first when it is installed and there are two cores or more, the server on the
    first; else the Python loops."""
    allowed = sorted(os.sched_getaffinity(0))[: cores or None]  # the cores this process may use
    if shutil.which("hey") and shutil.which("taskset") and len(allowed) >= 2:
        return Generator("hey", ",".join(map(str, allowed[1:])), allowed[0])
    return Generator("python")
