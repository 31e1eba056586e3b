"""The data pipeline at scale: seconds from the start of `vanilla-transformer train` to its first update, and its
peak memory, on corpora of 0.5 to 4.35 million pairs built from Multi30k. Writes the data section of BENCHMARKS.md
(after the serving suite's).

    python -m bench data --multi30k DIR                           # 0.5, 1, 2 and 4.35 million pairs
    python -m bench data --multi30k DIR --sizes 500000 1000000    # other sizes; the warm run is at the largest

DIR holds Multi30k's `train.jsonl` and `validation.jsonl` in the translation schema. For each size N the suite
writes `train-N.jsonl` into --work (a temporary folder by default): the training pairs, English and German only,
repeated to N lines in a seeded random order. It then starts the training command as a subprocess on a fresh, empty
datasets cache (cold) and stops it once metrics.jsonl holds its first line, the record of the first update. At the
warm size it runs the same command again on the same cache, which then holds the trained BPE and the tokenised
corpus (warm). Memory is the summed resident set of the process and all its children, sampled every 0.2 s, and the
main process's own peak (VmHWM).
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from ..common import memory, report
from .report import TARGET_PAIRS, analyse, section

SUITE = "data"
SIZES = [500_000, 1_000_000, 2_000_000, TARGET_PAIRS]
POLL_S = 0.2
BPE_REUSED = "Reusing the BPE trained on the same data with the same settings"
# the first output of each phase, on stdout or stderr: its seconds from the start are recorded
PHASES = {
    "loading": "Generating train split",
    "sampling": "Sampling the BPE's pairs",  # streamed: the BPE's sample read from the whole file
    "tokenising": "Tokenising",
    "batching": "Batching",
    "training": "Training:",
}
TRAIN_FLAGS = ["--source-lang", "en", "--target-lang", "de", "--max-steps", "3", "--eval-steps", "0"]
TRAIN_FLAGS += ["--save-steps", "0", "--report-to", "none", "--overwrite-output-dir"]


# --------------------------------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------------------------------


def read_pairs(path: str) -> list[str]:
    """The pairs of a translation-schema JSONL file as JSON lines that keep English and German only."""
    lines = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                pair = json.loads(line)["translation"]
                lines.append(json.dumps({"translation": {"en": pair["en"], "de": pair["de"]}}, ensure_ascii=False))
    return lines


def write_corpus(pairs: list[str], size: int, path: str, seed: int, chunk: int = 100_000) -> None:
    """`size` lines: the pairs repeated, in the order of a seeded random permutation of the repeated index, written
    a chunk at a time (only the index, 8 bytes a line, is held whole)."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(size) % len(pairs)
    with open(path, "w", encoding="utf-8") as handle:
        for start in range(0, size, chunk):
            handle.write("".join(pairs[i] + "\n" for i in order[start : start + chunk].tolist()))


# --------------------------------------------------------------------------------------------------------------------
# One run of the training command
# --------------------------------------------------------------------------------------------------------------------


def train_command(train: str, validation: str, out: str, train_args: str) -> list[str]:
    return [
        *[sys.executable, "-m", "vanilla_transformer.cli", "train"],
        *["--train-file", train, "--validation-file", validation, *TRAIN_FLAGS, "--output-dir", out],
        *shlex.split(train_args),
    ]


def train_env(cache: str) -> dict:
    """The environment of a run: offline, its own datasets cache, unbuffered output (the phases are read as they are
    printed, and nothing is lost when the run is stopped), the tokenizers' own default parallelism."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": cache, "PYTHONUNBUFFERED": "1"}
    env.pop("TOKENIZERS_PARALLELISM", None)
    return env


class Output:
    """A run's stdout and stderr files, read as they grow: when each phase's first line appeared."""

    def __init__(self, paths: list[str]):
        self.paths, self.offsets, self.carry = paths, [0] * len(paths), [""] * len(paths)
        self.phases = dict.fromkeys(PHASES)

    def read(self, seconds: float) -> None:
        for i, path in enumerate(self.paths):
            with open(path, "rb") as handle:
                handle.seek(self.offsets[i])
                new = handle.read()
            self.offsets[i] += len(new)
            text = self.carry[i] + new.decode("utf-8", errors="replace")
            for phase, marker in PHASES.items():
                if self.phases[phase] is None and marker in text:
                    self.phases[phase] = seconds
            self.carry[i] = text[-64:]  # a marker cut in two by a read

    def text(self, i: int) -> str:
        with open(self.paths[i], encoding="utf-8", errors="replace") as handle:
            return handle.read()


def tree_memory_mib(process) -> tuple[float, float]:
    """The summed resident set (RSS) and proportional set (PSS) of a process and all its children, in MiB
    (processes ending meanwhile count 0). Forked workers share pages with the main process: RSS counts a shared page
    once per process that maps it, PSS divides it among them, so the PSS sum is the memory the tree takes."""
    import psutil

    rss = pss = 0.0
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0.0, 0.0
    for member in family:
        try:
            rss += member.memory_info().rss / 2**20
        except psutil.Error:
            continue
        pss += memory.rollup_mib("Pss", member.pid) or 0.0
    return rss, pss


def stop_tree(process) -> None:
    """Terminate a process and all its children; kill what is left after 10 s."""
    import psutil

    try:
        family = [*process.children(recursive=True), process]
    except psutil.Error:
        family = [process]
    for member in family:
        try:
            member.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(family, timeout=10)
    for member in alive:
        try:
            member.kill()
        except psutil.Error:
            continue


def first_line_written(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return b"\n" in handle.read()
    except OSError:
        return False


def measure(command: list[str], env: dict, out: str, logs: str, timeout: float) -> dict:
    """Start the training command; poll every POLL_S until its metrics.jsonl holds a line (the first update), keeping
    the process tree's largest summed RSS and the main process's VmHWM (read once more at the end); then stop the
    tree."""
    import psutil

    shutil.rmtree(out, ignore_errors=True)
    streams = [f"{logs}.out", f"{logs}.err"]
    with open(streams[0], "wb") as stdout, open(streams[1], "wb") as stderr:
        start = time.perf_counter()
        child = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
    process, output, main_peak, anon_peak = psutil.Process(child.pid), Output(streams), None, 0.0
    tree_peak = pss_peak = 0.0
    try:
        while True:
            rss, pss = tree_memory_mib(process)
            tree_peak, pss_peak = max(tree_peak, rss), max(pss_peak, pss)
            main_peak = (
                memory.status_mib("VmHWM", child.pid) or main_peak
            )  # the last reading stands if the process has just ended
            anon_peak = max(anon_peak, memory.status_mib("RssAnon", child.pid) or 0.0)
            seconds = time.perf_counter() - start
            output.read(seconds)
            if first_line_written(os.path.join(out, "metrics.jsonl")):
                break
            if child.poll() is not None or seconds > timeout:
                ended = f"exited with status {child.returncode}" if child.returncode is not None else "timed out"
                raise RuntimeError(f"{shlex.join(command)} {ended} before its first update:\n{output.text(1)[-3000:]}")
            time.sleep(POLL_S)
        main_peak = memory.status_mib("VmHWM", child.pid) or main_peak
        rss, pss = tree_memory_mib(process)
        tree_peak, pss_peak = max(tree_peak, rss), max(pss_peak, pss)
    finally:
        stop_tree(process)
        child.wait()
    return {
        "first_update_s": seconds,
        "peak_tree_mib": tree_peak,
        "peak_tree_pss_mib": pss_peak,
        "peak_main_mib": main_peak,
        "peak_main_anon_mib": anon_peak,
        "phases": output.phases,
        "bpe_reused": BPE_REUSED in output.text(0),
    }


# --------------------------------------------------------------------------------------------------------------------
# The runs
# --------------------------------------------------------------------------------------------------------------------


def run_size(args, size: int, pairs: list[str], validation: str, work: str) -> list[dict]:
    """Build the corpus of `size` pairs and time the training command on it: cold, and at the warm size warm; and
    at the --streaming-sizes, the same with --streaming."""
    train = os.path.join(work, f"train-{size}.jsonl")
    write_corpus(pairs, size, train, args.seed)
    runs = []
    for mode in ("map", "streaming") if size in args.streaming_sizes else ("map",):
        runs += run_mode(args, size, mode, train, validation, work)
    if not args.keep:  # the corpus takes gigabytes at the largest sizes
        os.remove(train)
    return runs


def run_mode(args, size: int, mode: str, train: str, validation: str, work: str) -> list[dict]:
    """The cold run (and at the warm size the warm one) of one mode, on a datasets cache of its own."""
    cache = os.path.join(work, f"datasets-cache-{size}-{mode}")
    shutil.rmtree(cache, ignore_errors=True)
    train_args = f"{args.train_args} --streaming" if mode == "streaming" else args.train_args
    runs = []
    for kind in ("cold", "warm") if size == args.warm_size else ("cold",):
        out = os.path.join(work, f"run-{size}-{mode}-{kind}")
        figures = measure(train_command(train, validation, out, train_args), train_env(cache), out, out, args.timeout)
        runs.append({"pairs": size, "mode": mode, "cache": kind, **figures})
        print(json.dumps(runs[-1]), flush=True)
    if not args.keep:  # the cache takes gigabytes at the largest sizes
        for path in (cache, *(os.path.join(work, f"run-{size}-{mode}-{kind}") for kind in ("cold", "warm"))):
            shutil.rmtree(path, ignore_errors=True)
    return runs


def run(args, work: str) -> dict:
    pairs = read_pairs(os.path.join(args.multi30k, "train.jsonl"))
    validation = os.path.join(work, "validation.jsonl")
    with open(validation, "w", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in read_pairs(os.path.join(args.multi30k, "validation.jsonl")))
    runs = []
    for size in sorted(args.sizes):
        runs += run_size(args, size, pairs, validation, work)
    warm = [r for r in runs if r["cache"] == "warm"]
    return {
        "source_pairs": len(pairs),
        "runs": runs,
        "bpe_reused": bool(warm) and all(r["bpe_reused"] for r in warm),
        **analyse(runs),
    }


# --------------------------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--multi30k", metavar="DIR", help="the folder of Multi30k's train.jsonl and validation.jsonl")
    parser.add_argument("--sizes", nargs="+", type=int, default=SIZES, help="pairs per corpus")
    parser.add_argument("--warm-size", type=int, help="the size also run warm (default: the largest)")
    parser.add_argument(
        "--streaming-sizes",
        nargs="*",
        type=int,
        default=[TARGET_PAIRS],
        help="sizes also run with --streaming (cold, and warm at the warm size)",
    )
    parser.add_argument("--work", help="where corpora, caches and logs go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep each size's corpus, cache and run in --work")
    parser.add_argument("--train-args", default="", help="appended to the training command (one string)")
    parser.add_argument("--seed", type=int, default=0, help="of the corpus order")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a run may take to its first update")
    parser.add_argument("--out", default=report.REPORT)
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--report-from", metavar="JSON", help="measure nothing: write the section from --json's file")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The flags, checked: --multi30k unless --report-from, and a warm size among the sizes."""
    checks = build_parser()
    args = checks.parse_args(argv)
    if not args.report_from and not args.multi30k:
        checks.error("--multi30k DIR is required (unless --report-from)")
    args.warm_size = args.warm_size or max(args.sizes)
    if args.warm_size not in args.sizes:
        checks.error(f"--warm-size {args.warm_size} must be one of --sizes (its cold run fills the cache)")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.report_from:
        results = report.read_json(args.report_from)
    else:
        with tempfile.TemporaryDirectory() as temporary:
            work = args.work or temporary
            os.makedirs(work, exist_ok=True)
            results = run(args, work)
        files = ("--out", "--json", "--work")
        results["command"] = report.measuring_command(SUITE, argv, files, ["--multi30k"], ["--keep"])
        results.update(train_args=args.train_args, machine=report.machine())
        results["versions"] = report.versions("datasets", "tokenizers", "torch", "transformers")
    text = section(results, TRAIN_FLAGS)
    report.replace_section(text, args.out, report.DATA_MARKER)
    report.write_json(results, args.json)
    print(text)
    return 0
