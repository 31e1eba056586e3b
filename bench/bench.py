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
import resource
import statistics
import subprocess
import sys
import time

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSeq2SeqLM, CompileConfig, MarianConfig

import vanilla_transformer
from vanilla_transformer import VanillaTransformerConfig

# model shapes: the embedded number task, Transformer-Tiny for Multi30k, and the paper's base model
SIZES = {
    "numbers": dict(d_model=128, heads=4, d_ff=512, layers=2, vocab=400),
    "tiny": dict(d_model=128, heads=4, d_ff=256, layers=4, vocab=8000),
    "base": dict(d_model=512, heads=8, d_ff=2048, layers=6, vocab=37000),
}
# training batch (sentences, source length, target length) per size, and in --quick mode
BATCHES = {"numbers": (256, 12, 12), "tiny": (256, 16, 16), "base": (64, 32, 32)}
QUICK_BATCHES = {"numbers": (128, 12, 12), "tiny": (128, 16, 16), "base": (16, 32, 32)}
PAD, BOS, EOS = 0, 1, 2
SERVING_MARKER = "<!-- serving: written by bench/serving.py -->"  # BENCHMARKS.md from here on is serving.py's


def build(kind: str, size: dict, attn: str, device: str, dropout: float = 0.1):
    """The same Transformer as this package's model or as MarianMTModel (post-norm, sinusoidal, shared embeddings)."""
    if kind == "vanilla":
        config = VanillaTransformerConfig(
            vocab_size=size["vocab"],
            d_model=size["d_model"],
            num_heads=size["heads"],
            d_ff=size["d_ff"],
            encoder_layers=size["layers"],
            decoder_layers=size["layers"],
            dropout=dropout,
            max_position_embeddings=512,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
            decoder_start_token_id=BOS,
        )
    else:
        config = MarianConfig(
            vocab_size=size["vocab"],
            d_model=size["d_model"],
            encoder_attention_heads=size["heads"],
            decoder_attention_heads=size["heads"],
            encoder_ffn_dim=size["d_ff"],
            decoder_ffn_dim=size["d_ff"],
            encoder_layers=size["layers"],
            decoder_layers=size["layers"],
            dropout=dropout,
            attention_dropout=0.0,
            activation_dropout=0.0,
            activation_function="relu",
            scale_embedding=True,
            max_position_embeddings=512,
            pad_token_id=PAD,
            eos_token_id=EOS,
            forced_eos_token_id=None,
            decoder_start_token_id=PAD,
            share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
        )
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(config, attn_implementation=attn).to(device)


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


class Generate:
    """`generate` for a fixed number of new tokens (min = max), so both models decode exactly as many steps.

    `compiled`: the library's compiled decoding, a static cache with each decoding step run through torch.compile
    (generate() does this by itself on accelerators; on the CPU the compile config has to ask for it)."""

    def __init__(self, model, sources: torch.Tensor, num_beams: int, new_tokens: int, compiled: bool = False):
        self.model, self.sources = model.eval(), sources
        self.kwargs = dict(
            num_beams=num_beams,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            early_stopping=False if num_beams > 1 else None,
        )
        if compiled:
            compile_config = CompileConfig()
            compile_config._compile_all_devices = True
            self.kwargs.update(cache_implementation="static", compile_config=compile_config)
        self.kwargs = {k: v for k, v in self.kwargs.items() if v is not None}

    @torch.no_grad()
    def __call__(self):
        return self.model.generate(input_ids=self.sources, attention_mask=torch.ones_like(self.sources), **self.kwargs)


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
            args = [sys.executable, __file__, "--memory-probe", kind, size_name, task, attn, "--device", device]
            if quick:
                args.append("--quick")
            done = subprocess.run(args, capture_output=True, text=True, check=True)
            peak, added = map(float, done.stdout.strip().splitlines()[-1].split())
            samples[kind].append((peak, added))
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


def memory_probe(kind: str, size_name: str, task: str, attn: str, quick: bool, device: str) -> None:
    """Prints the peak and how much the task added to the memory in use once the model and its inputs were built."""
    size = SIZES[size_name]
    model = build(kind, size, attn, device)
    shape = (QUICK_BATCHES if quick else BATCHES)[size_name]
    if task == "train":
        fn = TrainStep(model, training_batch(size, shape, device))
    else:
        fn = Generate(model, training_batch(size, (32, shape[1], 1), device)["input_ids"], 5, shape[2])
    if device.startswith("cuda"):
        synchronize(device)
        start, setup_peak = torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20
        torch.cuda.reset_peak_memory_stats()
        fn()
        fn()
        synchronize(device)
        task_peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        start, setup_peak = current_rss_mib(), peak_rss_mib()
        # Linux: start the high-water mark afresh, so that what the task added is not hidden by a higher peak reached
        # while importing and building
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        fn()
        fn()
        task_peak = peak_rss_mib()
    print(max(setup_peak, task_peak), task_peak - start)


def proc_status_mib(field: str) -> float:
    """A memory field of /proc/self/status (Linux) in MiB; elsewhere getrusage's ru_maxrss, the process's peak so far.
    VmHWM, the peak, belongs to the process image and starts afresh at exec; ru_maxrss does not (it keeps the
    high-water mark of the forking parent), so it is only a fallback."""
    with contextlib.suppress(OSError):
        for line in open("/proc/self/status"):
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    return proc_status_mib("VmRSS")


def peak_rss_mib() -> float:
    return proc_status_mib("VmHWM")


def scaling(size: dict, attn: str, device: str, quick: bool) -> dict:
    """Training step time of both models as the sequence length and the batch size grow."""
    lengths = [8, 16, 32, 64] if quick else [8, 16, 32, 64, 128]
    batches = [16, 32, 64, 128] if quick else [16, 32, 64, 128, 256]
    result = {"length": lengths, "batch": batches, "by_length": {}, "by_batch": {}}
    for kind in ("vanilla", "marian"):
        model = build(kind, size, attn, device)
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


def cpu_name() -> str:
    """The CPU's model name (Linux), else what the platform module knows."""
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name()
    return f"{cpu_name()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    met = value >= target if higher_is_better else value <= target
    if met:
        return "met"
    gap = (target / value - 1) if higher_is_better else (value / target - 1)
    digits = 0 if gap >= 0.01 else 1 if gap >= 0.001 else 2  # a small gap still shows
    return f"missed by {100 * gap:.{digits}f}%"


def train_step(kind: str, size: dict, attn: str, device: str, batch: dict) -> "TrainStep":
    return TrainStep(build(kind, size, attn, device), batch)


def generator(kind: str, size: dict, attn: str, device: str, sources, beams: int, new_tokens: int, compiled: bool):
    return Generate(build(kind, size, attn, device), sources, beams, new_tokens, compiled)


def run(args) -> dict:
    device = args.device
    batches = QUICK_BATCHES if args.quick else BATCHES
    repeats = args.repeats or (3 if args.quick else 5)
    calls = args.steps or (2 if args.quick else 3)
    results = {"train": [], "generate": [], "memory": [], "utilisation": []}
    peak = matmul_peak(device, 1024 if args.quick else 2048)
    results["matmul_peak"] = peak
    for size_name in args.sizes:
        size, shape = SIZES[size_name], batches[size_name]
        for attn in args.attn:
            batch = training_batch(size, shape, device)
            train = compare(
                functools.partial(train_step, "vanilla", size, attn, device, batch),
                functools.partial(train_step, "marian", size, attn, device, batch),
                repeats,
                calls,
                device,
            )
            target_tokens = shape[0] * shape[2]
            results["train"].append(
                {
                    "size": size_name,
                    "attn": attn,
                    "batch": shape,
                    **train,
                    "ours_tgt_tok_s": target_tokens / train["ours"],
                    "theirs_tgt_tok_s": target_tokens / train["theirs"],
                    "ours_all_tok_s": shape[0] * (shape[1] + shape[2]) / train["ours"],
                    "theirs_all_tok_s": shape[0] * (shape[1] + shape[2]) / train["theirs"],
                }
            )
            print(json.dumps(results["train"][-1]), flush=True)
            if attn == args.attn[0]:
                flops = training_flops(build("vanilla", size, attn, device), batch)
                results["utilisation"].append(
                    {
                        "size": size_name,
                        "attn": attn,
                        "flops": flops,
                        "step": train["ours"],
                        "fraction": flops / train["ours"] / peak,
                    }
                )
            sources = training_batch(size, (32, shape[1], 1), device)["input_ids"]
            compiled_runs = (False, True) if attn == args.attn[0] and not args.no_compile else (False,)
            for compiled in compiled_runs:
                for beams in (1, 5):
                    gen = compare(
                        functools.partial(generator, "vanilla", size, attn, device, sources, beams, shape[2], compiled),
                        functools.partial(generator, "marian", size, attn, device, sources, beams, shape[2], compiled),
                        repeats,
                        1,
                        device,
                    )
                    results["generate"].append(
                        {
                            "size": size_name,
                            "attn": attn,
                            "beams": beams,
                            "compiled": compiled,
                            **gen,
                            "ours_sent_s": 32 / gen["ours"],
                            "theirs_sent_s": 32 / gen["theirs"],
                        }
                    )
                    print(json.dumps(results["generate"][-1]), flush=True)
        if not args.no_memory:
            for task in ("train", "beam5"):
                results["memory"].append(
                    peak_memory(size_name, task, args.attn[0], args.quick, device, probes=1 if args.quick else 3)
                )
    largest = args.sizes[-1]
    if not device.startswith("cuda"):
        size, shape = SIZES[largest], batches[largest]
        model = build("vanilla", size, args.attn[0], device)
        sources = training_batch(size, (32, shape[1], 1), device)["input_ids"]
        results["profile"] = {
            "size": largest,
            "train": profile_table(TrainStep(model, training_batch(size, shape, device))),
            "beam5": profile_table(Generate(model, sources, 5, shape[2])),
        }
    if args.plot:
        scale_size = "tiny" if "tiny" in args.sizes else args.sizes[0]
        results["scaling"] = scaling(SIZES[scale_size], args.attn[0], device, args.quick)
        plot_scaling(results["scaling"], args.plot, f"Training step time, {scale_size} size, {args.attn[0]} attention")
    return results


def write_markdown(results: dict, args, command: str) -> str:
    lines = [
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
    lines += [
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
        decoding = "eager"
        if r.get("compiled"):
            decoding = "static cache, compiled" if r["ours_compiled"] and r["theirs_compiled"] else "static cache"
        lines.append(
            f"| {r['size']} | {r['attn']} | {decoding} | {search} | {r['ours_sent_s']:.1f} | "
            f"{r['theirs_sent_s']:.1f} | {r['ratio']:.2f}x | {verdict(r['ratio'], 1.3)} |"
        )
    if results["memory"]:
        probes = results["memory"][0].get("probes", 1)
        unit = (
            "max allocated"
            if args.device.startswith("cuda")
            else "peak RSS (VmHWM) of a fresh process, torch and transformers included"
        )
        lines += [
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
    lines += [
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
    if results.get("scaling"):
        lines += [
            "",
            "## Scaling",
            "",
            "![training step time against length and batch]("
            f"{os.path.relpath(args.plot, os.path.dirname(os.path.abspath(args.out)))})",
            "",
            "| length (batch 32) | " + " | ".join(map(str, results["scaling"]["length"])) + " |",
            "|---|" + "---|" * len(results["scaling"]["length"]),
        ]
        for kind in ("vanilla", "marian"):
            lines.append(
                f"| {kind} ms | " + " | ".join(f"{1000 * t:.0f}" for t in results["scaling"]["by_length"][kind]) + " |"
            )
        lines += [
            "",
            "| batch (length 16) | " + " | ".join(map(str, results["scaling"]["batch"])) + " |",
            "|---|" + "---|" * len(results["scaling"]["batch"]),
        ]
        for kind in ("vanilla", "marian"):
            lines.append(
                f"| {kind} ms | " + " | ".join(f"{1000 * t:.0f}" for t in results["scaling"]["by_batch"][kind]) + " |"
            )
    if results.get("profile"):
        size = results["profile"]["size"]
        lines += [
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
    return "\n".join(lines) + "\n"


def measuring_command(argv: list[str]) -> str:
    """The command line that produced the figures, without the flags that only name output files."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--json", "--out", "--plot"):
            skip = True
        elif not arg.startswith(("--json=", "--out=", "--plot=")):
            kept.append(arg)
    return " ".join(["python bench/bench.py", *kept])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller batches, fewer repeats")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
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
    args = parser.parse_args(argv)
    transformers.logging.set_verbosity_error()
    if args.memory_probe:
        memory_probe(*args.memory_probe, args.quick, args.device)
        return 0
    if args.report_from:
        with open(args.report_from) as handle:
            results = json.load(handle)
    else:
        results = run(args)
        results["command"] = measuring_command(sys.argv[1:] if argv is None else argv)
    markdown = write_markdown(results, args, results.get("command", "python bench/bench.py"))
    with open(args.out, "w+" if not os.path.exists(args.out) else "r+") as handle:
        serving = handle.read().partition(SERVING_MARKER)  # bench/serving.py's section, kept as it is
        handle.seek(0)
        handle.truncate()
        handle.write(markdown + ("\n" + "".join(serving[1:]) if serving[1] else ""))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
