"""Translating sentences with a trained model: through PyTorch's `generate()` from a model folder, or through
CTranslate2 from a folder that `export_ctranslate2` wrote. Both take the same arguments and give the same text.

    translator = load_translator("runs/numbers-en-de")        # or an exported folder: detected from its contents
    translator.translate(["forty-two"], num_beams=5, n_best=2)
    # [[Translation(text='zweiundvierzig', score=...), Translation(text=..., score=...)]]

A translation's score is what beam search ranks by: the sum of its tokens' log-probabilities (end of sentence
included) divided by its length in tokens to the power `length_penalty`.
"""

import os
from dataclasses import dataclass

import torch

from .configuration import position_limit
from .ctranslate2_export import EXPORT_INFO, import_ctranslate2, is_ctranslate2_folder
from .model_folder import encode_within, load_model_folder

BACKENDS = ("auto", "pytorch", "ctranslate2")


@dataclass(frozen=True)
class Translation:
    text: str
    score: float | None  # what beam search ranks by (see the module's docstring); None where not computed


def search_settings(generation_config, num_beams, length_penalty, n_best: int) -> tuple[int, float]:
    """The beam size and length penalty asked for, else the model's generation config's; checked against n_best."""
    num_beams = num_beams or generation_config.num_beams or 1
    if length_penalty is None:  # generate()'s default where the generation config leaves it unset
        length_penalty = 1.0 if generation_config.length_penalty is None else generation_config.length_penalty
    check_search(num_beams, n_best)
    return num_beams, length_penalty


def check_search(num_beams: int, n_best: int) -> None:
    if n_best < 1 or num_beams < 1:
        raise ValueError(f"n_best ({n_best}) and num_beams ({num_beams}) must be at least 1.")
    if n_best > num_beams:
        raise ValueError(
            f"n_best {n_best}: beam search keeps only num_beams={num_beams} hypotheses; use a larger beam."
        )


class PyTorchTranslator:
    """`generate()` on a `VanillaTransformerForConditionalGeneration` (or any seq2seq model) and its tokenizer."""

    backend = "pytorch"

    def __init__(self, model, tokenizer, threads: int | None = None):
        self.model, self.tokenizer = model.eval(), tokenizer
        if threads:
            torch.set_num_threads(threads)

    @classmethod
    def from_folder(cls, path: str, threads: int | None = None) -> "PyTorchTranslator":
        model, tokenizer = load_model_folder(path)
        return cls(model, tokenizer, threads)

    @property
    def generation_config(self):
        return self.model.generation_config

    @torch.no_grad()
    def translate(
        self, sentences, num_beams=None, length_penalty=None, max_length=256, n_best=1, batch_size=32, scores=None
    ):
        """The `n_best` best translations of each sentence, best first, each of at most `max_length` tokens. Their
        scores are computed when `scores` is true (by default, when n_best > 1); generate() then keeps every step's
        scores, which costs memory for large vocabularies, and a translation's score is otherwise None."""
        scores = n_best > 1 if scores is None else scores
        num_beams, length_penalty = search_settings(self.generation_config, num_beams, length_penalty, n_best)
        limit = position_limit(self.model.config)  # learned positions: the source and output are cut to them
        max_length = max_length if limit is None else min(max_length, limit)
        results = []
        for start in range(0, len(sentences), batch_size):
            chunk = list(sentences[start : start + batch_size])
            ids = encode_within(self.tokenizer, chunk, limit)  # a sentence cut to the positions is named
            batch = self.tokenizer.pad({"input_ids": ids}, return_tensors="pt")
            out = self.model.generate(
                **batch,
                num_beams=num_beams,
                length_penalty=length_penalty,
                max_new_tokens=max_length,
                num_return_sequences=n_best,
                output_scores=scores,
                return_dict_in_generate=True,
            )
            texts = [t.strip() for t in self.tokenizer.batch_decode(out.sequences, skip_special_tokens=True)]
            ranks = self.scores(out, num_beams, length_penalty) if scores else [None] * len(texts)
            results += [
                [Translation(texts[i + k], ranks[i + k]) for k in range(n_best)] for i in range(0, len(texts), n_best)
            ]
        return results

    def scores(self, out, num_beams: int, length_penalty: float) -> list[float]:
        """Beam search reports its ranking score; for greedy search it is computed the same way from the steps."""
        if num_beams > 1:
            return out.sequences_scores.tolist()
        steps = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)  # (n, len)
        generated = out.sequences[:, 1:]  # after the decoder start token
        lengths = (generated != self.tokenizer.pad_token_id).sum(dim=1)
        totals = steps.masked_fill(generated == self.tokenizer.pad_token_id, 0).sum(dim=1)
        return (totals / lengths.clamp(min=1).float() ** length_penalty).tolist()


class CTranslate2Translator:
    """A `ctranslate2.Translator` on a folder written by `export_ctranslate2`, with the tokenizer saved in it."""

    backend = "ctranslate2"

    def __init__(
        self,
        folder: str,
        threads: int | None = None,
        device: str = "cpu",
        compute_type: str = "default",
        inter_threads: int = 1,
    ):
        """`threads` computation threads work on each batch (ctranslate2's intra_threads; None: its own choice), and
        `inter_threads` batches are translated at once, the input being split so that each has its share."""
        import json

        from transformers import AutoTokenizer, GenerationConfig

        ctranslate2 = import_ctranslate2()
        if not is_ctranslate2_folder(folder):
            raise ValueError(f"{folder} is not a CTranslate2 model folder (no model.bin): export one first.")
        self.translator = ctranslate2.Translator(
            folder, device=device, compute_type=compute_type, inter_threads=inter_threads, intra_threads=threads or 0
        )
        self.inter_threads = inter_threads
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.generation_config = GenerationConfig.from_pretrained(folder)
        self.source_vocabulary, self.target_vocabulary = exported_vocabularies(folder)
        self.target_ids = {token: i for i, token in enumerate(self.target_vocabulary)}
        info_path = os.path.join(folder, EXPORT_INFO)
        self.max_positions = None
        if os.path.isfile(info_path):
            with open(info_path) as handle:
                self.max_positions = json.load(handle).get("max_positions")

    def tokens(self, sentences, warn: bool = False, target: bool = False) -> list[list[str]]:
        """Each sentence's tokens (as a source, or as a `target`) in the exported model's vocabulary, cut to the
        exported positions; with `warn`, a warning on stderr names each sentence that was cut."""
        quiet = None if warn else (lambda index, line: None)
        ids = encode_within(self.tokenizer, sentences, self.max_positions, warn=quiet, target=target)
        vocabulary = self.target_vocabulary if target else self.source_vocabulary
        return [[vocabulary[i] for i in row] for row in ids]

    def text(self, tokens: list[str]) -> str:
        ids = [self.target_ids[token] for token in tokens]
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()

    def suppressed(self) -> list[list[str]] | None:
        """The generation config's `bad_words_ids` (Marian's forbid <pad>, the decoder's start) as target tokens."""
        sequences = self.generation_config.bad_words_ids
        return [[self.target_vocabulary[i] for i in ids] for ids in sequences] if sequences else None

    def translate(
        self,
        sentences,
        num_beams=None,
        length_penalty=None,
        max_length=256,
        n_best=1,
        batch_size=32,
        scores=None,
        patience=None,
    ):
        """The `n_best` best translations of each sentence, best first, each of at most `max_length` tokens, with
        their scores (ctranslate2 computes them at no cost, whatever `scores` says).

        Beam search stops once `num_beams * patience` hypotheses have finished. generate()'s `early_stopping=True`
        is patience 1 exactly; its default, `early_stopping=False`, keeps searching while a running hypothesis could
        still win, which ctranslate2 has no rule for: patience 2 (the default then) searches on long enough to find
        the same translations with length penalties up to about 1. Far above 1, generate()'s rule ends the search
        at other points than any patience does, and the two may choose different translations."""
        num_beams, length_penalty = search_settings(self.generation_config, num_beams, length_penalty, n_best)
        if patience is None:
            patience = 1.0 if self.generation_config.early_stopping is True else 2.0
        if self.max_positions is not None:
            max_length = min(max_length, self.max_positions)
        if self.generation_config.forced_eos_token_id is not None:  # generate() ends the last step with </s>
            max_length = max(1, max_length - 1)
        tokens = self.tokens(sentences, warn=True)
        results = self.translator.translate_batch(
            tokens,
            max_batch_size=self.batch_share(len(tokens), batch_size),
            beam_size=num_beams,
            num_hypotheses=n_best,
            patience=patience,
            length_penalty=length_penalty,
            max_decoding_length=max_length,
            min_decoding_length=0,  # as generate(): ctranslate2's default, 1, would forbid </s> at the first step
            suppress_sequences=self.suppressed(),
            return_scores=True,
        )
        return [
            [Translation(self.text(tokens), score) for tokens, score in zip(r.hypotheses, r.scores)] for r in results
        ]

    def batch_share(self, count: int, batch_size: int) -> int:
        """At most `batch_size` sentences a batch, and few enough that each of the parallel batches gets some."""
        return max(1, min(batch_size, -(-count // self.inter_threads)))

    def reference_log_probs(self, sentences, references, batch_size: int = 32) -> list[list[float]]:
        """The log-probability of each reference token (end of sentence included) given its source."""
        targets = [tokens[:-1] for tokens in self.tokens(references, target=True)]  # ctranslate2 adds </s> itself
        share = self.batch_share(len(targets), batch_size)
        results = self.translator.score_batch(self.tokens(sentences), targets, max_batch_size=share)
        return [r.log_probs for r in results]


def exported_vocabularies(folder: str) -> tuple[list[str], list[str]]:
    """The source and target tokens of a ctranslate2 model, in id order, as the export wrote them: one shared
    vocabulary file, or one for each side."""
    import json

    def read(name: str) -> list[str] | None:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)

    shared = read("shared_vocabulary.json")
    source, target = shared or read("source_vocabulary.json"), shared or read("target_vocabulary.json")
    if source is None or target is None:
        raise ValueError(
            f"{folder}: no vocabulary files (shared_vocabulary.json, or source_ and target_vocabulary.json)."
        )
    return source, target


def uses_ctranslate2(path: str, backend: str = "auto") -> bool:
    """Whether `backend` runs `path` through CTranslate2: "auto" tells the folders apart by their contents."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}.")
    return backend == "ctranslate2" or (backend == "auto" and is_ctranslate2_folder(path))


def load_translator(path: str, backend: str = "auto", threads: int | None = None, inter_threads: int = 1):
    """A translator for a model folder (PyTorch) or an exported CTranslate2 folder (see `uses_ctranslate2`).
    `inter_threads` (CTranslate2 only) batches are translated at once, each on `threads` threads."""
    if uses_ctranslate2(path, backend):
        return CTranslate2Translator(path, threads=threads, inter_threads=inter_threads)
    if inter_threads != 1:
        raise ValueError(f"inter_threads={inter_threads}: batches in parallel need the CTranslate2 backend.")
    return PyTorchTranslator.from_folder(path, threads=threads)


__all__ = [
    "Translation",
    "PyTorchTranslator",
    "CTranslate2Translator",
    "load_translator",
    "uses_ctranslate2",
    "BACKENDS",
]
