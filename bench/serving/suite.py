"""Serving speed: this model exported to CTranslate2 against its own `generate()` and against MarianMTModel, through
`generate()` and converted to CTranslate2 as well, all at the same dimensions and measured in the same run. Writes
the serving section of BENCHMARKS.md (the part after the speed suite's report).

    python -m bench serving                       # tiny and base sizes, 1 and 2 threads
    python -m bench serving --quick               # fewer repeats
    python -m bench serving --bleu-model runs/m30k-tiny-de --bleu-data DATA_DIR   # also BLEU per backend

Every engine runs in a fresh process per measurement, which prints its times and its peak memory (VmHWM); the
engines' processes alternate (A B C ..., then ... C B A) and the medians over repeats are reported. Each search
decodes exactly the same number of tokens in every engine (min = max new tokens), from the same random weights and
the same source tokens. MarianMTModel is converted with ctranslate2's own transformers converter (its
`MarianMTLoader`, fed the model and a tokenizer directly).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from ..common import memory, models, report

SUITE = "serving"

ENGINES = (
    "ours-ct2-float32",
    "ours-ct2-int8",
    "ours-generate",
    "marian-generate",
    "marian-ct2-float32",
    "marian-ct2-int8",
)
PARALLEL = "-parallel"  # see engines_at
SEARCHES = {"greedy": 1, "beam5": 5}
SENTENCES = 32  # per call; source and output lengths are the speed suite's per size


def word_tokenizer(vocab_size: int):
    """<pad> <s> </s> <unk> then t4 ... t{vocab_size - 1}: the vocabulary both models' exports carry."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + [f"t{i}" for i in range(4, vocab_size)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


class MarianVocabulary:
    """What ctranslate2's MarianMTLoader reads of a tokenizer. Like an OPUS-MT vocabulary, the last id is "<pad>",
    which the loader drops with its embedding row (the decoder starts from a zero vector instead): the same tokens
    t4 ... as `word_tokenizer`, less the last, which `sources` never draws."""

    eos_token, unk_token = "</s>", "<unk>"

    def __init__(self, vocab_size: int):
        tokens = ["<blank>", "<s>", "</s>", "<unk>"] + [f"t{i}" for i in range(4, vocab_size - 1)] + ["<pad>"]
        self.vocab = {token: i for i, token in enumerate(tokens)}

    def get_vocab(self) -> dict:
        return self.vocab


def sources(size: dict, src_len: int) -> list[list[int]]:
    rng = random.Random(1)
    return [[rng.randrange(4, size["vocab"] - 1) for _ in range(src_len - 1)] + [2] for _ in range(SENTENCES)]


def convert(size_name: str, folder: str) -> dict:
    """Write the four ctranslate2 folders of a size: each model in float32 and int8. Returns how Marian was
    converted."""
    import ctranslate2
    from ctranslate2.converters.transformers import MarianMTLoader

    from vanilla_transformer import export_ctranslate2

    size = models.SIZES[size_name]
    _, src_len, new_tokens = models.BATCHES[size_name]
    with open(os.path.join(folder, "shape.json"), "w") as handle:  # what the probes of this size read
        json.dump({"size": size, "src_len": src_len, "new_tokens": new_tokens}, handle)
    tokenizer = word_tokenizer(size["vocab"])
    for quantization in ("float32", "int8"):
        ours = models.build("vanilla", size, "sdpa", "cpu", dropout=0.0).eval()
        export_ctranslate2(
            ours,
            os.path.join(folder, f"ours-ct2-{quantization}"),
            quantization=quantization,
            tokenizer=tokenizer,
            max_positions=512,
        )
        marian = models.build("marian", size, "sdpa", "cpu", dropout=0.0).eval()
        spec = MarianMTLoader()(marian, MarianVocabulary(size["vocab"]))
        spec.validate()
        spec.optimize(quantization=quantization)
        os.makedirs(os.path.join(folder, f"marian-ct2-{quantization}"))
        spec.save(os.path.join(folder, f"marian-ct2-{quantization}"))
    return {"marian_converter": f"ctranslate2 {ctranslate2.__version__} MarianMTLoader"}


def engines_at(threads: int, engines) -> list[str]:
    """At several threads each CTranslate2 engine runs in both of ctranslate2's layouts: one batch on all threads
    (intra_threads), and, named with PARALLEL, the sentences split into one batch per thread, translated at once on
    one thread each (inter_threads)."""
    if threads == 1:
        return list(engines)
    return list(engines) + [engine + PARALLEL for engine in engines if "-ct2-" in engine]


def probe(engine: str, threads: int, folder: str, calls: int) -> dict:
    """In this fresh process: load one engine, warm it up, time `calls` calls of each search; print JSON. A
    CTranslate2 engine's process imports neither torch nor transformers, as a server running it would not."""
    with open(os.path.join(folder, "shape.json")) as handle:
        shape = json.load(handle)
    ids = sources(shape["size"], shape["src_len"])
    if "-ct2-" in engine:
        path = os.path.join(folder, engine.removesuffix(PARALLEL))
        run = ct2_runner(path, ids, shape["new_tokens"], threads, parallel=engine.endswith(PARALLEL))
    else:
        run = generate_runner(engine.split("-")[0], shape["size"], ids, shape["new_tokens"], threads)
    times = {}
    for search, beams in SEARCHES.items():
        run(beams)  # warm-up
        start = time.perf_counter()
        for _ in range(calls):
            run(beams)
        times[search] = (time.perf_counter() - start) / calls
    return {"times": times, "peak_mib": memory.peak_rss_mib()}


def ct2_runner(path: str, ids: list[list[int]], new_tokens: int, threads: int, parallel: bool = False):
    import ctranslate2

    inter, intra = (threads, 1) if parallel else (1, threads)
    translator = ctranslate2.Translator(path, device="cpu", inter_threads=inter, intra_threads=intra)
    tokens = [["</s>" if i == 2 else f"t{i}" for i in row] for row in ids]

    def run(beams: int):
        return translator.translate_batch(
            tokens,
            beam_size=beams,
            min_decoding_length=new_tokens,
            max_decoding_length=new_tokens,
            max_batch_size=-(-len(tokens) // inter),  # one share of the sentences per parallel batch
        )

    return run


def generate_runner(kind: str, size: dict, ids: list[list[int]], new_tokens: int, threads: int):
    import torch

    torch.set_num_threads(threads)
    model = models.build("vanilla" if kind == "ours" else "marian", size, "sdpa", "cpu", dropout=0.0)
    source = torch.tensor(ids)
    return lambda beams: models.Generate(model, source, beams, new_tokens)()


def measure(threads: int, folder: str, repeats: int, calls: int, engines) -> dict:
    """Medians over `repeats` fresh processes per engine, the engines' order reversed every other repeat."""
    samples = {engine: [] for engine in engines}
    for repeat in range(repeats):
        for engine in engines if repeat % 2 == 0 else engines[::-1]:
            command = report.probe_command(sys.executable, SUITE, "--probe", engine, str(threads), folder, str(calls))
            done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=report.ROOT)
            samples[engine].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        engine: {
            "times": {s: statistics.median(x["times"][s] for x in runs) for s in SEARCHES},
            "peak_mib": statistics.median(x["peak_mib"] for x in runs),
        }
        for engine, runs in samples.items()
    }


def bleu_by_backend(model: str, data: str, target_lang: str, folder: str, threads: int) -> dict:
    """Lowercased BLEU and time of `vanilla-transformer evaluate` on test_2016_flickr, per backend."""
    from vanilla_transformer import export_ctranslate2

    rows = {"pytorch": model}
    for quantization in ("float32", "int8"):
        rows[f"ctranslate2 {quantization}"] = export_ctranslate2(
            model, os.path.join(folder, f"bleu-{quantization}"), quantization=quantization
        )
    results = {}
    for name, path in rows.items():
        out = os.path.join(folder, f"{name.replace(' ', '-')}.json")
        command = evaluate_command(path, data, target_lang, threads, out)
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, text=True)
        scores = json.load(open(out))
        results[name] = {"seconds": time.perf_counter() - start, "bleu_lowercase": scores["bleu_lowercase"]}
    return results


def evaluate_command(model: str, data: str, target_lang: str, threads: int, out: str) -> list[str]:
    """`vanilla-transformer evaluate` of `model` on the En->target test_2016_flickr, beam 5, scores into `out`."""
    return [
        "vanilla-transformer",
        "evaluate",
        "--model",
        model,
        "--test-file",
        os.path.join(data, "test_2016_flickr.jsonl"),
        "--source-lang",
        "en",
        "--target-lang",
        target_lang,
        "--num-beams",
        "5",
        "--threads",
        str(threads),
        "--output",
        out,
    ]


def section(results: dict, command: str) -> str:
    """The serving section of BENCHMARKS.md."""
    lines = header_lines(results, command)
    for key, rows in results["speed"].items():
        lines += speed_lines(key, rows)
    if results.get("bleu"):
        lines += bleu_lines(results)
    return "\n".join(lines)


def header_lines(results: dict, command: str) -> list[str]:
    prose = (
        f"Sentences per second translating {SENTENCES} random sentences of random weights, every engine decoding "
        "exactly the same number of tokens (the speed suite's source and output lengths per size); peak memory is "
        "the engine process's VmHWM. Ratios are against MarianMTModel's `generate()` and against MarianMTModel "
        "converted to CTranslate2 in the same precision (and the same layout), measured in the same run. At several "
        "threads, a CTranslate2 engine runs one batch on all threads (ctranslate2's intra_threads); named "
        "`-parallel`, it splits the sentences into one batch per thread and translates them at once, one thread "
        "each (inter_threads)."
    )
    facts = [
        f"machine: {report.machine()}",
        report.versions("ctranslate2", "torch", "transformers")
        + f"; Marian converted with {results['marian_converter']}",
    ]
    heading = "## Serving: CTranslate2 against generate() and against MarianMTModel"
    return report.header_lines(heading, SUITE, [prose], command, facts, report.SERVING_MARKER)


def speed_lines(key: str, rows: dict) -> list[str]:
    """The table of one size at one thread count: speed, peak memory and ratios of every engine."""
    size_name, threads = key.split("/")
    lines = [
        f"### {size_name}, {threads} thread{'s' if threads != '1' else ''}",
        "",
        "| engine | greedy sent/s | beam 5 sent/s | peak MiB | greedy vs Marian generate() | beam 5 | "
        "greedy vs Marian CTranslate2 | beam 5 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for engine, row in rows.items():
        speed = {s: SENTENCES / t for s, t in row["times"].items()}
        base = rows["marian-generate"]["times"]
        same = rows.get(engine.replace("ours", "marian"), {}).get("times") if "ct2" in engine else None
        versus = [f"{base[s] / row['times'][s]:.2f}x" for s in SEARCHES]
        peer = [f"{same[s] / row['times'][s]:.2f}x" for s in SEARCHES] if same and "ours" in engine else ["", ""]
        lines.append(
            f"| {engine} | {speed['greedy']:.1f} | {speed['beam5']:.1f} | {row['peak_mib']:.0f} | "
            f"{versus[0]} | {versus[1]} | {peer[0]} | {peer[1]} |"
        )
    lines.append("")
    return lines


def bleu_lines(results: dict) -> list[str]:
    lines = [
        f"### BLEU of the Multi30k {results['bleu_pair']} recipe model, test_2016_flickr, beam 5",
        "",
        "| backend | BLEU lowercased | seconds for `evaluate` |",
        "|---|---|---|",
    ]
    for name, row in results["bleu"].items():
        lines.append(f"| {name} | {row['bleu_lowercase']} | {row['seconds']:.1f} |")
    lines.append("")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--sizes", nargs="+", choices=list(models.SIZES), default=["tiny", "base"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--quick", action="store_true", help="fewer repeats and calls")
    parser.add_argument("--repeats", type=int, help="fresh processes per engine (default 5, --quick 3)")
    parser.add_argument("--bleu-model", help="a Multi30k recipe's model folder: also BLEU through each backend")
    parser.add_argument("--bleu-data", help="the folder holding test_2016_flickr.jsonl")
    parser.add_argument("--bleu-target-lang", default="de", help="the --bleu-model's target language")
    parser.add_argument("--out", default=report.REPORT)
    parser.add_argument("--probe", nargs=4, help=argparse.SUPPRESS)
    return parser


def run(args) -> dict:
    """Every engine's speed per size and thread count, and with --bleu-model each backend's BLEU."""
    repeats, calls = (3, 1) if args.quick else (5, 2)
    repeats = args.repeats or repeats
    results = {"speed": {}}
    with tempfile.TemporaryDirectory() as folder:
        for size_name in args.sizes:
            os.makedirs(os.path.join(folder, size_name))
            results.update(convert(size_name, os.path.join(folder, size_name)))
            for threads in args.threads:
                results["speed"][f"{size_name}/{threads}"] = measure(
                    threads, os.path.join(folder, size_name), repeats, calls, engines_at(threads, args.engines)
                )
        if args.bleu_model:
            results["bleu_pair"] = f"En->{args.bleu_target_lang.title()}"
            results["bleu"] = bleu_by_backend(
                args.bleu_model, args.bleu_data, args.bleu_target_lang, folder, max(args.threads)
            )
    return results


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.probe:
        engine, threads, folder, calls = args.probe
        print(json.dumps(probe(engine, int(threads), folder, int(calls))))
        return 0
    if "marian-generate" not in args.engines:
        parser.error("--engines must include marian-generate, the reference of the ratios")
    results = run(args)
    text = section(results, report.measuring_command(SUITE, argv, files=("--out",)))
    report.replace_section(text, args.out, report.SERVING_MARKER)
    print(text)
    return 0
