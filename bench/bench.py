"""Speed and memory of vanilla-transformer against transformers' MarianMTModel at identical dimensions, measured in
the same run, and against the machine's own measured matmul peak. Writes BENCHMARKS.md and a scaling plot.

    python bench/bench.py                 # all sizes, a few minutes per size on 2 CPU cores
    python bench/bench.py --quick         # smaller batches and fewer repeats: a few minutes in all
    python bench/bench.py --device cuda   # on a GPU machine (needs torch and transformers only)

Every figure in the output is measured by this script in the run that writes it. The two models are built with the
same d_model, heads, d_ff, layers, vocabulary, dropout and batch, are timed alternately (A B, then B A, ...) and the
ratio reported is the median over repeats of Marian's time divided by ours (> 1 means this model is faster).
"""

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

import vanilla_transformer

if __package__:  # imported as bench.bench
    from . import common
else:  # run as python bench/bench.py, which puts this folder on sys.path
    import common


def training_batch(size: dict, shape: tuple[int, int, int], device: str) -> dict:
    batch, src_len, tgt_len = shape
    generator = torch.Generator().manual_seed(1)
    ids = lambda length: torch.randint(3, size["vocab"], (batch, length), generator=generator)  # noqa: E731
    return {
        "input_ids": ids(src_len).to(device),
        "attention_mask": torch.ones(batch, src_len, dtype=torch.long, device=device),
        "decoder_input_ids": ids(tgt_len).to(device),
        "labels": ids(tgt_len).to(device),
    }


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class TrainStep:
    """Forward with labels (each model's own cross-entropy), backward, gradient clipping, a fused Adam update (as
    `vanilla-transformer train` uses), the same for both models."""

    def __init__(self, model, batch):
        self.model, self.batch = model.train(), batch
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)

    def __call__(self):
        loss = self.model(**self.batch, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def seconds_per_call(fn, calls: int, device: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / calls


def compare(make_ours, make_theirs, repeats: int, calls: int, device: str) -> dict:
    """Warm both up, then time them alternately; per-repeat times and the median ratio theirs/ours."""
    ours, theirs = make_ours(), make_theirs()
    ours(), theirs()  # warm-up (allocations, kernel selection)
    times = {"ours": [], "theirs": []}
    for repeat in range(repeats):
        order = [("ours", ours), ("theirs", theirs)]
        for name, fn in order if repeat % 2 == 0 else order[::-1]:
            times[name].append(seconds_per_call(fn, calls, device))
    ratios = [t / o for o, t in zip(times["ours"], times["theirs"])]
    # whether generate() actually ran compiled decoding steps (it compiles greedy and sampling, not beam search)
    compiled = {name: hasattr(getattr(fn, "model", None), "_compiled_call") for name, fn in order}
    return {
        "ours": statistics.median(times["ours"]),
        "theirs": statistics.median(times["theirs"]),
        "ratio": statistics.median(ratios),
        "ours_compiled": compiled["ours"],
        "theirs_compiled": compiled["theirs"],
    }


def matmul_peak(device: str, n: int, dtype=torch.float32) -> float:
    """The machine's dense matmul FLOP/s in this dtype and thread setting: best of several n x n products."""
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    torch.mm(a, b)
    best = min(seconds_per_call(lambda: torch.mm(a, b), 3, device) for _ in range(5))
    return 2 * n**3 / best


def training_flops(model, batch) -> int:
    """FLOPs of one forward+backward, counted by torch's FLOP counter (matmuls and attention), not estimated."""
    counter = FlopCounterMode(display=False)
    with counter:
        model(**batch, use_cache=False).loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def profile_table(step, rows: int = 12) -> str:
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48)


def peak_memory(size_name: str, task: str, attn: str, quick: bool, device: str, probes: int) -> dict:
    """Memory in MiB of each model doing one task, each probe in a fresh process (CPU: the process's peak RSS, and
    how much the task added to the RSS it started from; CUDA: max allocated). The two models' probes alternate, and
    the medians over `probes` processes are kept: one process's peak RSS varies by several MiB from run to run."""
    samples = {"vanilla": [], "marian": []}
    for probe in range(probes):
        for kind in ("vanilla", "marian") if probe % 2 == 0 else ("marian", "vanilla"):
            samples[kind].append(probe_memory(kind, size_name, task, attn, quick, device))
    median = lambda kind, i: statistics.median(sample[i] for sample in samples[kind])  # noqa: E731
    return {
        "size": size_name,
        "task": task,
        "probes": probes,
        "ours": median("vanilla", 0),
        "theirs": median("marian", 0),
        "ours_added": median("vanilla", 1),
        "theirs_added": median("marian", 1),
    }


def probe_memory(kind: str, size_name: str, task: str, attn: str, quick: bool, device: str) -> tuple[float, float]:
    """The peak and the memory the task added, measured by `memory_probe` in a fresh process."""
    args = [sys.executable, __file__, "--memory-probe", kind, size_name, task, attn, "--device", device]
    if quick:
        args.append("--quick")
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    peak, added = map(float, done.stdout.strip().splitlines()[-1].split())
    return peak, added


def memory_probe(kind: str, size_name: str, task: str, attn: str, quick: bool, device: str) -> None:
    """Prints the peak and how much the task added to the memory in use once the model and its inputs were built."""
    fn = probed_task(kind, size_name, task, attn, quick, device)
    start, setup_peak, task_peak = cuda_task_memory(fn, device) if device.startswith("cuda") else cpu_task_memory(fn)
    print(max(setup_peak, task_peak), task_peak - start)


def probed_task(kind: str, size_name: str, task: str, attn: str, quick: bool, device: str):
    """One model's training step ("train") or beam-5 generation, built with its inputs."""
    size = common.SIZES[size_name]
    model = common.build(kind, size, attn, device)
    shape = (common.QUICK_BATCHES if quick else common.BATCHES)[size_name]
    if task == "train":
        return TrainStep(model, training_batch(size, shape, device))
    return common.Generate(model, training_batch(size, (32, shape[1], 1), device)["input_ids"], 5, shape[2])


def cuda_task_memory(fn, device: str) -> tuple[float, float, float]:
    """MiB allocated before `fn` runs twice, the peak until then, and the peak while it runs."""
    synchronize(device)
    start, setup_peak = torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.reset_peak_memory_stats()
    fn()
    fn()
    synchronize(device)
    return start, setup_peak, torch.cuda.max_memory_allocated() / 2**20


def cpu_task_memory(fn) -> tuple[float, float, float]:
    """The process's RSS in MiB before `fn` runs twice, its peak until then, and its peak while `fn` runs."""
    start, setup_peak = common.current_rss_mib(), common.peak_rss_mib()
    # Linux: start the high-water mark afresh, so that what the task added is not hidden by a higher peak reached
    # while importing and building
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    fn()
    fn()
    return start, setup_peak, common.peak_rss_mib()


def scaling(size: dict, attn: str, device: str, quick: bool) -> dict:
    """Training step time of both models as the sequence length and the batch size grow."""
    lengths = [8, 16, 32, 64] if quick else [8, 16, 32, 64, 128]
    batches = [16, 32, 64, 128] if quick else [16, 32, 64, 128, 256]
    result = {"length": lengths, "batch": batches, "by_length": {}, "by_batch": {}}
    for kind in ("vanilla", "marian"):
        model = common.build(kind, size, attn, device)
        by_length, by_batch = [], []
        for length in lengths:
            step = TrainStep(model, training_batch(size, (32, length, length), device))
            step()
            by_length.append(seconds_per_call(step, 2, device))
        for batch in batches:
            step = TrainStep(model, training_batch(size, (batch, 16, 16), device))
            step()
            by_batch.append(seconds_per_call(step, 2, device))
        result["by_length"][kind], result["by_batch"][kind] = by_length, by_batch
    return result


def plot_scaling(result: dict, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, label in (("vanilla", "vanilla-transformer"), ("marian", "MarianMTModel")):
        left.plot(result["length"], [1000 * t for t in result["by_length"][kind]], marker="o", label=label)
        right.plot(result["batch"], [1000 * t for t in result["by_batch"][kind]], marker="o", label=label)
    left.set(
        xlabel="source = target length (tokens), batch 32", ylabel="training step (ms)", xscale="log", yscale="log"
    )
    right.set(xlabel="batch (sentences), length 16", ylabel="training step (ms)", xscale="log", yscale="log")
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def machine(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name()
    return f"{common.cpu_name()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    met = value >= target if higher_is_better else value <= target
    if met:
        return "met"
    gap = (target / value - 1) if higher_is_better else (value / target - 1)
    digits = 0 if gap >= 0.01 else 1 if gap >= 0.001 else 2  # a small gap still shows
    return f"missed by {100 * gap:.{digits}f}%"


def train_step(kind: str, size: dict, attn: str, device: str, batch: dict) -> "TrainStep":
    return TrainStep(common.build(kind, size, attn, device), batch)


def generator(kind: str, size: dict, attn: str, device: str, sources, beams: int, new_tokens: int, compiled: bool):
    return common.Generate(common.build(kind, size, attn, device), sources, beams, new_tokens, compiled)


def batch_shapes(args) -> dict:
    return common.QUICK_BATCHES if args.quick else common.BATCHES


def run(args) -> dict:
    """Every measurement the report shows, in the order they are taken."""
    results = {"train": [], "generate": [], "memory": [], "utilisation": []}
    results["matmul_peak"] = matmul_peak(args.device, 1024 if args.quick else 2048)
    for size_name in args.sizes:
        for attn in args.attn:
            measure_attention(results, args, size_name, attn)
        if not args.no_memory:
            for task in ("train", "beam5"):
                results["memory"].append(
                    peak_memory(size_name, task, args.attn[0], args.quick, args.device, probes=1 if args.quick else 3)
                )
    if not args.device.startswith("cuda"):
        results["profile"] = profiles(args, args.sizes[-1])
    if args.plot:
        scale_size = "tiny" if "tiny" in args.sizes else args.sizes[0]
        results["scaling"] = scaling(common.SIZES[scale_size], args.attn[0], args.device, args.quick)
        plot_scaling(results["scaling"], args.plot, f"Training step time, {scale_size} size, {args.attn[0]} attention")
    return results


def measure_attention(results: dict, args, size_name: str, attn: str) -> None:
    """One size with one attention: the training step, its utilisation (first attention only) and generation."""
    size, shape, device = common.SIZES[size_name], batch_shapes(args)[size_name], args.device
    batch = training_batch(size, shape, device)
    train = train_row(args, size_name, attn, batch, shape)
    log_row(results["train"], train)
    first = attn == args.attn[0]
    if first:
        results["utilisation"].append(utilisation_row(size_name, attn, device, batch, train["ours"], results))
    sources = training_batch(size, (32, shape[1], 1), device)["input_ids"]
    for compiled in (False, True) if first and not args.no_compile else (False,):
        for beams in (1, 5):
            log_row(results["generate"], generate_row(args, size_name, attn, sources, beams, compiled))


def log_row(rows: list, row: dict) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)


def repeats_and_calls(args) -> tuple[int, int]:
    """Alternating repeats per comparison and timed calls per repeat of a training step."""
    return args.repeats or (3 if args.quick else 5), args.steps or (2 if args.quick else 3)


def train_row(args, size_name: str, attn: str, batch: dict, shape: tuple[int, int, int]) -> dict:
    size, device = common.SIZES[size_name], args.device
    repeats, calls = repeats_and_calls(args)
    train = compare(
        functools.partial(train_step, "vanilla", size, attn, device, batch),
        functools.partial(train_step, "marian", size, attn, device, batch),
        repeats,
        calls,
        device,
    )
    target_tokens = shape[0] * shape[2]
    return {
        "size": size_name,
        "attn": attn,
        "batch": shape,
        **train,
        "ours_tgt_tok_s": target_tokens / train["ours"],
        "theirs_tgt_tok_s": target_tokens / train["theirs"],
        "ours_all_tok_s": shape[0] * (shape[1] + shape[2]) / train["ours"],
        "theirs_all_tok_s": shape[0] * (shape[1] + shape[2]) / train["theirs"],
    }


def utilisation_row(size_name: str, attn: str, device: str, batch: dict, step: float, results: dict) -> dict:
    """Our training step's counted FLOPs over its measured time, as a fraction of the measured matmul peak."""
    flops = training_flops(common.build("vanilla", common.SIZES[size_name], attn, device), batch)
    return {
        "size": size_name,
        "attn": attn,
        "flops": flops,
        "step": step,
        "fraction": flops / step / results["matmul_peak"],
    }


def generate_row(args, size_name: str, attn: str, sources, beams: int, compiled: bool) -> dict:
    size, new_tokens, device = common.SIZES[size_name], batch_shapes(args)[size_name][2], args.device
    repeats, _ = repeats_and_calls(args)
    gen = compare(
        functools.partial(generator, "vanilla", size, attn, device, sources, beams, new_tokens, compiled),
        functools.partial(generator, "marian", size, attn, device, sources, beams, new_tokens, compiled),
        repeats,
        1,
        device,
    )
    return {
        "size": size_name,
        "attn": attn,
        "beams": beams,
        "compiled": compiled,
        **gen,
        "ours_sent_s": 32 / gen["ours"],
        "theirs_sent_s": 32 / gen["theirs"],
    }


def profiles(args, size_name: str) -> dict:
    """torch.profiler tables of our training step and beam-5 generation at one size."""
    size, shape, device = common.SIZES[size_name], batch_shapes(args)[size_name], args.device
    model = common.build("vanilla", size, args.attn[0], device)
    sources = training_batch(size, (32, shape[1], 1), device)["input_ids"]
    return {
        "size": size_name,
        "train": profile_table(TrainStep(model, training_batch(size, shape, device))),
        "beam5": profile_table(common.Generate(model, sources, 5, shape[2])),
    }


def write_markdown(results: dict, args, command: str) -> str:
    lines = header_lines(results, args, command) + train_lines(results) + generate_lines(results)
    if results["memory"]:
        lines += memory_lines(results, args)
    lines += utilisation_lines(results)
    if results.get("scaling"):
        lines += scaling_lines(results, args)
    if results.get("profile"):
        lines += profile_lines(results)
    return "\n".join(lines) + "\n"


def header_lines(results: dict, args, command: str) -> list[str]:
    return [
        "# Benchmarks",
        "",
        "Generated by `bench/bench.py`; do not edit by hand. vanilla-transformer against transformers'",
        "`MarianMTModel` built from a `MarianConfig` of the same dimensions, vocabulary, dropout and batch, "
        "in the same",
        "process, timed alternately; the ratio is the median over repeats of Marian's time / ours (> 1: ours is",
        "faster). Both models compute their own cross-entropy loss in the training step.",
        "",
        f"- command: `{command}`",
        f"- machine: {machine(args.device)}",
        f"- torch {torch.__version__}, transformers {transformers.__version__}, "
        f"vanilla-transformer {vanilla_transformer.__version__}, Python {platform.python_version()}",
        f"- measured matmul peak (fp32): {results['matmul_peak'] / 1e9:.1f} GFLOP/s",
        "",
        "Sizes: `numbers` d_model 128, h 4, d_ff 512, 2+2 layers, vocab 400; `tiny` d_model 128, h 4, d_ff 256, 4+4,",
        "vocab 8000; `base` (the paper's) d_model 512, h 8, d_ff 2048, 6+6, vocab 37000.",
        "",
    ]


def train_lines(results: dict) -> list[str]:
    lines = [
        "## Training step (forward, backward, clipping, Adam)",
        "",
        "| size | attention | batch (sent x src x tgt) | ours ms | Marian ms | target tok/s ours | Marian | "
        "src+tgt tok/s ours | Marian | speed-up | target >= 1.2x |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["train"]:
        lines.append(
            f"| {r['size']} | {r['attn']} | {' x '.join(map(str, r['batch']))} | {1000 * r['ours']:.0f} | "
            f"{1000 * r['theirs']:.0f} | {r['ours_tgt_tok_s']:.0f} | {r['theirs_tgt_tok_s']:.0f} | "
            f"{r['ours_all_tok_s']:.0f} | {r['theirs_all_tok_s']:.0f} | {r['ratio']:.2f}x | "
            f"{verdict(r['ratio'], 1.2)} |"
        )
    return lines


def generate_lines(results: dict) -> list[str]:
    lines = [
        "",
        "## Generation (32 sentences, fixed number of new tokens)",
        "",
        "Decoding `eager` is `generate()` as it comes (a dynamic cache, no compilation). The other rows ask",
        "`generate()` for the library's compiled decoding, the same for both models: `cache_implementation=",
        '"static"` and a `CompileConfig` that allows the CPU. `static cache, compiled`: every decoding step',
        "ran through `torch.compile` (compiled in the untimed warm-up); `static cache`: `generate()` did not",
        "compile this search (it compiles greedy and sampling decoding, not beam search).",
        "",
        "| size | attention | decoding | search | ours sent/s | Marian sent/s | speed-up | target >= 1.3x |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["generate"]:
        search = "greedy" if r["beams"] == 1 else f"beam {r['beams']}"
        lines.append(
            f"| {r['size']} | {r['attn']} | {decoding(r)} | {search} | {r['ours_sent_s']:.1f} | "
            f"{r['theirs_sent_s']:.1f} | {r['ratio']:.2f}x | {verdict(r['ratio'], 1.3)} |"
        )
    return lines


def decoding(row: dict) -> str:
    """How a generation row decoded: eager, or with the static cache, compiled or not."""
    if not row.get("compiled"):
        return "eager"
    return "static cache, compiled" if row["ours_compiled"] and row["theirs_compiled"] else "static cache"


def memory_lines(results: dict, args) -> list[str]:
    probes = results["memory"][0].get("probes", 1)
    unit = (
        "max allocated"
        if args.device.startswith("cuda")
        else "peak RSS (VmHWM) of a fresh process, torch and transformers included"
    )
    lines = [
        "",
        f"## Peak memory ({unit}, MiB)",
        "",
        f"The median over {probes} fresh process{'es' if probes > 1 else ''} per model, the two models' "
        "processes alternating. `added`: the peak minus the memory in use once the model and its inputs "
        "were built, that is what the task itself took.",
        "",
        "| size | task | ours | Marian | ours / Marian | target <= 1.0 | added: ours | Marian |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["memory"]:
        added = f"{r['ours_added']:.0f} | {r['theirs_added']:.0f}" if "ours_added" in r else "- | -"
        lines.append(
            f"| {r['size']} | {r['task']} | {r['ours']:.0f} | {r['theirs']:.0f} | "
            f"{r['ours'] / r['theirs']:.2f} | {verdict(r['ours'] / r['theirs'], 1.0, False)} | "
            f"{added} |"
        )
    return lines


def utilisation_lines(results: dict) -> list[str]:
    lines = [
        "",
        "## Hardware utilisation of the training step",
        "",
        "FLOPs of one forward+backward counted with `torch.utils.flop_counter.FlopCounterMode`, divided by the",
        "measured step time (which also holds the optimizer), as a fraction of the measured matmul peak.",
        "",
        "| size | attention | GFLOP per step | step ms | GFLOP/s | fraction of peak | target >= 50% (base) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["utilisation"]:
        target = verdict(r["fraction"], 0.5) if r["size"] == "base" else "-"
        lines.append(
            f"| {r['size']} | {r['attn']} | {r['flops'] / 1e9:.1f} | {1000 * r['step']:.0f} | "
            f"{r['flops'] / r['step'] / 1e9:.1f} | {100 * r['fraction']:.0f}% | {target} |"
        )
    return lines


def scaling_lines(results: dict, args) -> list[str]:
    return [
        "",
        "## Scaling",
        "",
        "![training step time against length and batch]("
        f"{os.path.relpath(args.plot, os.path.dirname(os.path.abspath(args.out)))})",
        "",
        *scaling_table(results["scaling"], "length (batch 32)", "length", "by_length"),
        "",
        *scaling_table(results["scaling"], "batch (length 16)", "batch", "by_batch"),
    ]


def scaling_table(scaling_result: dict, heading: str, axis: str, times: str) -> list[str]:
    """Both models' step times in ms along one axis of the scaling measurement."""
    lines = [
        f"| {heading} | " + " | ".join(map(str, scaling_result[axis])) + " |",
        "|---|" + "---|" * len(scaling_result[axis]),
    ]
    for kind in ("vanilla", "marian"):
        lines.append(f"| {kind} ms | " + " | ".join(f"{1000 * t:.0f}" for t in scaling_result[times][kind]) + " |")
    return lines


def profile_lines(results: dict) -> list[str]:
    size = results["profile"]["size"]
    return [
        "",
        f"## Where the time goes: our training step at the {size} size (torch.profiler)",
        "",
        "```",
        results["profile"]["train"].strip(),
        "```",
        "",
        f"## Where the time goes: our beam-5 generation at the {size} size (torch.profiler)",
        "",
        "```",
        results["profile"]["beam5"].strip(),
        "```",
    ]


def parse_args(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller batches, fewer repeats")
    parser.add_argument("--sizes", nargs="+", choices=list(common.SIZES), default=list(common.SIZES))
    parser.add_argument("--attn", nargs="+", choices=["sdpa", "eager"], default=["sdpa", "eager"])
    parser.add_argument("--repeats", type=int, help="alternating repeats per comparison")
    parser.add_argument("--steps", type=int, help="timed calls per repeat")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="skip compiled generation (static cache + "
        "torch.compile), which spends tens of seconds compiling per model and search",
    )
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "BENCHMARKS.md")
    )
    parser.add_argument(
        "--plot",
        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaling.png"),
        help="the scaling PNG ('' to skip)",
    )
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument(
        "--report-from",
        metavar="JSON",
        help="measure nothing: write the report from the raw results a previous run saved with --json",
    )
    parser.add_argument("--memory-probe", nargs=4, metavar=("MODEL", "SIZE", "TASK", "ATTN"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def write_report(markdown: str, path: str) -> None:
    """Write the report to `path`, keeping bench/serving.py's and bench/data.py's sections after it if the file holds
    them."""
    with open(path, "w+" if not os.path.exists(path) else "r+") as handle:
        kept = common.kept_from(handle.read(), common.SERVING_MARKER, common.DATA_MARKER)  # kept as they are
        handle.seek(0)
        handle.truncate()
        handle.write(markdown + ("\n" + kept if kept else ""))


def main(argv=None) -> int:
    args = parse_args(argv)
    transformers.logging.set_verbosity_error()
    if args.memory_probe:
        memory_probe(*args.memory_probe, args.quick, args.device)
        return 0
    if args.report_from:
        with open(args.report_from) as handle:
            results = json.load(handle)
    else:
        results = run(args)
        given = sys.argv[1:] if argv is None else argv
        results["command"] = common.measuring_command("bench.py", given, files=("--json", "--out", "--plot"))
    markdown = write_markdown(results, args, results.get("command", "python bench/bench.py"))
    write_report(markdown, args.out)
    common.write_json(results, args.json)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
