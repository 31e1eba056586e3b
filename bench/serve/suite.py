"""Serving under load: `vanilla-transformer serve` in its own process, driven over loopback by Debian's `hey` (the
closed loops) and `open_loop.py` (the open loops) on cores of their own (`taskset`; else, or with `--generator
python`, by an asyncio + httpx load generator in this process), for each engine, against two baselines measured in
the same run: one request at a time (what LibreTranslate and OpenNMT-py's servers do; concurrency 1) and the engine
translating the same sentences offline in batches of 32 (`generate()`, or CTranslate2's `translate_batch`). Writes
the serve section of BENCHMARKS.md.

    python -m bench serve                                   # both engines, 60 s per load, a 5-minute soak
    python -m bench serve --data DATA_DIR                   # Multi30k's validation sentences (else number words)
    python -m bench serve --duration 5 --soak 10            # a quick look

The model is random weights at d_model 256, 3+3 layers (4 heads, d_ff 1024), with a BPE of 8,000 tokens trained on
the sentences; each translation is 24 new tokens long (random weights seldom end a sentence), so that every request
costs the same. The server and the offline baseline run the engine on 1 thread, leaving the other core to the load
generator; the server's queue holds at most 64 requests (`--max-queue-requests 64`).

Loads: a closed loop of 1, 8 and 32 clients, each sending its next sentence as soon as it has the last answer; the
capacity is the best of their throughputs. Then an open loop at twice the capacity (overload) and a soak at 70% of
it, requests sent at fixed intervals whatever the answers.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from ..common import memory, report
from .loads import Generator, default_generator

SUITE = "serve"
SIZE = dict(d_model=256, num_heads=4, d_ff=1024, encoder_layers=3, decoder_layers=3)
NEW_TOKENS = 24
CONCURRENCY = (1, 8, 32)
QUEUE_REQUESTS = 64
MAX_WAIT_MS = 5.0


def sentences_of(data: str | None, count: int = 1000) -> list[str]:
    """English sentences: Multi30k's validation split in `data`, else number words."""
    if data:
        with open(os.path.join(data, "validation.jsonl"), encoding="utf-8") as handle:
            return [json.loads(line)["translation"]["en"] for line in handle][:count]
    from vanilla_transformer.training.tasks.numbers import english

    return [english(n) for n in range(1, count + 1)]


def build_model(folder: str, sentences: list[str]) -> str:
    """A model folder of random weights with a BPE trained on the sentences; returns the folder."""
    import torch
    from vanilla_transformer.training.data.bpe import train_bpe_tokenizer

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

    tokenizer = train_bpe_tokenizer(sentences, vocab_size=8000)
    config = VanillaTransformerConfig(
        **SIZE, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.generation_config.num_beams = 1
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def engine_folder(engine: str, model: str, folder: str) -> str:
    if engine == "torch":
        return model
    from vanilla_transformer import export_ctranslate2

    return export_ctranslate2(model, os.path.join(folder, "ct2"))


def offline(engine: str, path: str, sentences: list[str]) -> dict:
    """The engine on its own, 1 thread: sentences/s in batches of 32, and the time of one sentence alone."""
    from vanilla_transformer.serving.engine import EngineSettings, load_engine

    settings = EngineSettings(path, engine, threads=1, max_length=NEW_TOKENS, source_lang="en", target_lang="de")
    translator = load_engine(settings)
    translator.warm_up()
    batch = sorted(sentences[:256], key=len)
    start = time.perf_counter()
    for i in range(0, len(batch), 32):
        translator.translate(batch[i : i + 32])
    rate = len(batch) / (time.perf_counter() - start)
    alone = []
    for sentence in sentences[:30]:
        start = time.perf_counter()
        translator.translate([sentence])
        alone.append(time.perf_counter() - start)
    return {"sentences_per_second": rate, "one_sentence_ms": 1000 * statistics.median(alone)}


def start_server(engine: str, path: str, port: int, cores: str | None = None) -> subprocess.Popen:
    """The server on `cores` (taskset's list; None: any)."""
    pinned = ["taskset", "-c", cores] if cores else []
    command = [
        *pinned,
        sys.executable, "-m", "vanilla_transformer.cli", "serve", path, "--engine", engine, "--port", str(port),
        "--threads", "1", "--max-length", str(NEW_TOKENS), "--source-lang", "en", "--target-lang", "de",
        "--max-queue-requests", str(QUEUE_REQUESTS), "--max-wait-ms", str(MAX_WAIT_MS), "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env)
    wait_ready(f"http://127.0.0.1:{port}", process)
    return process


def wait_ready(url: str, process: subprocess.Popen, timeout: float = 300) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited with status {process.returncode}")
        try:
            if httpx.get(url + "/ready").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("serve was not ready in time")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(records: list) -> dict:
    """Statuses, answers per second from the first request sent to the last answer, and latency percentiles."""
    duration = max(start + latency for start, latency, _ in records) - min(start for start, _, _ in records)
    ok = [latency for _, latency, status in records if status == 200]
    refused = [latency for _, latency, status in records if status == 429]
    statuses = {}
    for _, _, status in records:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {
        "requests": len(records),
        "statuses": statuses,
        "throughput": len(ok) / duration,
        "p50_ms": 1000 * (percentile(ok, 0.5) or 0),
        "p99_ms": 1000 * (percentile(ok, 0.99) or 0),
        "p99_429_ms": 1000 * percentile(refused, 0.99) if refused else None,
    }


def thirds_p99(records: list) -> list[float]:
    """The accepted requests' p99 latency in each third of the run, by when they were sent."""
    ok = sorted((start, latency) for start, latency, status in records if status == 200)
    if not ok:
        return []
    first, last = ok[0][0], ok[-1][0]
    step = (last - first) / 3 or 1
    return [
        1000 * (percentile([lat for s, lat in ok if first + k * step <= s <= first + (k + 1) * step], 0.99) or 0)
        for k in range(3)
    ]


def measure_engine(engine: str, path: str, sentences: list[str], load: Generator, duration: float, soak: float) -> dict:
    """One engine: offline first, then the server under each load (the server on core 0 when hey has the others),
    then SIGTERM."""
    results = {"offline": offline(engine, path, sentences)}
    port = report.free_local_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(engine, path, port, None if load.server_core is None else str(load.server_core))
    try:
        results["closed"] = {}
        for clients in CONCURRENCY:
            results["closed"][str(clients)] = summary(load.closed(url + "/translate", sentences, clients, duration))
        capacity = max(row["throughput"] for row in results["closed"].values())
        results["capacity"] = capacity
        rss_before = memory.status_mib("VmRSS", server.pid)
        records = load.open(url + "/translate", sentences, 2 * capacity, duration)
        results["overload"] = {
            **summary(records),
            "p99_by_third_ms": thirds_p99(records),
            "rss_before_mib": rss_before,
            "rss_after_mib": memory.status_mib("VmRSS", server.pid),
        }
        if soak:
            records = load.open(url + "/translate", sentences, 0.7 * capacity, soak)
            results["soak"] = {**summary(records), "seconds": soak}
        results["overload"]["server_p99_429_ms"] = server_p99_ms(url, "429")
        results["metrics_200"] = metric_total(
            url, 'vanilla_transformer_requests_total{endpoint="/translate",status="200"}'
        )
    finally:
        server.send_signal(signal.SIGTERM)
        results["exit_status"] = server.wait(timeout=120)
    return results


def server_p99_ms(url: str, status: str) -> float | None:
    """The server's own p99 time to answer /translate with `status`, from its latency histogram: the upper bound of
    the bucket that holds the 99th percentile (the time from reading the request to answering it, without the
    time a connection waits to be accepted and read)."""
    import httpx

    labels = ('endpoint="/translate"', f'status="{status}"')
    buckets = []
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("vanilla_transformer_request_seconds_bucket{") and all(x in line for x in labels):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(bound), float(line.rsplit(" ", 1)[1])))
    if not buckets or buckets[-1][1] == 0:
        return None
    total = max(count for _, count in buckets)
    return 1000 * next(bound for bound, count in sorted(buckets) if count >= 0.99 * total)


def metric_total(url: str, name: str) -> float:
    import httpx

    text = httpx.get(url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def verdicts(engine: str, r: dict) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for each of the issue's targets."""
    one, many, over = r["closed"]["1"], r["closed"]["32"], r["overload"]
    alone = r["offline"]["one_sentence_ms"]
    bound = alone + MAX_WAIT_MS + 5
    scaling = 3.0 if engine == "ctranslate2" else 2.0
    offline_rate = r["offline"]["sentences_per_second"]
    statuses = set(over["statuses"]) - {"200", "429"}
    thirds = over["p99_by_third_ms"]
    growth = over["rss_after_mib"] / over["rss_before_mib"] - 1 if over["rss_before_mib"] else None
    client_200 = sum(row["statuses"].get("200", 0) for row in r["closed"].values())
    client_200 += over["statuses"].get("200", 0) + (r["soak"]["statuses"].get("200", 0) if "soak" in r else 0)
    rows = [
        ("concurrency 1: median latency <= engine alone + max wait + 5 ms",
         f"{one['p50_ms']:.1f} ms (bound {bound:.1f})", report.verdict(one["p50_ms"], bound, higher_is_better=False)),
        (f"concurrency 32: throughput >= {scaling:g}x concurrency 1", f"{many['throughput'] / one['throughput']:.2f}x",
         report.verdict(many["throughput"] / one["throughput"], scaling)),
        ("concurrency 32: >= 70% of offline batches", f"{100 * many['throughput'] / offline_rate:.0f}%",
         report.verdict(many["throughput"] / offline_rate, 0.7)),
        ("concurrency 32: p99 <= 3x p50", f"{many['p99_ms'] / many['p50_ms']:.2f}x",
         report.verdict(many["p99_ms"] / many["p50_ms"], 3.0, higher_is_better=False)),
        ("2x overload: only 200 and 429", ", ".join(f"{k}: {v}" for k, v in sorted(over["statuses"].items())),
         "met" if not statuses else f"missed ({', '.join(sorted(statuses))})"),
        ("2x overload: 429 answered in < 50 ms at p99 (the clients' clock)",
         f"{over['p99_429_ms']:.1f} ms (the server's own: under {over['server_p99_429_ms'] or 0:g} ms)"
         if over["p99_429_ms"] is not None else "no 429",
         report.verdict(over["p99_429_ms"], 50, higher_is_better=False, missing="no 429")),
        ("2x overload: accepted p99 does not grow (last third <= 1.25x first)",
         " / ".join(f"{t:.0f}" for t in thirds) + " ms", report.verdict(thirds[2] / thirds[0], 1.25, False)
         if len(thirds) == 3 and thirds[0] else "not measured"),
        ("2x overload: memory grows < 10%", f"{100 * growth:+.1f}%" if growth is not None else "n/a",
         report.verdict(growth, 0.10, higher_is_better=False, missing="no /proc") if growth is not None else "n/a"),
        ("2x overload: goodput >= 80% of capacity", f"{100 * over['throughput'] / r['capacity']:.0f}%",
         report.verdict(over["throughput"] / r["capacity"], 0.8)),
        ("the clients' 200s = the server's /metrics count", f"{client_200} / {r['metrics_200']:.0f}",
         "met" if client_200 == r["metrics_200"] else "missed"),
        ("SIGTERM: exit status 0", str(r["exit_status"]), "met" if r["exit_status"] == 0 else "missed"),
    ]  # fmt: skip
    if "soak" in r:
        soak = r["soak"]
        errors = sum(v for k, v in soak["statuses"].items() if k != "200")
        rows.append((f"soak at 70% of capacity for {soak['seconds']:g} s: no errors",
                     f"{errors} of {soak['requests']}", "met" if errors == 0 else "missed"))  # fmt: skip
    return rows


def load_rows(r: dict) -> list[str]:
    lines = [
        "| load | requests | 200 | 429 | other | answered/s | p50 ms | p99 ms | 429 p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    loads = [(f"{clients} client{'s' if clients != '1' else ''}", row) for clients, row in r["closed"].items()]
    loads.append(("open loop, 2x capacity", r["overload"]))
    if "soak" in r:
        loads.append(("open loop, 70% of capacity (soak)", r["soak"]))
    for name, row in loads:
        other = sum(v for k, v in row["statuses"].items() if k not in ("200", "429"))
        p99_429 = f"{row['p99_429_ms']:.1f}" if row["p99_429_ms"] is not None else "-"
        lines.append(
            f"| {name} | {row['requests']} | {row['statuses'].get('200', 0)} | {row['statuses'].get('429', 0)} | "
            f"{other} | {row['throughput']:.1f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {p99_429} |"
        )
    return lines


def prose(results: dict) -> list[str]:
    """The section's paragraphs: what drove the server, and how to read the clients' clock."""
    load = results.get("generator", {"name": "python", "cores": None})
    if load["name"] == "hey":
        generator = (
            "Debian's `hey`, a native load generator, for the closed loops and `bench/serve/open_loop.py` (HTTP/1.1 "
            f"written on asyncio's streams, a process of its own) for the open ones, both pinned to "
            f"core{'' if load['cores'].isdigit() else 's'} {load['cores']} with `taskset` while the server (its event "
            f"loop and its engine's thread) runs on core {load.get('server_core', 0)}; "
            "every request sends the sentence of median length"
        )
        clock = (
            "The load generator and the server have cores of their own. The open loops send each request when it is "
            "due, at fixed intervals, whatever the answers, and time it from then (a request sent late counts its "
            "lateness; a connection that failed is a status 0). hey's own pacing (`-q`) would not make one: it paces "
            "each worker from their common start, so every worker sends at once, a burst per interval. hey leaves a "
            "connection that failed out of its records. The server's own time to answer a 429 is given beside the "
            "clients' (the bucket of its latency histogram that holds the 99th percentile)."
        )
    else:
        generator = "the asyncio + httpx load generator in `bench/serve/loads.py`"
        clock = (
            "On this machine's 2 cores the load generator, the server's event loop and the engine share the cores, "
            "CTranslate2 most (it releases the GIL while it translates). In the open loops the generator falls behind "
            "its schedule, requests wait in the kernel's accept queue before the server reads them, and the clients' "
            "latencies count that time; the server's own time to answer a 429, from reading the request to "
            "answering, is given beside them (the bucket of its latency histogram that holds the 99th percentile). A "
            "status 0 is a connection the client saw fail."
        )
    return [
        f"`vanilla-transformer serve` under load on this machine, driven over loopback by {generator}, against the "
        "engine translating the same sentences offline in batches of "
        f"32 and against one request at a time (1 client), measured in the same run. Random weights at d_model 256, "
        f"3+3 layers, {NEW_TOKENS} new tokens per sentence, greedy search; the server and the offline engine on 1 "
        f"thread; `--max-wait-ms {MAX_WAIT_MS:g} --max-queue-requests {QUEUE_REQUESTS}`. Each request is one "
        "sentence. Answers per second count from the first request sent to the last answer.",
        "",
        clock,
    ]


def section(results: dict, command: str) -> str:
    facts = [
        f"machine: {report.machine()}",
        report.versions("torch", "transformers", "ctranslate2", "fastapi", "uvicorn", "httpx"),
        f"sentences: {results['sentences']}; {results['duration']:g} s per load",
    ]
    heading = "## Serving under load: `vanilla-transformer serve`"
    lines = report.header_lines(heading, SUITE, prose(results), command, facts, report.SERVE_MARKER)
    for engine, r in results["engines"].items():
        off = r["offline"]
        lines += [
            f"### {engine}",
            "",
            f"Offline: {off['sentences_per_second']:.1f} sentences/s in batches of 32; one sentence alone "
            f"{off['one_sentence_ms']:.1f} ms. Capacity (the best closed loop): {r['capacity']:.1f} answers/s. "
            f"The server process's memory (VmRSS): {r['overload']['rss_before_mib']:.0f} MiB before the overload, "
            f"{r['overload']['rss_after_mib']:.0f} MiB after it.",
            "",
            *load_rows(r),
            "",
            "| target | measured | verdict |",
            "|---|---|---|",
            *(f"| {target} | {measured} | {verdict} |" for target, measured, verdict in verdicts(engine, r)),
            "",
        ]
    return "\n".join(lines)


def build_parser():
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--engines", nargs="+", choices=["torch", "ctranslate2"], default=["torch", "ctranslate2"])
    parser.add_argument("--data", help="a folder with Multi30k's validation.jsonl (default: number words)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of each load")
    parser.add_argument("--soak", type=float, default=300.0, help="seconds of the soak at 70%% of capacity; 0: none")
    parser.add_argument(
        "--generator", choices=["hey", "python"],
        help="the load generator: hey (default where installed, on every core but the first, the server pinned to "
        "the first) or the asyncio + httpx loops in this process",
    )  # fmt: skip
    parser.add_argument("--out", default=report.REPORT)
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument(
        "--report-from", metavar="JSON", help="rewrite the section from a run's --json, measuring nothing"
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.report_from:
        results = report.read_json(args.report_from)
        report.replace_section(section(results, results["command"]), args.out, report.SERVE_MARKER)
        return 0
    sentences = sentences_of(args.data)
    load = default_generator() if args.generator in (None, "hey") else Generator("python")
    if args.generator == "hey" and load.name != "hey":
        raise SystemExit("--generator hey: needs hey and taskset (Debian: apt-get install hey) and two cores")
    results = {"sentences": "Multi30k validation (English)" if args.data else "number words", "engines": {}}
    results["duration"], results["generator"] = (
        args.duration,
        {"name": load.name, "cores": load.cores, "server_core": load.server_core},
    )
    with tempfile.TemporaryDirectory() as folder:
        model = build_model(os.path.join(folder, "model"), sentences)
        for engine in args.engines:
            path = engine_folder(engine, model, folder)
            results["engines"][engine] = measure_engine(engine, path, sentences, load, args.duration, args.soak)
    results["command"] = report.measuring_command(SUITE, argv, folders=("--data",))
    report.write_json(results, args.json)
    text = section(results, results["command"])
    report.replace_section(text, args.out, report.SERVE_MARKER)
    print(text)
    return 0
