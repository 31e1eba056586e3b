"""Where beam search through `generate()` and through the CTranslate2 export disagree, which translation does the model
itself score higher?

    python -m bench search-agreement --model MODEL_FOLDER --exported CT2_FOLDER --data test.jsonl --source en
    python -m bench search-agreement ... --target de --patience 1 1.5 2   # several patience values, with BLEU

Both backends translate the source side of a datasets-translation JSON-lines file with the model's generation
settings (beam size, length penalty). For every sentence where the two translations differ, the PyTorch model
force-decodes both and scores each as beam search ranks hypotheses: summed token log-probabilities (</s> included)
over length^length_penalty. Prints (and with --json writes) how many differ, which side scores higher, and which is
longer, for each CTranslate2 patience asked for (beam search stops once num_beams x patience hypotheses have
finished).
"""

import argparse
import json

import torch
from vanilla_transformer.training.report.metrics import translation_metrics

from vanilla_transformer.inference.devices import Placement
from vanilla_transformer.inference.translators import load_translator

from ..common import report

SUITE = "search-agreement"


def ranking_score(model, tokenizer, source: str, translation: str, length_penalty: float) -> float:
    """What beam search ranks `translation` by: its summed log-probabilities over length^length_penalty."""
    encoded = tokenizer([source], return_tensors="pt")
    labels = tokenizer(text_target=[translation], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(**encoded, labels=labels).logits[0]
    log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[0][:, None]).sum().item()
    return log_probs / labels.shape[1] ** length_penalty


def compare(
    model_folder: str, exported: str, sources: list[str], patiences=(None,), references=None, batch_size: int = 32
) -> list[dict]:
    """One result per CTranslate2 patience (None: the translator's default); with `references`, the lowercased
    BLEU of both backends as well."""
    pytorch = load_translator(model_folder, "torch", Placement(device="cpu", threads=1))
    engine = load_translator(exported, "ctranslate2", Placement(device="cpu", threads=1))
    config = pytorch.model.generation_config
    ours = [t[0].text for t in pytorch.translate(sources, batch_size=batch_size)]
    bleu = lambda texts: translation_metrics(texts, references)["bleu_lowercase"]  # noqa: E731
    bleu_generate = bleu(ours) if references is not None else None
    results = []
    for patience in patiences:
        theirs = [t[0].text for t in engine.translate(sources, batch_size=batch_size, patience=patience)]
        result = disagreement(pytorch, sources, ours, theirs, config.length_penalty)
        result.update(sentences=len(sources), num_beams=config.num_beams, patience=patience)
        if references is not None:
            result.update(bleu_generate=bleu_generate, bleu_ctranslate2=bleu(theirs))
        results.append(result)
    return results


def disagreement(pytorch, sources, ours, theirs, length_penalty: float) -> dict:
    """How many translations differ; for those, which the model scores higher and which is longer."""
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    higher = {"generate": 0, "ctranslate2": 0, "equal": 0}
    ctranslate2_longer = 0
    for i in differ:
        a, b = (
            ranking_score(pytorch.model, pytorch.tokenizer, sources[i], t, length_penalty) for t in (ours[i], theirs[i])
        )
        higher["generate" if a > b + 1e-5 else "ctranslate2" if b > a + 1e-5 else "equal"] += 1
        lengths = [len(pytorch.tokenizer(text_target=t)["input_ids"]) for t in (ours[i], theirs[i])]
        ctranslate2_longer += lengths[1] > lengths[0]
    return {
        "length_penalty": length_penalty,
        "differ": len(differ),
        "higher_score": higher,
        "ctranslate2_longer": ctranslate2_longer,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--model", required=True, help="the PyTorch model folder")
    parser.add_argument("--exported", required=True, help="its CTranslate2 export (float32 for a fair comparison)")
    parser.add_argument("--data", required=True, help="a JSON-lines file in the datasets translation schema")
    parser.add_argument("--source", default="en", help="the source language key")
    parser.add_argument("--lowercase", action="store_true", help="lowercase the source (as the Multi30k recipe does)")
    parser.add_argument("--target", help="the reference language key: also lowercased BLEU of both backends")
    parser.add_argument(
        "--patience", nargs="+", type=float, help="CTranslate2 patience values to compare (default: the translator's)"
    )
    parser.add_argument("--json", help="also write the results (a list, one per patience) to this file")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    with open(args.data, encoding="utf-8") as handle:
        pairs = [json.loads(line)["translation"] for line in handle if line.strip()]
    sources = [pair[args.source] for pair in pairs]
    sources = [s.lower() for s in sources] if args.lowercase else sources
    references = [pair[args.target] for pair in pairs] if args.target else None
    result = compare(args.model, args.exported, sources, args.patience or (None,), references)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0
