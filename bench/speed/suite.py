"""Speed and memory of vanilla-transformer against transformers' MarianMTModel at identical dimensions, measured in
the same run, and against the machine's own measured matmul peak. Writes the head of BENCHMARKS.md and a scaling
plot.

    python -m bench speed                 # all sizes, a few minutes per size on 2 CPU cores
    python -m bench speed --quick         # smaller batches and fewer repeats: a few minutes in all
    python -m bench speed --device cuda   # on a GPU machine (needs torch and transformers only)

Every figure in the output is measured by this suite in the run that writes it. The two models are built with the
same d_model, heads, d_ff, layers, vocabulary, dropout and batch, are timed alternately (A B, then B A, ...) and the
ratio reported is the median over repeats of Marian's time divided by ours (> 1 means this model is faster).
"""

import argparse
import functools
import os

import torch
import transformers

from ..common import models, report
from ..common.measure import TrainStep, compare, log_row, matmul_peak, seconds_per_call, training_batch, training_flops
from ..common.step_profile import gemm_ceiling, profile_step
from .command_step import command_step_probe, command_step_row
from .memory import memory_probe, peak_memory
from .report import write_markdown

SUITE = "speed"
# the square matmuls whose fastest is the machine's peak: on 2 CPU cores 1024 has run faster than 2048 and 4096
PEAK_SIZES, QUICK_PEAK_SIZES = (1024, 2048, 4096), (512, 1024)


def profile_table(step, rows: int = 12) -> str:
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48)


def scaling(size: dict, attn: str, device: str, quick: bool) -> dict:
    """Training step time of both models as the sequence length and the batch size grow."""
    lengths = [8, 16, 32, 64] if quick else [8, 16, 32, 64, 128]
    batches = [16, 32, 64, 128] if quick else [16, 32, 64, 128, 256]
    result = {"length": lengths, "batch": batches, "by_length": {}, "by_batch": {}}
    for kind in ("vanilla", "marian"):
        model = models.build(kind, size, attn, device)
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


def train_step(kind: str, size: dict, attn: str, device: str, batch: dict) -> "TrainStep":
    return TrainStep(models.build(kind, size, attn, device), batch)


def generator(kind: str, size: dict, attn: str, device: str, sources, beams: int, new_tokens: int, compiled: bool):
    return models.Generate(models.build(kind, size, attn, device), sources, beams, new_tokens, compiled)


def batch_shapes(args) -> dict:
    return models.QUICK_BATCHES if args.quick else models.BATCHES


def run(args) -> dict:
    """Every measurement the report shows, in the order they are taken."""
    results = {"train": [], "generate": [], "memory": [], "utilisation": [], "command_step": []}
    results["matmul_peak"], results["peak_sizes"] = machine_peak(args), peak_sizes(args)
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
        results["scaling"] = scaling(models.SIZES[scale_size], args.attn[0], args.device, args.quick)
        plot_scaling(results["scaling"], args.plot, f"Training step time, {scale_size} size, {args.attn[0]} attention")
    at_the_peak(results, max(results["matmul_peak"], machine_peak(args)))
    return results


def peak_sizes(args) -> tuple[int, ...]:
    return QUICK_PEAK_SIZES if args.quick else PEAK_SIZES


def machine_peak(args) -> float:
    """The machine's matmul peak: the fastest of square products of `peak_sizes`."""
    return max(matmul_peak(args.device, n) for n in peak_sizes(args))


def at_the_peak(results: dict, peak: float) -> None:
    """The utilisation rows' fractions and GEMM-only ceilings as shares of `peak`, the best the run measured (at its
    start and its end: the machine's speed drifts over a run of half an hour, and a peak measured once at a slow
    moment would let a step's GEMMs run above it)."""
    results["matmul_peak"] = peak
    for row in results["utilisation"] + results["command_step"]:
        row["fraction"] = row["flops"] / row["step"] / peak
        row["profile"]["gemm_ceiling"] = gemm_ceiling(row["flops"], row["profile"]["groups"], peak)


def measure_attention(results: dict, args, size_name: str, attn: str) -> None:
    """One size with one attention: the training step, its utilisation (first attention only) and generation."""
    size, shape, device = models.SIZES[size_name], batch_shapes(args)[size_name], args.device
    batch = training_batch(size, shape, device)
    train = train_row(args, size_name, attn, batch, shape)
    log_row(results["train"], train)
    first = attn == args.attn[0]
    if first:
        utilisation = utilisation_row(size_name, attn, device, batch, train["ours"], results)
        results["utilisation"].append(utilisation)
        if not device.startswith("cuda"):  # the command's process settings are the CPU's
            flops, peak = utilisation["flops"], results["matmul_peak"]
            row = command_step_row(args, size_name, attn, flops, peak, *repeats_and_calls(args))
            log_row(results["command_step"], row)
    sources = training_batch(size, (32, shape[1], 1), device)["input_ids"]
    for compiled in (False, True) if first and not args.no_compile else (False,):
        for beams in (1, 5):
            log_row(results["generate"], generate_row(args, size_name, attn, sources, beams, compiled))


def repeats_and_calls(args) -> tuple[int, int]:
    """Alternating repeats per comparison and timed calls per repeat of a training step."""
    return args.repeats or (3 if args.quick else 5), args.steps or (2 if args.quick else 3)


def train_row(args, size_name: str, attn: str, batch: dict, shape: tuple[int, int, int]) -> dict:
    size, device = models.SIZES[size_name], args.device
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
    """Our training step's counted FLOPs, its measured time and its profile (`profile_step`: its time by group and
    its GEMM-only ceiling, two steps under torch.profiler); `at_the_peak` makes them shares of the run's peak."""
    model = models.build("vanilla", models.SIZES[size_name], attn, device)
    flops = training_flops(model, batch)
    profiled = TrainStep(model, batch)
    profiled()  # the optimizer's state made
    return {
        "size": size_name,
        "attn": attn,
        "flops": flops,
        "step": step,
        "profile": profile_step(profiled, device, 2, flops, results["matmul_peak"]).as_dict(),
    }


def generate_row(args, size_name: str, attn: str, sources, beams: int, compiled: bool) -> dict:
    size, new_tokens, device = models.SIZES[size_name], batch_shapes(args)[size_name][2], args.device
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
    size, shape, device = models.SIZES[size_name], batch_shapes(args)[size_name], args.device
    model = models.build("vanilla", size, args.attn[0], device)
    sources = training_batch(size, (32, shape[1], 1), device)["input_ids"]
    return {
        "size": size_name,
        "train": profile_table(TrainStep(model, training_batch(size, shape, device))),
        "beam5": profile_table(models.Generate(model, sources, 5, shape[2])),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--quick", action="store_true", help="smaller batches, fewer repeats")
    parser.add_argument("--sizes", nargs="+", choices=list(models.SIZES), default=list(models.SIZES))
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
    parser.add_argument("--out", default=report.REPORT)
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
    parser.add_argument("--command-step", nargs=4, metavar=("SIZE", "ATTN", "FLOPS", "PEAK"), help=argparse.SUPPRESS)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    transformers.logging.set_verbosity_error()
    if args.memory_probe:
        memory_probe(*args.memory_probe, args.quick, args.device)
        return 0
    if args.command_step:
        size_name, attn, flops, peak = args.command_step
        command_step_probe(args, size_name, attn, int(flops), float(peak))
        return 0
    if args.report_from:
        results = report.read_json(args.report_from)
    else:
        results = run(args)
        results["command"] = report.measuring_command(SUITE, argv, files=("--json", "--out", "--plot"))
    markdown = write_markdown(results, args, results.get("command", f"{report.COMMAND} {SUITE}"))
    report.replace_section(markdown, args.out)
    report.write_json(results, args.json)
    print(markdown)
    return 0
