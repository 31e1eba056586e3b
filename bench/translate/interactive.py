"""Corpus translation, for context: `fairseq-interactive` against `vanilla-transformer translate` on the same fairseq
model, imported, each in a fresh process timed end to end, side by side in one run. Writes the translate-fairseq
section of BENCHMARKS.md.

    python -m bench translate-fairseq --data DATA_DIR                   # Multi30k, the tiny size, 10,000 sentences
    python -m bench translate-fairseq --quick                           # number words, a look in a few minutes

fairseq runs in an environment of its own (`bash tests/fairseq_reference/make_env.sh` builds `.venv-fairseq`, or
`--fairseq-python` names another Python with fairseq). In it, fairseq's own tools make the model: the corpus
Moses-tokenised as fairseq's `--tokenizer moses` does it, joint subword-nmt merges learned and applied,
`fairseq-preprocess --joined-dictionary`, and `fairseq-train` at the size's dimensions (post-norm, all embeddings
shared) for `--updates` updates, so that its outputs end where a translation would. `import_checkpoint(...,
"fairseq")` imports it. Both engines read the raw text (Moses and BPE each in its own Python), batch by `--max-tokens`
source tokens (padding included) and `--batch-size` sentences within windows of `--buffer-size` lines sorted by
length, and write at most `--max-length` tokens a sentence before its </s> and at least one (fairseq's `--min-len 1`,
the imported model's `min_new_tokens`).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from ..common import memory, models, report
from .build import POOL, corpus, write_lines
from .suite import fastest_round, run_process, search_name

SUITE = "translate-fairseq"
MARKER = report.TRANSLATE_FAIRSEQ_MARKER
DEFAULT_SENTENCES, QUICK_SENTENCES = 10_000, 300
ENGINES = {"fairseq": "`fairseq-interactive`", "ours": "`translate`, torch engine, the imported model"}
TOKENIZE = """
import sys
from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig

language, source, target = sys.argv[1:]
tokenizer = MosesTokenizer(MosesTokenizerConfig(source_lang=language, target_lang=language))
with open(source, encoding="utf-8") as lines, open(target, "w", encoding="utf-8") as out:
    out.writelines(tokenizer.encode(line.rstrip("\\n")) + "\\n" for line in lines)
"""


# --------------------------------------------------------------------------------------------------------------------
# The fairseq model
# --------------------------------------------------------------------------------------------------------------------


def tool(python: str, name: str, *arguments, cwd: str) -> None:
    """A tool of the fairseq environment (`python` for its Python itself) in `cwd`; its output goes to a log there."""
    program = python if name == "python" else os.path.join(os.path.dirname(python), name)
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    with open(os.path.join(cwd, "fairseq-tools.log"), "a") as log:
        done = subprocess.run([program, *map(str, arguments)], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = open(os.path.join(cwd, "fairseq-tools.log"), encoding="utf-8", errors="replace").read()[-3000:]
        raise RuntimeError(f"{name} {' '.join(map(str, arguments))} failed:\n{tail}")


def architecture(size: dict) -> list[str]:
    """fairseq-train's flags for the size's dimensions: the paper's post-norm Transformer, all embeddings shared."""
    dimensions = {"embed-dim": "d_model", "ffn-embed-dim": "d_ff", "layers": "layers", "attention-heads": "heads"}
    sides = [
        (f"--{side}-{flag}", str(size[key])) for side in ("encoder", "decoder") for flag, key in dimensions.items()
    ]
    return ["--arch", "transformer", "--share-all-embeddings", *(word for pair in sides for word in pair)]


def training(updates: int) -> list[str]:
    """fairseq-train's other flags: a short run with a high learning rate, enough for outputs of natural lengths."""
    return ["--source-lang", "en", "--target-lang", "de", "--cpu", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
            "--clip-norm", "1.0", "--lr", "0.002", "--lr-scheduler", "inverse_sqrt", "--warmup-updates",
            str(max(1, updates // 4)), "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--dropout", "0.1", "--max-tokens", "4096", "--max-update", str(updates), "--seed", "1",
            "--disable-validation", "--no-epoch-checkpoints", "--num-workers", "0", "--data-buffer-size", "0",
            "--log-format", "simple", "--log-interval", "100"]  # fmt: skip


def train_fairseq(python: str, size: dict, pairs: list[tuple[str, str]], folder: str, updates: int) -> str:
    """fairseq's model of the size trained on `pairs` by fairseq's tools; its folder (the checkpoint, the
    dictionaries, bpecodes)."""
    raw, model = os.path.join(folder, "raw"), os.path.join(folder, "fairseq")
    os.makedirs(raw, exist_ok=True)
    for index, language in enumerate(("en", "de")):
        write_lines([pair[index] for pair in pairs], os.path.join(raw, f"train.{language}"))
        tool(python, "python", "-c", TOKENIZE, language, f"train.{language}", f"train.tok.{language}", cwd=raw)
    with open(os.path.join(raw, "train.tok.joint"), "w", encoding="utf-8") as joint:
        for language in ("en", "de"):
            joint.write(open(os.path.join(raw, f"train.tok.{language}"), encoding="utf-8").read())
    merges = size["vocab"] - 1000  # room for the characters: a joint dictionary near the size's vocabulary
    tool(python, "subword-nmt", "learn-bpe", "-s", merges, "-i", "train.tok.joint", "-o", "bpecodes", cwd=raw)
    for language in ("en", "de"):
        tool(python, "subword-nmt", "apply-bpe", "-c", "bpecodes", "-i", f"train.tok.{language}", "-o",
             f"train.bpe.{language}", cwd=raw)  # fmt: skip
    tool(python, "fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", "raw/train.bpe",
         "--destdir", "bin", "--joined-dictionary", "--workers", "1", cwd=folder)  # fmt: skip
    tool(python, "fairseq-train", "bin", *architecture(size), *training(updates), "--save-dir", model, cwd=folder)
    for name in ("dict.en.txt", "dict.de.txt"):
        shutil.copy(os.path.join(folder, "bin", name), model)
    shutil.copy(os.path.join(raw, "bpecodes"), model)
    return model


def build(size_name: str, pairs: list[tuple[str, str]], folder: str, args) -> dict:
    """The size's fairseq model (folder/fairseq) and its import (folder/ours); what was built."""
    from vanilla_transformer import import_checkpoint

    size = models.SIZES[size_name]
    model = train_fairseq(args.fairseq_python, size, pairs, folder, args.updates)
    ours = os.path.join(folder, "ours")
    imported, tokenizer = import_checkpoint(model, "fairseq", out=ours, trust_pickle=True, overwrite=True)
    imported.generation_config.min_new_tokens = 1  # fairseq's --min-len 1: no </s> as the first token
    imported.generation_config.save_pretrained(ours)
    return {"vocab": len(tokenizer), "updates": args.updates}


# --------------------------------------------------------------------------------------------------------------------
# The rows
# --------------------------------------------------------------------------------------------------------------------


def probe(kind: str, result: str, rest: list[str]) -> int:
    """In a fresh process: one engine (fairseq-interactive in fairseq's Python, or the command line), then its peak
    memory (VmHWM) written to `result`.0."""
    status = 0
    if kind == "fairseq":
        os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # fairseq's checkpoints are pickles of their settings
        from fairseq_cli.interactive import cli_main

        sys.argv = ["fairseq-interactive", *rest]
        cli_main()
    else:
        from vanilla_transformer.cli import main as cli

        status = cli(rest)
    with open(f"{result}.0", "w") as handle:
        json.dump({"peak_mib": memory.peak_rss_mib()}, handle)
    return status


def engine_command(engine: str, beams: int, source: str, output: str, result: str, paths: dict, args) -> list[str]:
    """The row's command: the engine on `source` with the run's batch and search settings."""
    if engine == "fairseq":
        model = paths["fairseq"]
        rest = [model, "--path", os.path.join(model, "checkpoint_last.pt"), "--source-lang", "en", "--target-lang",
                "de", "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", os.path.join(model, "bpecodes"),
                "--beam", str(beams), "--nbest", "1", "--cpu", "--max-tokens", str(args.max_tokens), "--batch-size",
                str(args.batch_size), "--buffer-size", str(args.buffer_size), "--max-len-a", "0", "--max-len-b",
                str(args.max_length), "--input", source]  # fmt: skip
        return report.probe_command(args.fairseq_python, SUITE, "--probe", engine, result, *rest)
    # fairseq's --max-len-b counts the tokens before </s>; --max-length counts the </s> that ends them too
    rest = ["translate", "--model", paths["ours"], "--input", source, "--output", output, "--num-beams", str(beams),
            "--max-length", str(args.max_length + 1), "--batch-size", str(args.batch_size), "--max-tokens",
            str(args.max_tokens), "--read-window", str(args.buffer_size), "--no-split",
            "--progress", "never"]  # fmt: skip
    return report.probe_command(sys.executable, SUITE, "--probe", engine, result, *rest)


def interactive_texts(log: str) -> list[str]:
    """fairseq-interactive's translations (its D- lines: detokenised), in input order."""
    found = {}
    for line in open(log, encoding="utf-8", errors="replace"):
        kind, _, rest = line.rstrip("\n").partition("-")
        if kind == "D" and "\t" in rest:
            index, _, text = rest.split("\t", 2)
            found[int(index)] = text
    return [found[i].strip() for i in sorted(found)]


def run_row(engine: str, beams: int, source: str, paths: dict, args) -> tuple[dict, list[str]]:
    """One engine on `source` in a fresh process: its figures and its translations."""
    tag = f"{engine}-{beams}-{os.path.basename(source)}"
    output, result = os.path.join(paths["folder"], f"{tag}.out"), os.path.join(paths["folder"], tag)
    shutil.rmtree(output + ".partial", ignore_errors=True)
    if os.path.exists(output):
        os.remove(output)
    row = run_process(engine_command(engine, beams, source, output, result, paths, args), result, threads_one=False)
    if engine == "fairseq":
        return row, interactive_texts(result + ".log")
    with open(output, encoding="utf-8") as handle:
        return row, [line.strip() for line in handle.read().split("\n")[:-1]]


def measure_search(beams: int, paths: dict, count: int, args) -> dict:
    """Both engines' rows for one search, round after round; each keeps its fastest round."""
    from transformers import AutoTokenizer

    import vanilla_transformer  # noqa: F401  (registers the imported folder's FairseqTokenizer)

    tokenizer = AutoTokenizer.from_pretrained(paths["ours"])
    times, texts, rows = {engine: [] for engine in ENGINES}, {}, {}
    for _ in range(args.repeats):
        for engine in ENGINES:
            startup = run_row(engine, beams, paths["empty"], paths, args)[0]["seconds"]
            row, texts[engine] = run_row(engine, beams, paths["input"], paths, args)
            times[engine].append((row["seconds"] - startup, startup, row))
    for engine in ENGINES:
        seconds, startup, rows[engine] = fastest_round(times[engine])
        if len(texts[engine]) != count:
            raise RuntimeError(f"{engine} wrote {len(texts[engine])} translations of {count} lines")
        tokens = sum(len(ids) for ids in tokenizer(text_target=texts[engine])["input_ids"])
        seconds = max(seconds, 1e-3)
        rows[engine].update(startup=startup, sentences_per_second=count / seconds, tokens_per_second=tokens / seconds,
                            target_tokens=tokens, rounds=[round(t[0], 2) for t in times[engine]])  # fmt: skip
        print(json.dumps({"search": search_name(beams), "engine": engine, **rows[engine]}), flush=True)
    rows["ours"]["same_as_fairseq"] = sum(a == b for a, b in zip(texts["ours"], texts["fairseq"]))
    return rows


def measure_size(size_name: str, pairs: list[tuple[str, str]], count: int, work: str, args) -> dict:
    """A size: its fairseq model and import, then each search's rows."""
    folder = os.path.join(work, size_name)
    os.makedirs(folder, exist_ok=True)
    facts = build(size_name, pairs, folder, args)
    paths = {"folder": folder, "fairseq": os.path.join(folder, "fairseq"), "ours": os.path.join(folder, "ours")}
    paths["input"] = write_lines([source for source, _ in pairs[:count]], os.path.join(folder, "input.txt"))
    paths["empty"] = write_lines([], os.path.join(folder, "empty.txt"))  # each engine's start-up
    rows = {search_name(beams): measure_search(beams, paths, count, args) for beams in args.beams}
    return {"sentences": count, **facts, "rows": rows}


# --------------------------------------------------------------------------------------------------------------------
# The section
# --------------------------------------------------------------------------------------------------------------------


def row_line(engine: str, search: str, row: dict, count: int) -> str:
    per_sentence = row["target_tokens"] / count
    same = f"{100 * row['same_as_fairseq'] / count:.1f}%" if "same_as_fairseq" in row else "100.0%"
    return (f"| {ENGINES[engine]} | {search} | {row['seconds']:.1f} ({row['startup']:.1f}) | "
            f"{row['sentences_per_second']:.1f} | {row['tokens_per_second']:.0f} | {per_sentence:.1f} | "
            f"{row['peak_mib']:.0f} | {same} |")  # fmt: skip


def size_lines(name: str, size: dict) -> list[str]:
    count, rows = size["sentences"], size["rows"]
    lines = [f"### {name}: {count:,} sentences", "",
             f"fairseq-train: {size['updates']} updates; joint vocabulary {size['vocab']:,}.", "",
             "| engine | search | seconds (start-up) | sentences/s | target tokens/s | target tokens a sentence | "
             "peak RSS MiB | lines as fairseq-interactive's |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [row_line(engine, search, found[engine], count) for search, found in rows.items() for engine in ENGINES]
    lines += ["", "| context | measured | verdict |", "|---|---|---|"]
    for search, found in rows.items():
        ratio = found["ours"]["sentences_per_second"] / found["fairseq"]["sentences_per_second"]
        lines.append(f"| {search}: `translate` against fairseq-interactive | {ratio:.2f}x | no target |")
    return [*lines, ""]


def section(results: dict, command: str) -> str:
    s = results["settings"]
    prose = [
        "`vanilla-transformer translate` (torch engine) against `fairseq-interactive` on the same fairseq model, "
        'imported exactly (`import_checkpoint(..., "fairseq")`), for context: a figure, not a target. fairseq\'s own '
        "tools made the model: the corpus Moses-tokenised as fairseq's `--tokenizer moses` does it, joint "
        "subword-nmt merges, `fairseq-preprocess --joined-dictionary` and `fairseq-train` at the size's dimensions "
        "(post-norm, all embeddings shared) for a few hundred updates, so that outputs end where a translation "
        "would. Each row is a fresh process timed from its start to its exit, its start-up (the same command on an "
        "empty input) in brackets and left out of the rates; each row gives its fastest of "
        f"{s['repeats']} round(s), the engines in turn. Both read the raw text (Moses and BPE in Python, each its "
        f"own), batch by at most {s['max_tokens']} source tokens (padding included) and {s['batch_size']} "
        f"sentences within windows of {s['buffer_size']} lines sorted by length (`--buffer-size`, `--read-window`), "
        f"and write at most {s['max_length']} new tokens a sentence before </s> (`--max-len-a 0 --max-len-b "
        f"{s['max_length']}`; `--max-length {s['max_length'] + 1}`, which counts the </s>) and at least one "
        "(fairseq's `--min-len 1`, given to the imported model's generation config as `min_new_tokens=1`). Target "
        "tokens: each output line encoded again with the imported tokenizer's target side, </s> included. Peak RSS "
        "is the process's VmHWM.",
    ]
    facts = [f"machine: {results['machine']}", results["versions"], f"corpus: {results['corpus']}"]
    lines = report.header_lines("## Corpus translation against fairseq-interactive, for context", SUITE, prose,
                                command, facts, MARKER)  # fmt: skip
    for name, size in results["sizes"].items():
        lines += size_lines(name, size)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    default_python = os.path.join(report.ROOT, ".venv-fairseq", "bin", "python")
    parser.add_argument("--fairseq-python", default=default_python, help="a Python with fairseq (.venv-fairseq's)")
    parser.add_argument("--sizes", nargs="+", choices=list(models.SIZES), default=["tiny"])
    parser.add_argument("--sentences", type=int, help=f"the corpus's lines (default {DEFAULT_SENTENCES:,}, --quick "
                                                      f"{QUICK_SENTENCES})")  # fmt: skip
    parser.add_argument("--data", help="a folder with Multi30k's train.jsonl (default: number words)")
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5], help="the searches: 1 is greedy")
    parser.add_argument("--repeats", type=int, default=1, help="rounds; each row keeps its fastest (default 1)")
    parser.add_argument("--updates", type=int, help="fairseq-train's updates (default 300, --quick 30)")
    parser.add_argument("--max-length", type=int, default=64, help="the most new tokens a sentence, both engines")
    parser.add_argument("--batch-size", type=int, default=64, help="the most sentences a batch, both engines")
    parser.add_argument("--max-tokens", type=int, default=2048, help="the most source tokens a batch, both engines")
    parser.add_argument("--buffer-size", type=int, default=2000, help="lines a window sorted by length, both engines")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SENTENCES} sentences, 30 updates")
    parser.add_argument("--work", help="where the corpus, models and outputs go (default: a temporary folder)")
    parser.add_argument("--out", default=report.REPORT)
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--report-from", metavar="JSON", help="rewrite the section from a run's --json")
    parser.add_argument("--probe", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def run(args, count: int, work: str) -> dict:
    pairs = corpus(args.data, max(POOL, count))
    results = {
        "machine": report.machine(),
        "versions": report.versions("torch", "transformers") + f"; fairseq {fairseq_version(args.fairseq_python)}",
        "corpus": "Multi30k's training pairs, repeated in a seeded random order (English translated)" if args.data
        else "English number words of 1 to 6 digits",
        "settings": {key: getattr(args, key) for key in ("beams", "repeats", "updates", "max_length", "batch_size",
                                                         "max_tokens", "buffer_size")},
        "sizes": {},
    }  # fmt: skip
    for size_name in args.sizes:
        results["sizes"][size_name] = measure_size(size_name, pairs, count, work, args)
    return results


def fairseq_version(python: str) -> str:
    code = "import importlib.metadata as m; print(m.version('fairseq-fixed'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.probe:
        kind, result, *rest = args.probe
        return probe(kind, result, rest)
    if args.report_from:
        results = report.read_json(args.report_from)
        report.replace_section(section(results, results["command"]), args.out, MARKER)
        return 0
    if not os.path.isfile(args.fairseq_python):
        parser.error(f"--fairseq-python {args.fairseq_python}: no such Python; `bash tests/fairseq_reference/"
                     "make_env.sh` builds .venv-fairseq")  # fmt: skip
    count = args.sentences or (QUICK_SENTENCES if args.quick else DEFAULT_SENTENCES)
    args.updates = args.updates or (30 if args.quick else 300)
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or scratch
        os.makedirs(work, exist_ok=True)
        results = run(args, count, work)
    results["command"] = report.measuring_command(SUITE, argv, files=("--out", "--json", "--work", "--fairseq-python"),
                                                  folders=("--data",))  # fmt: skip
    report.write_json(results, args.json)
    text = section(results, results["command"])
    report.replace_section(text, args.out, MARKER)
    print(text)
    return 0
