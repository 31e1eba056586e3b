"""The speed suite's report, the head of BENCHMARKS.md: the training step, generation, peak memory, utilisation,
scaling and profile tables, from the results the suite measured (or saved with --json)."""

import os

from ..common import report
from ..common.step_profile import GROUPS, PROFILE_COLUMNS, profile_cells


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
    prose = [
        "vanilla-transformer against transformers'",
        "`MarianMTModel` built from a `MarianConfig` of the same dimensions, vocabulary, dropout and batch, "
        "in the same",
        "process, timed alternately; the ratio is the median over repeats of Marian's time / ours (> 1: ours is",
        "faster). Both models compute their own cross-entropy loss in the training step.",
    ]
    facts = [
        f"machine: {report.machine(args.device, torch_threads=True)}",
        report.versions("torch", "transformers", "vanilla-transformer"),
        f"measured matmul peak (fp32): {results['matmul_peak'] / 1e9:.1f} GFLOP/s{peak_origin(results)}",
    ]
    return [
        *report.header_lines("# Benchmarks", "speed", prose, command, facts),
        "Sizes: `numbers` d_model 128, h 4, d_ff 512, 2+2 layers, vocab 400; `tiny` d_model 128, h 4, d_ff 256, 4+4,",
        "vocab 8000; `base` (the paper's) d_model 512, h 8, d_ff 2048, 6+6, vocab 37000.",
        "",
    ]


def peak_origin(results: dict) -> str:
    """How the peak was measured, where the results say (a run before the suite took several sizes did not)."""
    if "peak_sizes" not in results:
        return ""
    sizes = ", ".join(map(str, results["peak_sizes"][:-1])) + f" or {results['peak_sizes'][-1]}"
    return f", the fastest product of two n x n matrices, n = {sizes}, at the start or the end of the run"


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
            f"{report.verdict(r['ratio'], 1.2)} |"
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
            f"{r['theirs_sent_s']:.1f} | {r['ratio']:.2f}x | {report.verdict(r['ratio'], 1.3)} |"
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
            f"{r['ours'] / r['theirs']:.2f} | {report.verdict(r['ours'] / r['theirs'], 1.0, False)} | "
            f"{added} |"
        )
    return lines


def utilisation_lines(results: dict) -> list[str]:
    lines = [
        "",
        "## Hardware utilisation of the training step",
        "",
        "FLOPs of one forward+backward counted with `torch.utils.flop_counter.FlopCounterMode`, divided by the",
        "measured step time (which also holds the optimizer), as a fraction of the measured matmul peak. `library`:",
        "the step timed above, each model's own loss, in a process as Python starts it. `training command`: the step",
        "as `vanilla-transformer train` takes it on the CPU, in a fresh process with the command's process settings",
        "(freed memory kept mapped, denormals flushed) and its criterion (label smoothing 0.1, the logits' gradient",
        "written over them), the same model and batch (`bench/speed/command_step.py`). GEMM-only ceiling: the step's",
        "FLOPs over its time in matrix products and attention alone (torch.profiler), the fraction of the peak it",
        "would reach if everything around them were free.",
        "",
        "| size | attention | step | GFLOP per step | step ms | GFLOP/s | fraction of peak | GEMM-only ceiling | "
        "target >= 80% |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = utilisation_rows(results)
    for r, step in rows:
        ceiling = f"{100 * r['profile']['gemm_ceiling']:.0f}%" if r.get("profile") else "-"
        lines.append(
            f"| {r['size']} | {r['attn']} | {step} | {r['flops'] / 1e9:.1f} | {1000 * r['step']:.0f} | "
            f"{r['flops'] / r['step'] / 1e9:.1f} | {100 * r['fraction']:.0f}% | {ceiling} | "
            f"{report.verdict(r['fraction'], 0.8)} |"
        )
    return lines + time_by_group_lines(rows)


def utilisation_rows(results: dict) -> list[tuple[dict, str]]:
    """Each size's library step, then its training command's step where measured: (row, the step's name)."""
    commands = {(r["size"], r["attn"]): r for r in results.get("command_step", [])}
    rows = []
    for r in results["utilisation"]:
        rows.append((r, "library"))
        if (r["size"], r["attn"]) in commands:
            rows.append((commands[r["size"], r["attn"]], "training command"))
    return rows


def time_by_group_lines(rows: list[tuple[dict, str]]) -> list[str]:
    """The profiled steps' time by group (`rows`: `utilisation_rows`), ms per step under torch.profiler
    (`bench/common/step_profile.py`)."""
    profiled = [(r, step) for r, step in rows if r.get("profile")]
    if not profiled:
        return []
    lines = [
        "",
        "Where those steps' time goes (`bench/common/step_profile.py`: each operator's own time in ms per step",
        "under torch.profiler, by what it does; idle: the step's time outside every operator, Python and the",
        "autograd engine among it):",
        "",
        f"| size | step | {PROFILE_COLUMNS} |",
        "|---|---|" + "---|" * (len(GROUPS) + 3),
    ]
    lines += [f"| {r['size']} | {step} | {profile_cells(r['profile'])} |" for r, step in profiled]
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
