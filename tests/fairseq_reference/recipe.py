"""The fairseq reference, made by fairseq's own tools in the fairseq environment: the corpus Moses-tokenised, 400
joint subword-nmt merges learned and applied, `fairseq-preprocess` with and without `--joined-dictionary`, three tiny
models trained with `fairseq-train --cpu`, and for each what fairseq computes with it: its encodings and logits
(`fairseq_side.py reference`) and its beam-5 translations of the held-out sentences (fairseq-interactive's own
`cli_main`), in one process a variant.

Everything is written once into a folder named by a hash of this recipe (the sources of this package and the fairseq
environment's path), and reused from there.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.fairseq_reference.corpus import HELD_OUT_NAMES, corpus, write_corpus

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent
MERGES = 400
ARCHITECTURE = [
    "--arch",
    "transformer",
    *("--encoder-embed-dim", "48", "--encoder-ffn-embed-dim", "96"),
    *("--encoder-layers", "2", "--encoder-attention-heads", "4"),
    *("--decoder-embed-dim", "48", "--decoder-ffn-embed-dim", "96"),
    *("--decoder-layers", "2", "--decoder-attention-heads", "4"),
]
TRAINING = [
    *("--source-lang", "en", "--target-lang", "de", "--cpu"),
    *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "1.0"),
    *("--lr", "0.005", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "60"),
    *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--dropout", "0.1"),
    *("--max-tokens", "2000", "--max-update", "300", "--seed", "1"),
    *("--disable-validation", "--no-epoch-checkpoints", "--num-workers", "0"),
    *("--data-buffer-size", "0"),  # fairseq's background loader thread aborts the process at exit after epoch 1
    *("--log-format", "simple", "--log-interval", "100"),
]


@dataclass(frozen=True)
class Variant:
    """A fairseq model: the data it is trained on (`joined` or `separate` dictionaries), fairseq-train's flags beyond
    ARCHITECTURE and TRAINING, and the BPE that fairseq applies (`fastbpe`: bpecodes written in fastBPE's format)."""

    data: str
    flags: tuple[str, ...] = ()
    bpe: str = "subword_nmt"


PRE_NORM = ("--encoder-normalize-before", "--decoder-normalize-before")
LEARNED = ("--encoder-learned-pos", "--decoder-learned-pos")
# Each way the import reads a checkpoint, in at least one variant: post- and pre-norm, sinusoidal and learned positions,
# joined and separate dictionaries, all embeddings shared, the decoder's input and output only, none, and bpecodes in
# subword-nmt's and in fastBPE's format.
VARIANTS = {
    "post-norm-shared-all": Variant("joined", ("--share-all-embeddings",)),
    "pre-norm-separate": Variant("separate", PRE_NORM + ("--share-decoder-input-output-embed",)),
    "learned-unshared-fastbpe": Variant("joined", LEARNED, bpe="fastbpe"),
}
# the variants translated with terms (fairseq-interactive --constraints), in both of fairseq's modes
CONSTRAINED = ("post-norm-shared-all", "pre-norm-separate")
CONSTRAINT_MODES = ("ordered", "unordered")


@dataclass
class Reference:
    """One trained variant: its model folder (checkpoint, dictionaries, bpecodes) and what fairseq computed."""

    folder: Path
    variant: Variant
    pairs: list[tuple[str, str]]  # the held-out (English, German) pairs
    encodings: dict = field(repr=False)  # source_ids, target_ids, decoder_input_ids, logits
    translations: list[list[str]] = field(repr=False)  # fairseq-interactive's hypotheses, as target symbols
    detokenized: list[str] = field(repr=False)  # the same, as fairseq-interactive writes them out (its D- lines)
    alignments: list[list[tuple[int, int]]] = field(repr=False)  # its A- lines: (source, target) token pairs
    constrained: dict[str, list[list[str]]] = field(repr=False, default_factory=dict)  # by mode, with the terms


def constraint_terms(german: str, mode: str) -> list[str]:
    """The terms a held-out sentence is translated with: the two longest words of its German reference (one if it
    has one), in the reference's order for `ordered`, the other way round for `unordered`. Only words of German's
    letters are terms, and no held-out name: those have letters that neither dictionary has."""
    words = [word.strip('.,!?:;"()') for word in german.split()]
    words = [w for w in words if len(w) >= 3 and re.fullmatch("[A-Za-zÄÖÜäöüß]+", w) and w not in HELD_OUT_NAMES]
    words = words or ["ist"]
    longest = sorted(range(len(words)), key=lambda i: -len(words[i]))[:2]
    terms = [words[i] for i in sorted(longest)]
    return terms if mode == "ordered" else terms[::-1]


def fairseq_python() -> Path | None:
    """The fairseq environment's Python: $VANILLA_TRANSFORMER_FAIRSEQ_PYTHON, else .venv-fairseq's if it exists."""
    named = os.environ.get("VANILLA_TRANSFORMER_FAIRSEQ_PYTHON")
    default = REPOSITORY / ".venv-fairseq" / "bin" / "python"
    path = Path(named) if named else default
    return path if path.is_file() else None


def recipe_hash(python: Path) -> str:
    digest = hashlib.sha256(str(python).encode())
    for source in sorted(HERE.glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def run(python: Path, tool: str, *arguments, cwd: Path, stdout=None) -> str:
    """A tool of the fairseq environment (`python` for its Python), as a subprocess; its output if `stdout` is PIPE."""
    program = str(python) if tool == "python" else str(python.parent / tool)
    environment = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [program, *map(str, arguments)], cwd=cwd, env=environment, stdout=stdout or subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{tool} {' '.join(map(str, arguments))} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def prepare(python: Path, root: Path) -> None:
    """The corpus in raw text, Moses-tokenised, BPE-split with the joint merges, and binarised both ways."""
    raw = root / "raw"
    raw.mkdir()
    write_corpus(raw)
    run(python, "python", HERE / "fairseq_side.py", "tokenize", raw, "train", "valid", cwd=raw)
    joint = (raw / "train.tok.en").read_text(encoding="utf-8") + (raw / "train.tok.de").read_text(encoding="utf-8")
    (raw / "train.tok.joint").write_text(joint, encoding="utf-8")
    run(python, "subword-nmt", "learn-bpe", "-s", MERGES, "-i", "train.tok.joint", "-o", "bpecodes", cwd=raw)
    for name in ("train.en", "train.de", "valid.en", "valid.de"):
        split, language = name.split(".")
        tokenized = f"{split}.tok.{language}"
        run(python, "subword-nmt", "apply-bpe", "-c", "bpecodes", "-i", tokenized, "-o", f"{split}.bpe.{language}",
            cwd=raw)  # fmt: skip
    for data, joined in (("joined", ["--joined-dictionary"]), ("separate", [])):
        run(python, "fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", "raw/train.bpe",
            "--validpref", "raw/valid.bpe", "--destdir", data, "--workers", "1", *joined, cwd=root)  # fmt: skip


def fastbpe_codes(subword_nmt_codes: str) -> str:
    """The same merges in fastBPE's format: no version line, each merge followed by a count (decreasing, as
    fastBPE's learner writes them)."""
    merges = [line for line in subword_nmt_codes.splitlines() if line and not line.startswith("#version")]
    return "".join(f"{merge} {len(merges) - index}\n" for index, merge in enumerate(merges))


def train(python: Path, root: Path, name: str, variant: Variant) -> None:
    """The variant trained into `root/name`, which then holds its checkpoint, dictionaries and bpecodes."""
    folder = root / name
    run(python, "fairseq-train", root / variant.data, *ARCHITECTURE, *TRAINING, *variant.flags, "--save-dir", folder,
        cwd=root)  # fmt: skip
    for language in ("en", "de"):
        shutil.copy(root / variant.data / f"dict.{language}.txt", folder)
    codes = (root / "raw" / "bpecodes").read_text(encoding="utf-8")
    (folder / "bpecodes").write_text(fastbpe_codes(codes) if variant.bpe == "fastbpe" else codes, encoding="utf-8")


def train_without_languages(python: Path, root: Path) -> None:
    """A few updates of the first variant without --source-lang and --target-lang, into `root/languages-inferred`:
    fairseq infers them from the data folder's file names, and its checkpoint does not name them."""
    folder = root / "languages-inferred"
    training = [*TRAINING[4:], "--max-update", "5"]  # a later --max-update replaces TRAINING's
    run(python, "fairseq-train", root / "joined", *ARCHITECTURE, *training, "--share-all-embeddings", "--save-dir",
        folder, cwd=root)  # fmt: skip
    for name in ("dict.en.txt", "dict.de.txt"):
        shutil.copy(root / "joined" / name, folder)
    shutil.copy(root / "raw" / "bpecodes", folder)


def fairseq_outputs(python: Path, root: Path, name: str, variant: Variant) -> None:
    """What fairseq computes with the trained variant, in one process of the fairseq environment: its encodings,
    logits and scores (reference.json), its beam-5 translations of the test set with their alignments
    (interactive.txt, `--print-alignment`), and for the variants in CONSTRAINED, with each sentence's terms in each of
    fairseq's modes (`constrained_step`)."""
    folder = root / name
    interactive = [str(folder), "--path", str(folder / "checkpoint_last.pt"), "--source-lang", "en", "--target-lang",
                   "de", "--tokenizer", "moses", "--bpe", variant.bpe, "--bpe-codes", str(folder / "bpecodes"),
                   "--beam", "5", "--cpu", "--batch-size", "50", "--buffer-size", "50"]  # fmt: skip
    steps = [
        ["reference", str(folder), variant.bpe, str(root / "test.json"), str(folder / "reference.json")],
        ["interactive", str(folder / "interactive.txt"), *interactive, "--print-alignment", "--input",
         str(root / "raw" / "test.en")],
    ]  # fmt: skip
    pairs = json.loads((root / "test.json").read_text(encoding="utf-8"))
    for mode in CONSTRAINT_MODES if name in CONSTRAINED else ():
        steps.append(constrained_step(pairs, folder, mode, interactive))
    run(python, "python", HERE / "fairseq_side.py", "steps", json.dumps(steps), cwd=folder)


def constrained_step(pairs: list, folder: Path, mode: str, interactive: list[str]) -> list[str]:
    """fairseq-interactive's beam-5 translations of the test set with each sentence's terms (`constraint_terms`),
    given after the sentence, tab-separated, as `--constraints MODE` reads them (constrained-MODE.txt): the input
    written, the step that translates it. `pairs`: the test set's (English, German) pairs."""
    lines = "".join("\t".join([english, *constraint_terms(german, mode)]) + "\n" for english, german in pairs)
    (folder / f"constrained-{mode}.en").write_text(lines, encoding="utf-8")
    return ["interactive", str(folder / f"constrained-{mode}.txt"), *interactive, "--constraints", mode, "--input",
            str(folder / f"constrained-{mode}.en")]  # fmt: skip


def build(python: Path, root: Path) -> None:
    """The whole reference into `root`: the data, then the fairseq runs two at a time (one thread each): each variant
    trained, then what fairseq computes with it, and the languages' training."""
    prepare(python, root)
    (root / "test.json").write_text(json.dumps(corpus()["test"], ensure_ascii=False), encoding="utf-8")

    def one(name: str) -> None:
        train(python, root, name, VARIANTS[name])
        fairseq_outputs(python, root, name, VARIANTS[name])

    with ThreadPoolExecutor(2) as pool:
        done = [pool.submit(one, name) for name in VARIANTS] + [pool.submit(train_without_languages, python, root)]
        for future in done:
            future.result()


def interactive_hypotheses(text: str) -> tuple[list[list[str]], list[str], list[list[tuple[int, int]]]]:
    """fairseq-interactive's H- lines (target symbols), D- lines (detokenised text) and A- lines (alignments, where
    printed), in input order."""
    tokens, detokenized, alignments = {}, {}, {}
    for line in text.splitlines():
        kind, _, rest = line.partition("-")
        if kind in ("H", "D") and "\t" in rest:
            index, _, hypothesis = rest.split("\t", 2)
            (tokens if kind == "H" else detokenized)[int(index)] = hypothesis.split() if kind == "H" else hypothesis
        elif kind == "A" and "\t" in rest:
            index, _, pairs = rest.partition("\t")
            alignments[int(index)] = [tuple(map(int, pair.split("-"))) for pair in pairs.split()]
    order = sorted(tokens)
    return [tokens[i] for i in order], [detokenized[i] for i in order], [alignments.get(i, []) for i in order]


def references(python: Path, cache: Path) -> dict[str, Reference]:
    """Every variant's Reference, built into `cache` (under the recipe's hash) unless it is there already."""
    root = cache / recipe_hash(python)
    if not (root / "done").exists():
        scratch = cache / f"{root.name}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        build(python, scratch)
        (scratch / "done").touch()
        shutil.rmtree(root, ignore_errors=True)
        scratch.rename(root)
    pairs = [tuple(pair) for pair in json.loads((root / "test.json").read_text(encoding="utf-8"))]
    found = {}
    for name, variant in VARIANTS.items():
        folder = root / name
        tokens, detokenized, alignments = interactive_hypotheses((folder / "interactive.txt").read_text("utf-8"))
        encodings = json.loads((folder / "reference.json").read_text(encoding="utf-8"))
        found[name] = Reference(folder, variant, pairs, encodings, tokens, detokenized, alignments)
        for mode in CONSTRAINT_MODES if name in CONSTRAINED else ():
            text = (folder / f"constrained-{mode}.txt").read_text(encoding="utf-8")
            found[name].constrained[mode] = interactive_hypotheses(text)[0]
    return found
