"""Translating sentences with a trained model: through PyTorch's `generate()` from a model folder, or through
CTranslate2 from a folder that `export_ctranslate2` wrote. Both take the same arguments and give the same text.

    translator = load_translator("runs/numbers-en-de")        # or an exported folder: detected from its contents
    translator.translate(["forty-two"], num_beams=5, n_best=2)
    # [[Translation(text='zweiundvierzig', score=...), Translation(text=..., score=...)]]

A translation's score is what beam search ranks by: the sum of its tokens' log-probabilities (end of sentence
included) divided by its length in tokens to the power `length_penalty`.
"""

import os
from dataclasses import replace

import torch

from ..configuration import position_limit
from ..exports.ctranslate2 import EXPORT_INFO, import_ctranslate2, is_ctranslate2_folder
from ..model_folder import encode_within, load_model_folder
from .alignment import Alignment, align
from .options import (
    NO_GUARDS,
    Guards,
    Translation,
    blank_stays_blank,
    distinct_texts,
    grouped_batches,
    prefix_texts,
    search_settings,
)
from .scoring import PairScore, score_pairs
from .search import SearchSettings, beam_search

BACKENDS = ("auto", "pytorch", "ctranslate2")


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
    @blank_stays_blank
    def translate(
        self,
        sentences,
        num_beams=None,
        length_penalty=None,
        max_length=256,
        n_best=1,
        batch_size=32,
        scores=None,
        distinct=False,
        prefix=None,
        constraints=None,
        ordered=False,
        guards=NO_GUARDS,
    ):
        """The `n_best` best translations of each sentence, best first, each of at most `max_length` tokens. Their
        scores are computed when `scores` is true (by default, when n_best > 1); generate() then keeps every step's
        scores, which costs memory for large vocabularies, and a translation's score is otherwise None. With
        `distinct`, hypotheses whose texts are the same (two segmentations of one string) are one, with the best
        score: the list may then be shorter than `n_best`. `prefix`, a target prefix per sentence (None or "" for
        none), is where each translation starts: the search goes on from its tokens, which count in its length but
        not its score, as in CTranslate2's, and `max_length` new tokens follow it. `constraints`, a list of terms per
        sentence (strings; an empty list for none), are terms every translation contains, in the order given when
        `ordered`. Both use the package's own beam search (`constrained_search`). `guards` limit each output's
        length by its source's and its repetitions (`Guards`); a translation stopped at its limit says so
        (`at_limit`)."""
        scores = n_best > 1 if scores is None else scores
        num_beams, length_penalty = search_settings(self.generation_config, num_beams, length_penalty, n_best)
        wanted, n_best = n_best, num_beams if distinct else n_best
        limit = position_limit(self.model.config)  # learned positions: the source and output are cut to them
        max_length = max_length if limit is None else min(max_length, limit)
        if constraints is not None or prefix is not None:
            found = self.searched(sentences, constraints, prefix, guards, batch_size,
                                  SearchSettings(num_beams, max_length, length_penalty, ordered=ordered))  # fmt: skip
            results = [hypotheses[:n_best] for hypotheses in found]
            return distinct_texts(results, wanted) if distinct else results
        search = dict(num_beams=num_beams, length_penalty=length_penalty, num_return_sequences=n_best)
        search.update(output_scores=scores, return_dict_in_generate=True, **guards.repetition(self.generation_config))
        source_ids = encode_within(self.tokenizer, sentences, limit)  # a sentence cut to the positions is named
        limits = guards.limits([len(row) for row in source_ids], max_length)
        results = [None] * len(sentences)
        for indices in grouped_batches(limits, batch_size):
            batch = self.tokenizer.pad({"input_ids": [source_ids[i] for i in indices]}, return_tensors="pt")
            start = torch.full((len(indices), 1), self.model.config.decoder_start_token_id)
            out = self.model.generate(**batch, decoder_input_ids=start, max_new_tokens=limits[indices[0]], **search)
            texts = [t.strip() for t in self.tokenizer.batch_decode(out.sequences, skip_special_tokens=True)]
            ranks = self.scores(out, num_beams, length_penalty) if scores else [None] * len(texts)
            stopped = self.at_limit(out.sequences, 1 + limits[indices[0]])
            for row, i in enumerate(indices):
                results[i] = [
                    Translation(texts[row * n_best + k], ranks[row * n_best + k], stopped[row * n_best + k])
                    for k in range(n_best)
                ]
        return distinct_texts(results, wanted) if distinct else results

    def at_limit(self, sequences, length: int) -> list[bool]:
        """Whether each output is `length` tokens long without an end of sentence: the search stopped it."""
        eos = self.model.config.eos_token_id
        return [len(row) == length and eos not in row for row in sequences.tolist()]

    def searched(self, sentences, constraints, prefix, guards, batch_size, settings: SearchSettings):
        """Translations by the package's own beam search (`constrained_search`): with terms, by fairseq's rules
        (--constraints; min_length 1), or from prefixes, by CTranslate2's (target_prefix: the prefix's tokens count
        in the length, not the score; min_length 0, as generate() and CTranslate2)."""
        if constraints is not None and prefix is not None:
            raise ValueError("constraints and prefix together: give one of them")
        if guards.no_repeat_ngram_size or guards.repetition_penalty not in (None, 1.0):
            raise ValueError("no_repeat_ngram_size and repetition_penalty apply to generate()'s search only: not "
                             "with constraints or prefixes")  # fmt: skip
        limit = position_limit(self.model.config)
        terms = self.term_ids(constraints, len(sentences), limit) if constraints is not None else None
        prefixes = self.prefix_ids(prefix, len(sentences), limit) if prefix is not None else None
        source_ids = encode_within(self.tokenizer, sentences, limit)
        limits = guards.limits([len(row) for row in source_ids], settings.max_length)
        keys = [(len(prefixes[i]) if prefixes else 0, limits[i]) for i in range(len(sentences))]
        results = [None] * len(sentences)
        for indices in grouped_batches(keys, batch_size):
            batch = self.tokenizer.pad({"input_ids": [source_ids[i] for i in indices]}, return_tensors="pt")
            given = len(prefixes[indices[0]]) if prefixes else 0
            longest = limits[indices[0]] + given if limit is None else min(limits[indices[0]] + given, limit - 1)
            rules = "fairseq" if terms else "ctranslate2"  # terms are fairseq's; prefixes as the export has them
            search = replace(settings, max_length=longest, min_length=1 if terms else 0, rules=rules)
            found = beam_search(self.model, batch["input_ids"], batch["attention_mask"], search,
                                [terms[i] for i in indices] if terms else None,
                                [prefixes[i] for i in indices] if prefixes else None)  # fmt: skip
            for i, hypotheses in zip(indices, found):
                texts = self.tokenizer.batch_decode([h.tokens for h in hypotheses], skip_special_tokens=True)
                results[i] = [Translation(t.strip(), h.score, len(h.tokens) > search.max_length)
                              for t, h in zip(texts, hypotheses)]  # fmt: skip
        return results

    def term_ids(self, constraints, count: int, limit: int | None) -> list[list[list[int]]]:
        """Each sentence's terms as target token ids, without the end of sentence; a ValueError naming the sentence
        and the term where a term is empty or has a token the target vocabulary lacks."""
        if len(constraints) != count:
            raise ValueError(f"{len(constraints)} lists of terms for {count} sentences: give one per sentence")
        encoded = iter(self.target_ids([term for terms in constraints for term in terms], limit))
        unknown, found = self.tokenizer.unk_token_id, []
        for number, terms in enumerate(constraints, start=1):
            found.append([next(encoded) for _ in terms])
            for term, row in zip(terms, found[-1]):
                if not row or (unknown is not None and unknown in row):
                    what = (
                        "no tokens" if not row else f"a token the target vocabulary lacks ({self.tokenizer.unk_token})"
                    )
                    raise ValueError(f"sentence {number}: the term {term!r} has {what}")
        return found

    def target_ids(self, texts: list[str], limit: int | None) -> list[list[int]]:
        """Each text as target token ids without the end of sentence (the model's id: not every tokenizer, fairseq's
        among them, names one), cut to `limit` tokens as `encode_within` cuts them."""
        if not texts:
            return []
        eos, rows = self.model.config.eos_token_id, encode_within(self.tokenizer, texts, limit, target=True)
        return [row[:-1] if row and row[-1] == eos else row for row in rows]

    def prefix_ids(self, prefix, count: int, limit: int | None) -> list[list[int]]:
        """Each sentence's target prefix as token ids, without the end of sentence; none: empty. A ValueError names
        a prefix that leaves no room in the model's positions (`limit`)."""
        if prefix is None:
            return [[] for _ in range(count)]
        rows = self.target_ids(prefix_texts(prefix, count), None)
        for number, row in enumerate(rows, start=1):
            if limit is not None and len(row) >= limit:
                raise ValueError(
                    f"sentence {number}: the prefix has {len(row)} tokens; the model writes at most {limit} (its "
                    "learned positions), the end of sentence included"
                )
        return rows

    def score(self, sources, targets, batch_size=32) -> list[PairScore]:
        """Each (source, target) pair scored by the model: each target token's log-probability (see `scoring`)."""
        return score_pairs(self.model, self.tokenizer, sources, targets, batch_size, position_limit(self.model.config))

    def align(self, sources, targets, layer=None, heads=None, batch_size=32) -> list[Alignment]:
        """Each pair's word alignment from the cross-attention of decoder `layer` over `heads` (see `alignment`)."""
        return align(self.model, self.tokenizer, sources, targets, layer, heads, batch_size)

    def scores(self, out, num_beams: int, length_penalty: float) -> list[float]:
        """Beam search reports its ranking score; for greedy search it is computed the same way from the steps
        after the decoder's start token."""
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

    @blank_stays_blank
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
        distinct=False,
        prefix=None,
        constraints=None,
        ordered=False,
        guards=NO_GUARDS,
    ):
        """The `n_best` best translations of each sentence, best first, each of at most `max_length` tokens, with
        their scores (ctranslate2 computes them at no cost, whatever `scores` says). CTranslate2 has no lexically
        constrained search: `constraints` need the PyTorch model. `guards` as the PyTorch translator's.

        Beam search stops once `num_beams * patience` hypotheses have finished. generate()'s `early_stopping=True`
        is patience 1 exactly; its default, `early_stopping=False`, keeps searching while a running hypothesis could
        still win, which ctranslate2 has no rule for: patience 2 (the default then) searches on long enough to find
        the same translations with length penalties up to about 1. Far above 1, generate()'s rule ends the search
        at other points than any patience does, and the two may choose different translations."""
        if constraints is not None:
            raise ValueError("constraints: CTranslate2 has no lexically constrained search; use the model folder")
        num_beams, length_penalty = search_settings(self.generation_config, num_beams, length_penalty, n_best)
        wanted, n_best = n_best, num_beams if distinct else n_best
        if patience is None:
            patience = 1.0 if self.generation_config.early_stopping is True else 2.0
        if self.max_positions is not None:
            max_length = min(max_length, self.max_positions)
        if self.generation_config.forced_eos_token_id is not None:  # generate() ends the last step with </s>
            max_length = max(1, max_length - 1)
        tokens = self.tokens(sentences, warn=True)
        prefixes = self.target_prefix(prefix, len(tokens)) or [None] * len(tokens)
        settings = dict(beam_size=num_beams, num_hypotheses=n_best, patience=patience, length_penalty=length_penalty)
        settings.update(suppress_sequences=self.suppressed(), **guards.repetition(self.generation_config))
        limits = guards.limits([len(row) for row in tokens], max_length)
        results = [None] * len(tokens)
        for indices in grouped_batches(limits, len(tokens)):
            longest = max((len(prefixes[i] or []) for i in indices), default=0)
            found = self.translator.translate_batch(
                [tokens[i] for i in indices],
                target_prefix=[prefixes[i] for i in indices] if prefix is not None else None,
                max_batch_size=self.batch_share(len(indices), batch_size),
                max_decoding_length=limits[indices[0]] + longest,
                min_decoding_length=0,  # as generate(): ctranslate2's default, 1, would forbid </s> at the first step
                return_scores=True,
                **settings,
            )
            for i, r in zip(indices, found):
                ends = [len(t) - len(prefixes[i] or []) >= limits[i] for t in r.hypotheses]
                results[i] = [
                    Translation(self.text(t), score, end) for t, score, end in zip(r.hypotheses, r.scores, ends)
                ]
        return distinct_texts(results, wanted) if distinct else results

    def target_prefix(self, prefix, count: int) -> list[list[str] | None] | None:
        """Each sentence's target prefix as target tokens without the end of sentence (None for none), as
        ctranslate2's `target_prefix` takes them."""
        if prefix is None:
            return None
        rows = self.tokens(prefix_texts(prefix, count), target=True)
        rows = [row[:-1] if row and row[-1] == self.tokenizer.eos_token else row for row in rows]
        return [row or None for row in rows]

    def batch_share(self, count: int, batch_size: int) -> int:
        """At most `batch_size` sentences a batch, and few enough that each of the parallel batches gets some."""
        return max(1, min(batch_size, -(-count // self.inter_threads)))

    def align(self, sources, targets, layer=None, heads=None, batch_size=32):
        raise ValueError("word alignments come from the PyTorch model: use the model folder, not its export")

    def score(self, sources, targets, batch_size=32) -> list[PairScore]:
        """Each (source, target) pair scored by CTranslate2's `score_batch` (see `scoring`)."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources for {len(targets)} targets: score pairs")
        tokens = self.tokens(targets, target=True)
        share = self.batch_share(len(tokens), batch_size)
        without_eos = [row[:-1] for row in tokens]  # ctranslate2 adds </s> itself
        results = self.translator.score_batch(self.tokens(sources), without_eos, max_batch_size=share)
        return [PairScore(row, [float(p) for p in r.log_probs]) for row, r in zip(tokens, results)]

    def reference_log_probs(self, sentences, references, batch_size: int = 32) -> list[list[float]]:
        """The log-probability of each reference token (end of sentence included) given its source."""
        return [score.token_log_probs for score in self.score(sentences, references, batch_size)]


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
    "Guards",
    "PairScore",
    "Alignment",
    "PyTorchTranslator",
    "CTranslate2Translator",
    "load_translator",
    "uses_ctranslate2",
    "BACKENDS",
]
