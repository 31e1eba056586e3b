"""Corpus translation: `vanilla-transformer translate` on a corpus file against the loop a transformers user writes
over MarianMTModel's `generate()`, and its CTranslate2 engine against CTranslate2's own `translate_file` on the same
export, each engine in a fresh process timed end to end, side by side in one run. Writes the translate section of
BENCHMARKS.md.

    python -m bench translate --data DATA_DIR                 # Multi30k's training side, 100,000 sentences a size
    python -m bench translate --data DATA_DIR --sentences 10000 400   # per size: about 20 minutes on 2 cores
    python -m bench translate --quick --sizes tiny            # number words, a look in a minute or two

Per size: a BPE trained on the corpus (both sides), a MarianMTModel of random weights (seed 0) at the size's
dimensions, imported into this package exactly (`import_checkpoint`) and exported to CTranslate2 (float32). So that
outputs end at varied lengths near the sources', one head of the last decoder layer's cross-attention attends from
each target position to the same source position and reads the source's end of sentence there, and the output bias
of </s> is calibrated until greedy outputs are as long as their sources on average.

Rows, for each search: `translate` (torch engine) and the MarianMTModel loop (batches of 32 in input order); the
CTranslate2 engine and `translate_file` (the corpus pre-tokenized into the export's tokens); the torch engine on 2
processes (torchrun, OMP_NUM_THREADS=1 each) for context; and the torch engine's peak memory on a tenth of the corpus.
"""

import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from ..common import memory, models, report
from .build import POOL, build_models, corpus, file_search, pretokenize, write_lines
from .report import LABELS, SUITE, section

DEFAULT_SENTENCES, QUICK_SENTENCES = 100_000, 300
MARIAN_BATCH = 32  # the loop's sentences per generate() call
PROCESSES = 2  # the torch engine's processes under torchrun, for context
WINDOW = 2000  # `translate --read-window`'s default: the most lines a window of ours holds
ENGINES = tuple(LABELS)  # ours, marian, ours-ct2, translate_file, ours-2proc: the rows of each search


def search_name(beams: int) -> str:
    return "greedy" if beams == 1 else f"beam {beams}"


# --------------------------------------------------------------------------------------------------------------------
# The processes
# --------------------------------------------------------------------------------------------------------------------


def probe(kind: str, result: str, rest: list[str]) -> int:
    """In a fresh process: run one engine, then write its peak memory (VmHWM) to `result`.RANK."""
    status = 0
    if kind == "cli":
        from vanilla_transformer.cli import main as cli

        status = cli(rest)
    elif kind == "marian":
        marian_loop(*rest)
    else:
        translate_file(*rest)
    rank = os.environ.get("RANK", "0")
    with open(f"{result}.{rank}", "w") as handle:
        json.dump({"peak_mib": memory.peak_rss_mib()}, handle)
    return status


def marian_loop(folder: str, source: str, output: str, beams: str, max_length: str) -> None:
    """The loop a transformers user writes: batches of MARIAN_BATCH lines in input order through generate()."""
    import torch
    from transformers import AutoTokenizer, MarianMTModel

    tokenizer, model = AutoTokenizer.from_pretrained(folder), MarianMTModel.from_pretrained(folder).eval()

    def translate(lines: list[str]) -> list[str]:
        batch = tokenizer(lines, padding=True, return_tensors="pt")
        out = model.generate(**batch, num_beams=int(beams), max_new_tokens=int(max_length))
        return tokenizer.batch_decode(out, skip_special_tokens=True)

    with torch.inference_mode(), open(source, encoding="utf-8") as lines, open(output, "w", encoding="utf-8") as out:
        batch = []
        for line in lines:
            batch.append(line.rstrip("\n"))
            if len(batch) == MARIAN_BATCH:
                out.writelines(text + "\n" for text in translate(batch))
                batch = []
        if batch:
            out.writelines(text + "\n" for text in translate(batch))


def translate_file(folder: str, source: str, output: str, max_tokens: str, search: str) -> None:
    """CTranslate2's own translate_file on pre-tokenized lines, batches of `max_tokens` tokens."""
    import ctranslate2

    translator = ctranslate2.Translator(folder, device="cpu", inter_threads=1, intra_threads=0)
    translator.translate_file(source, output, max_batch_size=int(max_tokens), batch_type="tokens", **json.loads(search))


def command_of(kind: str, result: str, rest: list[str], processes: int = 1) -> list[str]:
    """This suite's probe in a fresh process (under torchrun with several processes)."""
    if processes == 1:
        return report.probe_command(sys.executable, SUITE, "--probe", kind, result, *rest)
    port = str(report.free_local_port())
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port", port]
    return [sys.executable, *torchrun, "-m", "bench", SUITE, "--probe", kind, result, *rest]


def run_process(command: list[str], result: str, threads_one: bool) -> dict:
    """The command timed from its start to its exit; each process's peak memory. Its output goes to a log."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_NUM_THREADS", None)
    if threads_one:
        env["OMP_NUM_THREADS"] = "1"
    for old in glob.glob(result + ".*"):
        os.remove(old)
    start = time.perf_counter()
    with open(result + ".log", "w") as log:
        done = subprocess.run(command, cwd=report.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode:
        tail = open(result + ".log", encoding="utf-8", errors="replace").read()[-3000:]
        raise RuntimeError(f"{shlex.join(command)} exited with status {done.returncode}:\n{tail}")
    peaks = [json.load(open(path))["peak_mib"] for path in sorted(glob.glob(result + ".[0-9]*"))]
    return {"seconds": seconds, "peak_mib": max(peaks), "processes": len(peaks)}


def read_window(count: int, processes: int = 1) -> int:
    """Lines a window for a corpus of `count` lines on `processes` processes: at most WINDOW, and as many windows as
    the processes times a whole number, of equal size, so that each process gets the same share (one process: the
    whole corpus in one window where it fits, as translate_file sorts it)."""
    windows = processes * -(-count // (processes * WINDOW))
    return -(-count // windows)


def translate_args(model: str, source: str, output: str, beams: int, window: int, args) -> list[str]:
    """`vanilla-transformer translate` as every row of ours runs it: each line whole, no progress."""
    return ["translate", "--model", model, "--input", source, "--output", output, "--num-beams", str(beams),
            "--max-length", str(args.max_length), "--batch-size", str(args.batch_size), "--max-tokens",
            str(args.max_tokens), "--read-window", str(window), "--no-split", "--progress", "never"]  # fmt: skip


def run_engine(engine: str, beams: int, paths: dict, args, source: str | None = None) -> tuple[dict, str]:
    """One row: the engine on the corpus (or on `source`, with its pre-tokenized twin `source`.tok) in a fresh
    process; its figures and its output file."""
    tag = f"{engine}-{beams}" + (f"-{os.path.basename(source)}" if source else "")
    output, result = os.path.join(paths["folder"], f"{tag}.out"), os.path.join(paths["folder"], tag)
    shutil.rmtree(output + ".partial", ignore_errors=True)  # a resumable run's parts: each row starts afresh
    if os.path.exists(output):
        os.remove(output)
    if engine == "marian":
        rest = [paths["marian"], source or paths["input"], output, str(beams), str(args.max_length)]
        command = command_of("marian", result, rest)
    elif engine == "translate_file":
        search = json.dumps(file_search(paths["ct2"], beams, args.max_length))
        tokens = f"{source}.tok" if source else paths["tokens"]
        command = command_of("file", result, [paths["ct2"], tokens, output, str(args.max_tokens), search])
    else:
        model = paths["ct2"] if engine == "ours-ct2" else paths["ours"]
        processes = PROCESSES if engine == "ours-2proc" else 1
        rest = translate_args(model, source or paths["input"], output, beams, paths["windows"][processes], args)
        command = command_of("cli", result, rest, processes)
    return run_process(command, result, threads_one=engine == "ours-2proc"), output


def output_texts(engine: str, path: str, ct2: str) -> list[str]:
    """A row's translations as text (translate_file's tokens decoded as the engine decodes them)."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")[:-1]
    if engine != "translate_file":
        return [line.strip() for line in lines]
    from transformers import AutoTokenizer

    from vanilla_transformer.exports.ctranslate2 import exported_vocabularies

    ids = {token: i for i, token in enumerate(exported_vocabularies(ct2)[1])}
    decoded = AutoTokenizer.from_pretrained(ct2).batch_decode(
        [[ids[token] for token in line.split()] for line in lines], skip_special_tokens=True
    )
    return [text.strip() for text in decoded]


def fastest_round(times: list[tuple[float, float, dict]]) -> tuple[float, float, dict]:
    """Of an engine's rounds, each (its seconds without its start-up, its start-up, its row), the fastest."""
    return min(times, key=lambda t: t[0])


def measure_search(beams: int, paths: dict, count: int, args) -> dict:
    """Every engine's row for one search, with its target tokens and its agreement with the MarianMTModel loop."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(paths["ours"])
    rows, texts, outputs, times = {}, {}, {}, {engine: [] for engine in ENGINES}
    for _ in range(args.repeats):  # round after round of every engine: a slow spell of the machine hits them all
        for engine in ENGINES:
            startup = run_engine(engine, beams, paths, args, source=paths["empty"])[0]["seconds"]
            row, outputs[engine] = run_engine(engine, beams, paths, args)
            times[engine].append((row["seconds"] - startup, startup, row))
    for engine in ENGINES:
        _, startup, rows[engine] = fastest_round(times[engine])
        texts[engine] = output_texts(engine, outputs[engine], paths["ct2"])  # each round writes the same file
        tokens = sum(len(ids) for ids in tokenizer(texts[engine])["input_ids"])
        seconds = max(rows[engine]["seconds"] - startup, 1e-3)  # the engine's time, its start-up left out
        rate = {"startup": startup, "sentences_per_second": count / seconds, "tokens_per_second": tokens / seconds}
        rows[engine].update(target_tokens=tokens, rounds=[round(t[0], 2) for t in times[engine]], **rate)
        print(json.dumps({"search": search_name(beams), "engine": engine, **rows[engine]}), flush=True)
    for engine in ENGINES:
        rows[engine]["same_as_marian"] = sum(a == b for a, b in zip(texts[engine], texts["marian"]))
    rows["ours-ct2"]["same_as_file"] = sum(a == b for a, b in zip(texts["ours-ct2"], texts["translate_file"]))
    return rows


def measure_size(size_name: str, pairs: list[tuple[str, str]], count: int, work: str, args) -> dict:
    """A size: its models, then each search's rows and the torch engine on a tenth of the corpus."""
    folder = os.path.join(work, size_name)
    os.makedirs(folder, exist_ok=True)
    facts = build_models(size_name, pairs, folder, args)
    lines = [source for source, _ in pairs[:count]]
    paths = {name: os.path.join(folder, name) for name in ("marian", "ours", "ct2")}
    paths.update(folder=folder, input=write_lines(lines, os.path.join(folder, "input.txt")))
    paths["windows"] = {processes: read_window(count, processes) for processes in (1, PROCESSES)}
    paths["tokens"] = pretokenize(paths["ct2"], lines, os.path.join(folder, "input.tok"))
    paths["empty"] = write_lines([], os.path.join(folder, "empty.txt"))  # each engine's start-up
    write_lines([], paths["empty"] + ".tok")
    search = file_search(paths["ct2"], max(args.beams), args.max_length)
    results = {"sentences": count, **facts, "patience": search["patience"], "read_windows": paths["windows"]}
    results["rows"] = {}
    for beams in args.beams:
        results["rows"][search_name(beams)] = measure_search(beams, paths, count, args)
    tenth = write_lines(lines[: max(1, count // 10)], os.path.join(folder, "tenth.txt"))
    row, _ = run_engine("ours", args.beams[0], paths, args, source=tenth)
    results["tenth"] = {"sentences": max(1, count // 10), "search": search_name(args.beams[0]), **row}
    return results


# --------------------------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--sizes", nargs="+", choices=list(models.SIZES), default=["tiny", "base"])
    parser.add_argument("--sentences", nargs="+", type=int,
                        help=f"the corpus's lines, one for every size or one per size (default {DEFAULT_SENTENCES:,}, "
                             f"--quick {QUICK_SENTENCES})")  # fmt: skip
    parser.add_argument("--data", help="a folder with Multi30k's train.jsonl (default: number words)")
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5], help="the searches: 1 is greedy")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of every engine's rows; each row keeps its fastest round (default 1)")  # fmt: skip
    parser.add_argument("--max-length", type=int, default=64, help="the most new tokens a sentence, every engine")
    parser.add_argument("--batch-size", type=int, default=64, help="`translate --batch-size`")
    parser.add_argument("--max-tokens", type=int, default=2048, help="`translate --max-tokens`, translate_file's")
    parser.add_argument("--calibration", type=int, help="sentences to calibrate the </s> bias on (256, --quick 64)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SENTENCES} sentences, 64 to calibrate on")
    parser.add_argument("--work", help="where the corpus, models and outputs go (default: a temporary folder)")
    parser.add_argument("--out", default=report.REPORT)
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument(
        "--report-from", metavar="JSON", help="rewrite the section from a run's --json, measuring nothing"
    )
    parser.add_argument("--probe", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def counts_of(parser: argparse.ArgumentParser, args) -> dict[str, int]:
    counts = args.sentences or [QUICK_SENTENCES if args.quick else DEFAULT_SENTENCES]
    if len(counts) == 1:
        counts = counts * len(args.sizes)
    if len(counts) != len(args.sizes) or min(counts) < 10:
        parser.error("--sentences: one count (at least 10) for every size, or one per size in --sizes order")
    return dict(zip(args.sizes, counts))


def run(args, counts: dict[str, int], work: str) -> dict:
    pairs = corpus(args.data, max(POOL, *counts.values()))  # the BPE sees every Multi30k pair
    results = {
        "machine": report.machine(),
        "versions": report.versions("torch", "transformers", "ctranslate2"),
        "corpus": "Multi30k's training side (English), repeated in a seeded random order" if args.data else
        "English number words of 1 to 6 digits",
        "settings": {"beams": args.beams, "max_length": args.max_length, "batch_size": args.batch_size,
                     "max_tokens": args.max_tokens, "marian_batch": MARIAN_BATCH, "processes": PROCESSES,
                     "repeats": args.repeats},
        "sizes": {},
    }  # fmt: skip
    for size_name, count in counts.items():
        results["sizes"][size_name] = measure_size(size_name, pairs, count, work, args)
    return results


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.probe:
        kind, result, *rest = args.probe
        return probe(kind, result, rest)
    if args.report_from:
        results = report.read_json(args.report_from)
        report.replace_section(section(results, results["command"]), args.out, report.TRANSLATE_MARKER)
        return 0
    counts = counts_of(parser, args)
    args.calibration = args.calibration or (64 if args.quick else 256)
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        results = run(args, counts, args.work)
    else:
        with tempfile.TemporaryDirectory() as work:
            results = run(args, counts, work)
    files = ("--out", "--json", "--work")
    results["command"] = report.measuring_command(SUITE, argv, files=files, folders=("--data",))
    report.write_json(results, args.json)
    text = section(results, results["command"])
    report.replace_section(text, args.out, report.TRANSLATE_MARKER)
    print(text)
    return 0
