"""Training and generation speed on a GPU: vanilla-transformer against transformers' MarianMTModel of the same
dimensions, in the same process, at the paper's base and big sizes (Table 3), in bf16, eager and compiled. Writes
its section at the end of BENCHMARKS.md.

    python -m bench gpu                                   # on a CUDA machine: base and big, several minutes
    python -m bench gpu --smoke --compile-backend aot_eager   # a tiny size on any device: checks the suite only

Training: target tokens per second of a training step (forward with each model's own cross-entropy, backward,
clipping, a fused Adam update, as the speed suite's step) on a token batch of --max-tokens source and as many target
tokens, the forward under bf16 autocast with float32 weights (as `vanilla-transformer train --mixed-precision bf16`),
eager and with the model under torch.compile; model FLOPs utilisation: the FLOPs of a forward and backward counted by
torch's FlopCounterMode (as the speed suite counts them) over the step time, as a fraction of the card's dense bf16
peak; the peak memory torch allocated for the step. Generation: greedy and beam-5 `generate()` sentences per second
(bf16 weights, a dynamic cache, a fixed number of new tokens). The two models alternate, as in the speed suite.
"""

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from ..common import models, report
from ..common.measure import compare, log_row, matmul_peak, training_batch
from ..common.step_profile import GROUPS, PROFILE_COLUMNS, profile_cells, profile_step
from .changes import change_lines, change_rows, changes_mode
from .step import CHANGES, Step, built_with_peak, release, step_flops

SUITE = "gpu"

# the paper's Table 3 rows, and a size small enough to check the suite on a CPU
SIZES = {
    "base": dict(models.SIZES["base"], dropout=0.1),
    "big": dict(d_model=1024, heads=16, d_ff=4096, layers=6, vocab=37000, dropout=0.3),
    "smoke": dict(d_model=64, heads=4, d_ff=128, layers=2, vocab=1000, dropout=0.1),
}
# dense bf16 tensor-core peak (no sparsity) in TFLOP/s, by the name torch.cuda.get_device_name gives; --peak-tflops
# for any other card
BF16_PEAK_TFLOPS = {
    "H200": 989.0,
    "H100 SXM": 989.0,
    "H100 80GB HBM3": 989.0,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
}


def card_peak(device: str, given: float | None) -> tuple[float, str]:
    """The dense bf16 peak in FLOP/s that utilisation is a fraction of, and where it comes from."""
    if given:
        return given * 1e12, f"{given:g} TFLOP/s (--peak-tflops)"
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name()
        for key, tflops in BF16_PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12, f"{tflops:g} TFLOP/s, the {key}'s dense bf16 peak"
        raise SystemExit(f"unknown card {name!r}: give its dense bf16 peak with --peak-tflops")
    measured = matmul_peak(device, 512, torch.bfloat16)
    return measured, f"{measured / 1e12:.3f} TFLOP/s, this machine's measured bf16 matmul peak"


def train_row(args, size_name: str, mode: str, peak: float) -> dict:
    """Both models' training steps at one size in one mode (eager, or compiled with --compile-backend)."""
    size, length = SIZES[size_name], args.length
    shape = (max(1, args.max_tokens // length), length, length)
    batch = training_batch(size, shape, args.device)
    flops = {kind: step_flops(kind, size, args.device, batch) for kind in ("vanilla", "marian")}
    backend = args.compile_backend if mode == "compiled" else None
    row = {"size": size_name, "mode": mode, "batch": shape, **timed_steps(args, size, batch, backend, flops, peak)}
    for name, kind in (("ours", "vanilla"), ("theirs", "marian")):
        seconds = row[f"{name}_ms"] / 1e3
        row[f"{name}_tok_s"], row[f"{name}_mfu"] = shape[0] * shape[2] / seconds, flops[kind] / seconds / peak
        if row.get(f"{name}_profile"):  # the MFU against what the GEMMs alone would allow
            row[f"{name}_of_ceiling"] = row[f"{name}_mfu"] / row[f"{name}_profile"]["gemm_ceiling"]
    return row


def timed_steps(args, size: dict, batch: dict, backend: str | None, flops: dict, peak: float) -> dict:
    """Both models' training steps, each built and run twice on its own for its peak memory, then timed
    alternately: milliseconds per step, their ratio (Marian's / ours) and the peak memory; then, with
    --profile-steps, each step's profile (`profile.profile_step`: its kernel time by group, its GEMM-only ceiling)."""
    built = {}
    for kind in ("vanilla", "marian"):
        built[kind] = built_with_peak(functools.partial(Step, kind, size, args.device, batch, backend), args.device)
    (ours, ours_peak), (theirs, theirs_peak) = built["vanilla"], built["marian"]
    del built
    timed = compare(lambda: ours, lambda: theirs, args.repeats, args.steps, args.device)
    row = {
        "ours_ms": timed["ours"] * 1e3,
        "theirs_ms": timed["theirs"] * 1e3,
        "ratio": timed["ratio"],
        "ours_peak_gib": ours_peak,
        "theirs_peak_gib": theirs_peak,
    }
    if args.profile_steps:
        for name, kind, step in (("ours", "vanilla", ours), ("theirs", "marian", theirs)):
            profiled = profile_step(step, args.device, args.profile_steps, flops[kind], peak)
            row[f"{name}_profile"] = profiled.as_dict()
    return row


def generate_rows(args, size_name: str) -> list[dict]:
    """Greedy and beam-5 generate() of both models, bf16 weights."""
    size = SIZES[size_name]
    sources = training_batch(size, (args.sentences, args.length, 1), args.device)["input_ids"]

    def make(kind: str, beams: int):
        model = models.build(kind, size, "sdpa", args.device, dropout=0.0).to(torch.bfloat16)
        return models.Generate(model, sources, beams, args.new_tokens)

    rows = []
    for beams in (1, 5):
        ours, theirs = functools.partial(make, "vanilla", beams), functools.partial(make, "marian", beams)
        timed = compare(ours, theirs, args.repeats, 1, args.device)
        release(args.device)
        row = {"size": size_name, "beams": beams, "ratio": timed["ratio"]}
        row.update({"ours_sent_s": args.sentences / timed["ours"], "theirs_sent_s": args.sentences / timed["theirs"]})
        log_row(rows, row)
    return rows


EXAMPLE_MODEL = Path(__file__).resolve().parents[2] / "examples" / "numbers-en-de"
# the translate command's runs: (engine, the flags of the device run, of the CPU run)
TRANSLATE_RUNS = (
    ("torch", ["--device", "cuda", "--dtype", "bfloat16"], ["--device", "cpu", "--dtype", "float32"]),
    (
        "ctranslate2",
        ["--device", "cuda", "--compute-type", "float16"],
        ["--device", "cpu", "--compute-type", "default"],
    ),
)


def translate_rows(args, folder: str) -> list[dict]:
    """`vanilla-transformer translate` on the same sentences (number words, beam 5) with each engine, on the card and
    on the CPU: the whole command's wall clock, loading included."""
    from vanilla_transformer.training.tasks.numbers import english

    from vanilla_transformer.exports.ctranslate2 import export_ctranslate2

    sentences = Path(folder) / "sentences.txt"
    sentences.write_text("".join(english(1 + n % 999) + "\n" for n in range(args.translate_sentences)))
    models = {"torch": str(EXAMPLE_MODEL), "ctranslate2": export_ctranslate2(str(EXAMPLE_MODEL), f"{folder}/ct2")}
    rows = []
    for engine, device_flags, cpu_flags in TRANSLATE_RUNS:
        row = {"engine": engine, "device": " ".join(device_flags[1::2]), "cpu": "cpu float32"}
        for where, flags in (("device", device_flags), ("cpu", cpu_flags)):
            command = [sys.executable, "-m", "vanilla_transformer", "translate", "--model", models[engine], "--input",
                       str(sentences), "--num-beams", "5", "--batch-size", "256", *flags]  # fmt: skip
            row[f"{where}_s"], row[f"{where}_error"] = timed_command(command)
        if row["device_s"] and row["cpu_s"]:
            row["ratio"] = row["cpu_s"] / row["device_s"]
        log_row(rows, row)
    return rows


def timed_command(command: list[str]) -> tuple[float | None, str | None]:
    """A command's wall clock in seconds, or None and the last line it wrote to stderr where it failed (the
    CTranslate2 wheel's CUDA on a machine with another, say): the suite goes on to the next row."""
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return time.perf_counter() - start, None


def run(args, measured=lambda results: None) -> dict:
    """Every row, in the order that matters where the machine is lent for a few minutes (the training issue's
    targets and decisions first), and `measured(results)` after each, so that a run stopped at a time limit keeps
    what it measured: compiled training at each size, each of --change-sizes' (base by default) followed by the
    candidate changes; then eager training; then generation; then the translate command."""
    peak, peak_source = card_peak(args.device, args.peak_tflops)
    results = {
        "card": report.machine(args.device, torch_threads=True),
        "peak": peak,
        "peak_source": peak_source,
        "train": [],
        "generate": [],
        "translate": [],
        "changes": [],
    }

    def add_changes(size_name: str) -> None:
        for row in change_rows(args, size_name, SIZES[size_name], peak):
            results["changes"].append(row)
            measured(results)

    for mode in [mode for mode in ("compiled", "eager") if mode in args.modes]:
        for size_name in args.sizes:
            log_row(results["train"], train_row(args, size_name, mode, peak))
            measured(results)
            if mode == changes_mode(args)[0] and size_name in args.change_sizes:
                add_changes(size_name)
        if mode == changes_mode(args)[0]:
            for size_name in [name for name in args.change_sizes if name not in args.sizes]:
                add_changes(size_name)
    for size_name in args.sizes:
        results["generate"] += generate_rows(args, size_name)
        measured(results)
    if args.device.startswith("cuda") and args.translate_sentences:
        with tempfile.TemporaryDirectory() as folder:
            results["translate"] = translate_rows(args, folder)
        measured(results)
    return results


# the targets of the GPU step: (size, mode, the row's field, at least, what it is)
TARGETS = (
    ("base", "compiled", "ratio", 1.3, "training tokens/s against Marian"),
    ("base", "compiled", "ours_mfu", 0.40, "MFU"),
    ("base", "compiled", "ours_of_ceiling", 0.8, "MFU against the GEMM-only ceiling"),
    ("big", "compiled", "ratio", 1.3, "training tokens/s against Marian"),
    ("big", "compiled", "ours_mfu", 0.45, "MFU"),
)


def target_lines(rows: list[dict]) -> list[str]:
    """Each target with its verdict, or why it is not measured (no such row in this run)."""
    lines = ["", "Targets:", ""]
    for size, mode, key, least, what in TARGETS:
        row = next((r for r in rows if (r["size"], r["mode"]) == (size, mode)), None)
        missing = f"no {mode} {size} row in this run" if row is None else "not profiled in this run"
        verdict = report.verdict(row and row.get(key), least, missing=missing)
        shown = f"{100 * least:g}%" if key.endswith("mfu") else f"{least:g}x"
        lines.append(f"- {size}, {mode}: {what} at least {shown}: {verdict}")
    return lines


def section(results: dict, args, command: str) -> str:
    """The GPU section of BENCHMARKS.md."""
    modes = " and ".join({"eager": "eager", "compiled": "with the model under torch.compile"}[m] for m in args.modes)
    prose = (
        "This model against MarianMTModel of the same dimensions "
        "in the same process, timed alternately; speed-up is the median over repeats of Marian's time / ours. "
        f"Training: a step on a token batch under bf16 autocast (float32 weights), {modes}; MFU: a forward and "
        "backward's FLOPs (torch's FlopCounterMode, as the speed suite counts them) / step time / the dense bf16 "
        "peak; peak: the memory torch allocated for the step. Generation: bf16 "
        f"weights, {args.sentences} sentences of {args.length} tokens, {args.new_tokens} new tokens."
    )
    facts = [
        f"card: {results['card']}; peak: {results['peak_source']}",
        report.versions("torch", "transformers", "vanilla-transformer"),
    ]
    lines = [
        *report.header_lines(
            "## GPU: training and generation in bf16", SUITE, [prose], command, facts, report.GPU_MARKER
        ),
        "| size | mode | batch (sent x src x tgt) | target tok/s ours | Marian | speed-up | MFU ours | Marian "
        "| peak GiB ours | Marian |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    train = sorted(results["train"], key=lambda r: (list(SIZES).index(r["size"]), r["mode"] != "eager"))
    for r in train:
        memory = [f"{r[key]:.1f}" if r[key] is not None else "-" for key in ("ours_peak_gib", "theirs_peak_gib")]
        lines.append(
            f"| {r['size']} | {r['mode']} | {' x '.join(map(str, r['batch']))} | {r['ours_tok_s']:.0f} | "
            f"{r['theirs_tok_s']:.0f} | {r['ratio']:.2f}x | {100 * r['ours_mfu']:.1f}% | {100 * r['theirs_mfu']:.1f}% "
            f"| {memory[0]} | {memory[1]} |"
        )
    lines += ["", "| size | search | ours sent/s | Marian sent/s | speed-up |", "|---|---|---|---|---|"]
    for r in results["generate"]:
        search = "greedy" if r["beams"] == 1 else f"beam {r['beams']}"
        lines.append(
            f"| {r['size']} | {search} | {r['ours_sent_s']:.1f} | {r['theirs_sent_s']:.1f} | {r['ratio']:.2f}x |"
        )
    if results.get("translate"):
        lines += ["", f"`vanilla-transformer translate` of {args.translate_sentences} sentences (number words, beam 5, "
                  "--batch-size 256, `examples/numbers-en-de`), the whole command's wall clock on the card and on "
                  "the machine's CPU:", "",
                  "| engine | on the card | seconds | on the CPU | seconds | speed-up |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for r in results["translate"]:
            device, cpu = (seconds_cell(r, where) for where in ("device", "cpu"))
            ratio = f"{r['ratio']:.2f}x" if r.get("ratio") else "-"
            lines.append(f"| {r['engine']} | {r['device']} | {device} | {r['cpu']} | {cpu} | {ratio} |")
    lines += profile_lines(train) + change_lines(results.get("changes", []))
    return "\n".join(lines + target_lines(results["train"])) + "\n"


def seconds_cell(row: dict, where: str) -> str:
    """A translate row's seconds on the card or the CPU, or why that run failed."""
    return f"{row[f'{where}_s']:.1f}" if row[f"{where}_s"] else f"failed: {row[f'{where}_error']}"


def profile_lines(rows: list[dict]) -> list[str]:
    """The training steps' kernel time by group (ms per step, under torch.profiler) and the GEMM-only ceiling."""
    profiled = [(r, name) for r in rows for name in ("ours", "theirs") if r.get(f"{name}_profile")]
    if not profiled:
        return []
    lines = ["", "Where a training step's time goes (`bench/common/step_profile.py`: a torch.profiler trace of the "
             "step, each kernel's time in ms per step by what it does; idle: the step's time in which no kernel ran; "
             "the GEMM-only ceiling: the step's FLOPs over its GEMM and attention time alone, as a share of the peak):",
             "", f"| size | mode | model | {PROFILE_COLUMNS} |",
             "|---|---|---|---|" + "---|" * (len(GROUPS) + 2)]  # fmt: skip
    for row, name in profiled:
        model = "ours" if name == "ours" else "Marian"
        lines.append(f"| {row['size']} | {row['mode']} | {model} | {profile_cells(row[f'{name}_profile'])} |")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--smoke", action="store_true", help="a tiny size, small batches, one repeat: checks the suite")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), help="default: base big (smoke with --smoke)")
    parser.add_argument("--max-tokens", type=int, help="source tokens per training batch (default 25000, the paper's)")
    parser.add_argument("--length", type=int, help="source and target length of every sentence (default 32)")
    parser.add_argument("--sentences", type=int, help="sentences per generate() call (default 256)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens every sentence decodes")
    parser.add_argument("--repeats", type=int, help="alternating repeats per comparison (default 5)")
    parser.add_argument("--steps", type=int, help="timed training steps per repeat (default 5)")
    parser.add_argument("--modes", nargs="+", choices=["eager", "compiled"], default=["eager", "compiled"])
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile's backend for the compiled rows")
    parser.add_argument(
        "--translate-sentences", type=int, help="sentences of the translate command's rows (default 10000; 0: none)"
    )
    parser.add_argument("--peak-tflops", type=float, help="the card's dense bf16 peak, for a card not in the table")
    parser.add_argument(
        "--profile-steps", type=int, default=3, help="steps traced by torch.profiler: kernel time by group (0: none)"
    )
    parser.add_argument(
        "--changes", nargs="*", choices=list(CHANGES), default=list(CHANGES), help="candidate changes to our step, "
        "each timed against the plain one (`bench/gpu/changes.py`; default: all; none: give the flag alone)",
    )  # fmt: skip
    parser.add_argument("--change-sizes", nargs="*", choices=list(SIZES), help="sizes of the changes' rows "
                        "(default: base; smoke with --smoke)")  # fmt: skip
    parser.add_argument("--out", default=report.REPORT)
    parser.add_argument("--json", help="also write the raw results here")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The flags, with the defaults that depend on --smoke filled in."""
    args = build_parser().parse_args(argv)
    smoke = args.smoke
    args.sizes = args.sizes or (["smoke"] if smoke else ["base", "big"])
    if args.change_sizes is None:
        args.change_sizes = ["smoke"] if smoke else ["base"]
    args.length, args.max_tokens = args.length or (8 if smoke else 32), args.max_tokens or (32 if smoke else 25000)
    args.sentences = args.sentences or (2 if smoke else 256)
    if args.translate_sentences is None:
        args.translate_sentences = 20 if smoke else 10000
    args.new_tokens = 2 if smoke else args.new_tokens
    args.repeats, args.steps = args.repeats or (1 if smoke else 5), args.steps or (1 if smoke else 5)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    transformers.logging.set_verbosity_error()
    if args.device.startswith("cuda"):  # as `vanilla-transformer train` on CUDA
        torch.set_float32_matmul_precision("high")
    # every compiled step of the run compiles a model of its own (ours, Marian's, each change's): past dynamo's
    # default of 8 graphs per function the later ones would run eager
    torch._dynamo.config.recompile_limit = 64
    command = report.measuring_command(SUITE, argv)

    def write(results: dict) -> None:
        report.replace_section(section(results, args, command), args.out, report.GPU_MARKER)
        report.write_json(results, args.json)

    print(section(run(args, write), args, command))
    return 0
