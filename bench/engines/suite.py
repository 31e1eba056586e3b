"""Peak memory per process of the training command under accelerate's engines: DDP, FSDP2, FSDP1 and DeepSpeed
ZeRO-2 and ZeRO-3, with the repository's config files (examples/accelerate/), on CPU processes at the base size (§3,
Table 3) for a few updates. What sharding saves on each GPU is what it saves on each of these processes: the model
state (weights, gradients, Adam's two moments) divided among the processes; the activations and the libraries are the
same.

This writes BENCHMARKS.md's engines section, to which docs/distributed.md points.

  python -m bench engines                      # every engine, 2 processes, base size, 4 updates
  python -m bench engines --engines ddp zero3  # some of them
"""

import json
import math
import os
import subprocess
import sys
import tempfile

from ..common import report

SUITE = "engines"
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(report.ROOT, "examples", "accelerate")
# name: (config file, flags of the training command, environment); FSDP runs on CPU processes by
# tests/training/fsdp_on_cpu.py
ENGINES = {
    "ddp": ("ddp.yaml", ["--cpu"], {}),
    "fsdp2": ("fsdp2.yaml", ["--cpu"], {}),
    "fsdp1": ("fsdp1.yaml", ["--cpu"], {}),
    "zero2": ("zero2.yaml", [], {"DS_ACCELERATOR": "cpu"}),
    "zero3": ("zero3.yaml", [], {"DS_ACCELERATOR": "cpu"}),
}
TRAIN_FLAGS = [
    "--preset", "base", "--vocab-size", "8000", "--max-tokens", "1024", "--warmup-steps", "10", "--save-steps", "0",
    "--eval-steps", "0", "--num-beams", "1", "--max-source-length", "64", "--max-target-length", "64",
    "--report-to", "none",
]  # fmt: skip


def parse_args(argv: list[str]):
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="updates of each run")
    parser.add_argument("--train-args", default="", help="more flags for the training command (a quoted string)")
    parser.add_argument("--out", default=report.REPORT, help="the report to write the section into")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--report-from", help="write the section from results saved with --json, measuring nothing")
    return parser.parse_args(argv)


def write_data(folder: str) -> list[str]:
    """The embedded task's pairs as files: 3,000 to train on, two each to validate and test (the final beam search
    is not what is measured)."""
    from vanilla_transformer.training.tasks.numbers import english, german

    flags = []
    for split, numbers in (("train", range(1000, 4000)), ("validation", (21, 22)), ("test", (31, 32))):
        path = os.path.join(folder, f"{split}.jsonl")
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"translation": {"en": english(n), "de": german(n)}}) + "\n" for n in numbers)
        flags += [f"--{split}-file", path]
    return flags


def run_engine(name: str, args, work: str, data_flags: list[str], port: int) -> dict:
    """One launch of the training command under `name`; each process's peak resident memory and the run's size."""
    config, engine_flags, environment = ENGINES[name]
    peaks, out = os.path.join(work, f"{name}-peaks"), os.path.join(work, name)
    os.makedirs(peaks, exist_ok=True)
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", os.path.join(CONFIGS, config),
        "--num_processes", str(args.processes), "--main_process_port", str(port),
        os.path.join(HERE, "process.py"), "train", *data_flags, *TRAIN_FLAGS, "--max-steps", str(args.steps),
        *engine_flags, *args.train_args.split(), "--output-dir", out,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PEAK_DIR": peaks, **environment}
    finished = subprocess.run(command, env=env, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(f"{name}: the training command failed:\n{finished.stderr[-3000:]}")
    ranks = [json.load(open(os.path.join(peaks, rank))) for rank in sorted(os.listdir(peaks))]
    with open(os.path.join(out, "config.json")) as handle:
        config_json = json.load(handle)
    return {
        "config": config,
        "updates_peak_rss_mib": [rank["updates_peak_rss_mib"] for rank in ranks],
        "peak_rss_mib": [rank["peak_rss_mib"] for rank in ranks],
        "tensor_mib": [rank["tensor_mib"] for rank in ranks],
        "vocab_size": config_json["vocab_size"],
        "parameters": parameter_count(out),
    }


def parameter_count(folder: str) -> int:
    """The parameters of the model a run wrote (each tied matrix once, as saved)."""
    from safetensors import safe_open

    with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as weights:
        return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())


def run(args, work: str) -> dict:
    data_flags = write_data(work)
    results = {"engines": {}, "processes": args.processes, "steps": args.steps}
    for index, name in enumerate(args.engines):
        print(f"{name} ...", flush=True)
        results["engines"][name] = run_engine(name, args, work, data_flags, 29581 + index)
    first = next(iter(results["engines"].values()))
    results.update(vocab_size=first["vocab_size"], parameters=first["parameters"])
    return results


def section(results: dict) -> str:
    parameters, processes = results["parameters"], results["processes"]
    state_mib = parameters * 16 / 2**20  # float32 weights and gradients, Adam's two moments
    lines = [
        "<!-- engines: written by python -m bench engines -->",
        "## Several processes: peak memory per process under DDP, FSDP and DeepSpeed ZeRO",
        "",
        f"`{results['command']}`",
        "",
        f"{results['machine']}; {results['versions']}.",
        "",
        f"The training command at the base size ({parameters:,} parameters with a vocabulary of "
        f"{results['vocab_size']:,}: {state_mib:,.0f} MiB of float32 weights, gradients and Adam moments) on "
        f"{processes} CPU processes, {results['steps']} updates of 1,024 tokens per process, under each of the "
        "repository's accelerate config files (FSDP on CPU processes through tests/training/fsdp_on_cpu.py; DeepSpeed "
        "with DS_ACCELERATOR=cpu). For each process: the tensors it holds after the updates (every CPU tensor Python "
        "can reach, each storage once: the weights, the optimizer state and the engine's own buffers, what sharding "
        "divides; DDP and FSDP2 have freed the gradients by then, FSDP1 keeps its gradient shard, and DDP's gradient "
        "buckets, held in C++, are not counted), and "
        "its peak resident memory (VmHWM, libraries and data included) through the updates and over the whole run "
        "(the finish adds a whole copy of the weights on each process under FSDP and DeepSpeed):",
        "",
        "| engine | config file | tensors after the updates (MiB) | against DDP | peak RSS: updates (MiB) | run |",
        "|---|---|---|---|---|---|",
    ]
    ddp = results["engines"].get("ddp")
    baseline = max(ddp["tensor_mib"]) if ddp else None
    for name, engine in results["engines"].items():
        held = max(engine["tensor_mib"])
        against = f"{held / baseline:.2f}x" if baseline else "n/a"
        keys = ("tensor_mib", "updates_peak_rss_mib", "peak_rss_mib")
        tensors, updates, whole = (" / ".join(f"{v:,.0f}" for v in engine[key]) for key in keys)
        lines.append(
            f"| {name} | examples/accelerate/{engine['config']} | {tensors} | {against} | {updates} | {whole} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.report_from:
        results = report.read_json(args.report_from)
    else:
        with tempfile.TemporaryDirectory() as work:
            results = run(args, work)
        results["command"] = report.measuring_command(SUITE, argv)
        results.update(machine=report.machine(), versions=report.versions("torch", "accelerate", "deepspeed"))
    text = section(results)
    report.replace_section(text, args.out, report.ENGINES_MARKER)
    report.write_json(results, args.json)
    print(text)
    return 0
