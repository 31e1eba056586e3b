"""Translating sentences with a trained model: through PyTorch's `generate()` from a model folder (the `torch`
engine), or through CTranslate2 from a folder that `export_ctranslate2` wrote (the `ctranslate2` engine). Both are a
`Translator`: they take the same `SearchOptions` and give the same text, and declare what else they can do
(`Capabilities`), which the commands and the server ask instead of an engine's name.

    translator = load_translator("runs/numbers-en-de")        # or an exported folder: told from its contents
    translator.translate(["forty-two"], num_beams=5, n_best=2)  # keywords: the fields of `SearchOptions`
    # [[Translation(text='zweiundvierzig', score=...), Translation(text=..., score=...)]]
    translator.translate(sentences, SearchOptions(num_beams=5, n_best=2))          # the same, as one record
    load_translator("runs/numbers-en-de", placement=Placement(device="cuda"))    # on a GPU, in bfloat16

A translation's score is what beam search ranks by: the sum of its tokens' log-probabilities (end of sentence
included) divided by its length in tokens to the power `length_penalty`.
"""

import copy
from dataclasses import replace

import torch

from ..configuration import position_limit
from ..exports.ctranslate2 import (
    exported_end_token,
    exported_positions,
    exported_vocabularies,
    import_ctranslate2,
    is_ctranslate2_folder,
)
from ..model_folder import encode_within, load_model_folder, nested_json_named, read_generation_config, text_as_text
from .alignment import Alignment, align, align_tokens
from .capabilities import CAPABILITY_NAMES, Capabilities, UnsupportedError
from .checks import check_prefixes, check_terms
from .decoding import decode
from .devices import DEFAULT_PLACEMENT, Placement, runs_on_cuda
from .options import (
    CTRANSLATE2,
    ENGINES,
    FAIRSEQ,
    GUARDS,
    Guards,
    OptionError,
    SearchOptions,
    Translation,
    blank_stays_blank,
    distinct_texts,
    grouped_batches,
    in_parts,
    key_groups,
)
from .scoring import PairScore, pairs_given, score_pairs
from .search import beam_search


class Translator:
    """What both engines offer: `translate(sentences, options=None, **changes)`, `score(sources, targets)`,
    `align(sources, targets)`, their `tokenizer` and `generation_config`, their `name` and `capabilities`, and
    `max_source_tokens` (the most tokens a source may have; None: no limit)."""

    name: str
    capabilities: Capabilities

    def require(self, capability: str) -> None:
        """An `UnsupportedError` naming the capability if this engine lacks it."""
        if not getattr(self.capabilities, capability):
            other = "the torch engine on the model folder" if self.name == "ctranslate2" else "another engine"
            message = f"the {self.name} engine has no {CAPABILITY_NAMES[capability]}: use {other}"
            raise UnsupportedError(message, capability)

    def check(self, options: SearchOptions) -> None:
        """An `UnsupportedError` for an option this engine cannot search with."""
        if options.terms is not None:
            self.require("terms")
        if options.alignment:
            self.require("alignments")

    def count_tokens(self, texts: list[str], target: bool = False) -> list[int]:
        """Each text's source tokens (target tokens with `target`), its end of sentence included."""
        key = "text_target" if target else "text"
        return [len(ids) for ids in self.tokenizer(**{key: list(texts)}, add_special_tokens=True)["input_ids"]]


class PyTorchTranslator(Translator):
    """`generate()` on a `VanillaTransformerForConditionalGeneration` (or any seq2seq model) and its tokenizer (set
    to read a special token's text as text: `text_as_text`), on the device and in the precision of its `Placement`
    (None: where the model is)."""

    name = "torch"
    capabilities = Capabilities(terms=True, alignments=True, scoring=True, parallel_batches=False)

    def __init__(self, model, tokenizer, placement: Placement | None = None):
        if placement is not None:
            model = placement.place(model)
        self.model, self.tokenizer = model.eval(), text_as_text(tokenizer)

    @classmethod
    def from_folder(cls, path: str, placement: Placement = DEFAULT_PLACEMENT) -> "PyTorchTranslator":
        model, tokenizer = load_model_folder(path)
        return cls(model, tokenizer, placement)

    @property
    def generation_config(self):
        return self.model.generation_config

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def max_source_tokens(self) -> int | None:
        """The most tokens a source may have (the learned positions; None: sinusoids, no limit)."""
        return position_limit(self.model.config)

    def check(self, options: SearchOptions) -> None:
        """As every engine's; and no repetition guards with prefixes or terms (given at all, whatever the sentences'):
        the package's own search, which takes the sentences that have them, has none."""
        super().check(options)
        if (options.terms is not None or options.prefix is not None) and options.guards.repeats:
            raise OptionError(GUARDS, "no_repeat_ngram_size and repetition_penalty apply to generate()'s search "
                              "only: not with terms or prefixes")  # fmt: skip

    @torch.no_grad()
    @blank_stays_blank
    def translate(self, sentences, options: SearchOptions) -> list[list[Translation]]:
        """The `options.n_best` best translations of each sentence, best first (see `SearchOptions`, resolved by
        `blank_stays_blank`). Their scores
        are computed when `options.scores` is true (by default, when n_best > 1); generate() then keeps every step's
        scores, which costs memory for large vocabularies, and a translation's score is otherwise None. Prefixes and
        terms use the package's own beam search (`search`): a prefix's tokens count in its translation's length but
        not its score, as in CTranslate2's, and `max_length` new tokens follow it. A sentence without them (an empty
        prefix, no terms) is translated as if the option were not given. A translation stopped at its length limit
        says so (`at_limit`)."""
        limit = position_limit(self.model.config)  # learned positions: the source and output are cut to them
        if limit is not None:
            options = replace(options, max_length=min(options.max_length, limit))
        source_ids = encode_within(self.tokenizer, sentences, limit)  # a sentence cut to the positions is named
        guided = [i for i in range(len(source_ids)) if options.guides(i)]
        plain = [i for i in range(len(source_ids)) if not options.guides(i)]  # as if no prefixes or terms were given
        results = in_parts([plain, guided], lambda indices: self.part(source_ids, indices, options))
        if options.distinct:
            results = distinct_texts(results, options.n_best)
        return self.aligned(sentences, results) if options.alignment else results

    def part(self, source_ids: list[list[int]], indices: list[int], options: SearchOptions) -> list[list[Translation]]:
        """The translations of the sentences at `indices`: all with a prefix or terms (the package's own search), or
        all without (generate()'s)."""
        rows = [source_ids[i] for i in indices]
        if options.guides(indices[0]):
            return self.searched(rows, options.for_sentences(indices))
        return self.generated(rows, options.unguided)

    def generated(self, source_ids: list[list[int]], options: SearchOptions) -> list[list[Translation]]:
        """Translations by generate()'s own greedy or beam search, its rules and logits processors, a sentence
        leaving the batch once its search is done (`decoding`)."""
        scores = options.n_best > 1 if options.scores is None else options.scores
        config = copy.deepcopy(self.generation_config)
        guards = options.guards.repetition(self.generation_config)
        config.update(num_beams=options.num_beams, length_penalty=options.length_penalty,
                      num_return_sequences=options.kept, **guards)  # fmt: skip
        limits = options.guards.limits([len(row) for row in source_ids], options.max_length)
        results = [None] * len(source_ids)
        for indices in grouped_batches(limits, [len(row) for row in source_ids], options):
            batch = self.batch([source_ids[i] for i in indices])
            config.max_new_tokens = limits[indices[0]]
            found = decode(self.model, batch["input_ids"], batch["attention_mask"], config, scores)
            texts = iter(self.tokenizer.batch_decode([d.tokens for ds in found for d in ds], skip_special_tokens=True))
            for i, decoded in zip(indices, found):
                stopped = [self.stopped(d.tokens, limits[i]) for d in decoded]
                results[i] = [Translation(next(texts).strip(), d.score if scores else None, stop, tuple(d.tokens))
                              for d, stop in zip(decoded, stopped)]  # fmt: skip
        return results

    def batch(self, rows: list[list[int]]) -> dict:
        """Token rows padded into a batch on the model's device."""
        return self.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(self.device)

    def stopped(self, tokens: list[int], limit: int) -> bool:
        """Whether an output of `tokens` was stopped at its length limit before its end of sentence."""
        return len(tokens) >= limit and self.model.config.eos_token_id not in tokens

    def searched(self, source_ids: list[list[int]], options: SearchOptions) -> list[list[Translation]]:
        """Translations by the package's own beam search (`search`): with terms, by fairseq's rules (--constraints;
        min_length 1), or from prefixes, by CTranslate2's (target_prefix: the prefix's tokens count in the length,
        not the score; min_length 0, as generate() and CTranslate2), unless `options.rules` says otherwise."""
        limit = position_limit(self.model.config)
        limits = options.guards.limits([len(row) for row in source_ids], options.max_length)
        rooms = [most if limit is None else min(most, limit - 1) for most in limits]
        terms = self.term_ids(options.terms, rooms) if options.terms is not None else None
        prefixes = self.prefix_ids(options.prefix, limit) if options.prefix is not None else None
        rules = options.rules or (FAIRSEQ if terms else CTRANSLATE2)  # terms are fairseq's; prefixes the export's
        keys = [(len(prefixes[i]) if prefixes else 0, limits[i]) for i in range(len(source_ids))]
        results = [None] * len(source_ids)
        for indices in grouped_batches(keys, [len(row) for row in source_ids], options):
            batch = self.batch([source_ids[i] for i in indices])
            given = len(prefixes[indices[0]]) if prefixes else 0
            longest = limits[indices[0]] + given if limit is None else min(limits[indices[0]] + given, limit - 1)
            search = replace(options, max_length=longest, rules=rules)
            found = beam_search(self.model, batch["input_ids"], batch["attention_mask"], search,
                                [terms[i] for i in indices] if terms else None,
                                [prefixes[i] for i in indices] if prefixes else None)  # fmt: skip
            for i, hypotheses in zip(indices, found):
                hypotheses = hypotheses[: options.kept]
                texts = self.tokenizer.batch_decode([h.tokens for h in hypotheses], skip_special_tokens=True)
                results[i] = [Translation(t.strip(), h.score, len(h.tokens) > search.max_length, tuple(h.tokens))
                              for t, h in zip(texts, hypotheses)]  # fmt: skip
        return results

    def aligned(self, sentences, results: list[list[Translation]]) -> list[list[Translation]]:
        """Each translation with its word alignment, from the tokens the search wrote."""
        flat = [(sentence, t) for sentence, translations in zip(sentences, results) for t in translations]
        alignments = iter(
            align_tokens(self.model, self.tokenizer, [s for s, _ in flat], [list(t.tokens) for _, t in flat])
        )
        return [[replace(t, alignment=next(alignments)) for t in translations] for translations in results]

    def term_ids(self, constraints, rooms: list[int] | None = None) -> list[list[list[int]]]:
        """Each sentence's terms as target token ids, without the end of sentence, checked by `check_terms` (a
        ValueError naming the sentence and the term), with `rooms[i]` the most tokens sentence i's translation may
        have."""
        encoded = iter(self.target_ids([term for terms in constraints for term in terms], None))  # longer: refused
        found = [[next(encoded) for _ in terms] for terms in constraints]
        check_terms(constraints, found, self.tokenizer, rooms)
        return found

    def target_ids(self, texts: list[str], limit: int | None) -> list[list[int]]:
        """Each text as target token ids without the end of sentence (the model's id: not every tokenizer, fairseq's
        among them, names one), cut to `limit` tokens as `encode_within` cuts them."""
        if not texts:
            return []
        eos, rows = self.model.config.eos_token_id, encode_within(self.tokenizer, texts, limit, target=True)
        return [row[:-1] if row and row[-1] == eos else row for row in rows]

    def prefix_ids(self, prefix, limit: int | None) -> list[list[int]]:
        """Each sentence's target prefix as token ids, without the end of sentence ("": none); checked by
        `check_prefixes` against the vocabulary and the model's positions (`limit`)."""
        rows = self.target_ids(list(prefix), None)
        check_prefixes(prefix, rows, self.tokenizer.unk_token_id, self.tokenizer.unk_token, limit)
        return rows

    def score(self, sources, targets, batch_size=32) -> list[PairScore]:
        """Each (source, target) pair scored by the model: each target token's log-probability (see `scoring`)."""
        return score_pairs(self.model, self.tokenizer, sources, targets, batch_size, position_limit(self.model.config))

    def align(self, sources, targets, layer=None, heads=None, batch_size=32) -> list[Alignment]:
        """Each pair's word alignment from the cross-attention of decoder `layer` over `heads` (see `alignment`)."""
        return align(self.model, self.tokenizer, sources, targets, layer, heads, batch_size)


class CTranslate2Translator(Translator):
    """A `ctranslate2.Translator` on a folder written by `export_ctranslate2`, with the tokenizer saved in it, on the
    device and in the compute type of its `Placement`. `threads` computation threads work on each batch
    (ctranslate2's intra_threads; None: its own choice), and `inter_threads` batches are translated at once, the
    input being split so that each has its share."""

    name = "ctranslate2"
    capabilities = Capabilities(terms=False, alignments=False, scoring=True, parallel_batches=True)

    def __init__(self, folder: str, placement: Placement = DEFAULT_PLACEMENT):
        from transformers import AutoTokenizer

        ctranslate2 = import_ctranslate2()
        if not is_ctranslate2_folder(folder):
            raise ValueError(f"{folder} is not a CTranslate2 model folder (no model.bin): export one first.")
        placement.check_ctranslate2()
        device, index = placement.ctranslate2_device(ctranslate2)
        placement.check_compute_type(ctranslate2, device)
        try:
            self.translator = ctranslate2.Translator(
                folder, device=device, device_index=index, compute_type=placement.compute_type,
                inter_threads=placement.inter_threads, intra_threads=placement.threads or 0,
            )  # fmt: skip
        except RuntimeError as error:  # a model.bin cut short or damaged, say
            raise ValueError(f"{folder}: CTranslate2 could not load it: {error}") from error
        if device == "cuda":
            runs_on_cuda(self.translator, placement, ctranslate2.__version__)
        self.inter_threads = placement.inter_threads
        self.tokenizer = text_as_text(AutoTokenizer.from_pretrained(folder))
        self.generation_config = read_generation_config(folder, folder)
        self.source_vocabulary, self.target_vocabulary = exported_vocabularies(folder)
        self.target_ids = {token: i for i, token in enumerate(self.target_vocabulary)}
        self.end_token = exported_end_token(folder)  # the export's own: FSMT's tokenizer names none eos_token
        self.max_positions = exported_positions(folder)  # also the most tokens a source may have

    @property
    def max_source_tokens(self) -> int | None:
        return self.max_positions

    def tokens(self, sentences, warn: bool = False, target: bool = False, cut: bool = True) -> list[list[str]]:
        """Each sentence's tokens (as a source, or as a `target`) in the exported model's vocabulary, cut to the
        exported positions unless not `cut`; with `warn`, a warning on stderr names each sentence that was cut."""
        quiet = None if warn else (lambda index, line: None)
        limit = self.max_positions if cut else None
        ids = encode_within(self.tokenizer, sentences, limit, warn=quiet, target=target)
        vocabulary = self.target_vocabulary if target else self.source_vocabulary
        return [[vocabulary[i] for i in row] for row in ids]

    def texts(self, rows: list[list[int]]) -> list[str]:
        """Target token ids as text, in one call of the tokenizer (its Rust batch decoder where it has one)."""
        return [text.strip() for text in self.tokenizer.batch_decode(rows, skip_special_tokens=True)]

    def suppressed(self) -> list[list[str]] | None:
        """The generation config's `bad_words_ids` (Marian's forbid <pad>, the decoder's start) as target tokens."""
        sequences = self.generation_config.bad_words_ids
        return [[self.target_vocabulary[i] for i in ids] for ids in sequences] if sequences else None

    @blank_stays_blank
    def translate(self, sentences, options: SearchOptions) -> list[list[Translation]]:
        """The `options.n_best` best translations of each sentence, best first (see `SearchOptions`), with their
        scores (ctranslate2 computes them at no cost, whatever `scores` says).

        Beam search stops once `num_beams * patience` hypotheses have finished. generate()'s `early_stopping=True`
        is patience 1 exactly; its default, `early_stopping=False`, keeps searching while a running hypothesis could
        still win, which ctranslate2 has no rule for: patience 2 (the default then) searches on long enough to find
        the same translations with length penalties up to about 1. Far above 1, generate()'s rule ends the search
        at other points than any patience does, and the two may choose different translations."""
        patience = options.patience or (1.0 if self.generation_config.early_stopping is True else 2.0)
        max_length = options.max_length
        if self.max_positions is not None:
            max_length = min(max_length, self.max_positions)
        if self.generation_config.forced_eos_token_id is not None:  # generate() ends the last step with </s>
            max_length = max(1, max_length - 1)
        tokens = self.tokens(sentences, warn=True)
        prefixes = self.target_prefix(options.prefix) or [None] * len(tokens)
        settings = dict(beam_size=options.num_beams, num_hypotheses=options.kept, patience=patience,
                        length_penalty=options.length_penalty, suppress_sequences=self.suppressed(),
                        **options.guards.repetition(self.generation_config))  # fmt: skip
        limits = options.guards.limits([len(row) for row in tokens], max_length)
        given = [len(prefix or []) for prefix in prefixes]  # each its own `max_length` new tokens after its prefix
        results, eos = [None] * len(tokens), self.target_ids.get(self.end_token)  # as the torch engine's tokens end
        for indices in key_groups(list(zip(given, limits))):  # ctranslate2 sorts a group by length, and batches it
            longest = min(limits[indices[0]] + given[indices[0]], self.max_positions or 1 << 62)  # prefix, then new
            found = self.translator.translate_batch(
                [tokens[i] for i in indices],
                target_prefix=[prefixes[i] for i in indices] if options.prefix is not None else None,
                **self.batching(len(indices), options),
                max_decoding_length=longest,
                min_decoding_length=0,  # as generate(): ctranslate2's default, 1, would forbid </s> at the first step
                return_scores=True,
                **settings,
            )
            ids = [[[self.target_ids[token] for token in t] for t in r.hypotheses] for r in found]
            texts = iter(self.texts([row for rows in ids for row in rows]))
            for i, r, rows in zip(indices, found, ids):
                ends = [len(t) >= longest for t in r.hypotheses]  # stopped at the limit, the prefix's tokens counted
                results[i] = [Translation(next(texts), score, end, tuple(row if end else row + [eos]))
                              for row, score, end in zip(rows, r.scores, ends)]  # fmt: skip
        return distinct_texts(results, options.n_best) if options.distinct else results

    def target_prefix(self, prefix) -> list[list[str] | None] | None:
        """Each sentence's target prefix as target tokens without the end of sentence (None for none), as
        ctranslate2's `target_prefix` takes them."""
        if prefix is None:
            return None
        rows = self.tokens(list(prefix), target=True, cut=False)
        rows = [row[:-1] if row and row[-1] == self.end_token else row for row in rows]
        check_prefixes(prefix, rows, self.tokenizer.unk_token, self.tokenizer.unk_token, self.max_positions)
        return [row or None for row in rows]

    def batching(self, count: int, options: SearchOptions) -> dict:
        """ctranslate2's batch settings for `count` sentences: `options.max_tokens` tokens a batch where given,
        else `options.batch_size` sentences (shared out among the parallel batches)."""
        if options.max_tokens:
            return {"max_batch_size": options.max_tokens, "batch_type": "tokens"}
        return {"max_batch_size": self.batch_share(count, options.batch_size)}

    def batch_share(self, count: int, batch_size: int) -> int:
        """At most `batch_size` sentences a batch, and few enough that each of the parallel batches gets some."""
        return max(1, min(batch_size, -(-count // self.inter_threads)))

    def align(self, sources, targets, layer=None, heads=None, batch_size=32):
        self.require("alignments")

    def score(self, sources, targets, batch_size=32) -> list[PairScore]:
        """Each (source, target) pair scored by CTranslate2's `score_batch` (see `scoring`)."""
        sources, targets = pairs_given(sources, targets, batch_size)
        if not sources:
            return []
        tokens = self.tokens(targets, warn=True, target=True)  # cut to the exported positions, named, as torch's
        share = self.batch_share(len(tokens), batch_size)
        without_eos = [row[:-1] for row in tokens]  # ctranslate2 adds </s> itself
        results = self.translator.score_batch(self.tokens(sources, warn=True), without_eos, max_batch_size=share)
        return [PairScore(row, [float(p) for p in r.log_probs]) for row, r in zip(tokens, results)]

    def reference_log_probs(self, sentences, references, batch_size: int = 32) -> list[list[float]]:
        """The log-probability of each reference token (end of sentence included) given its source."""
        return [score.token_log_probs for score in self.score(sentences, references, batch_size)]


def engine_of(path: str, engine: str = "auto") -> str:
    """The engine that runs `path`: `engine`, or for "auto" the one its contents call for (ctranslate2 for an
    exported folder, torch for a model folder); a ValueError names an engine that cannot run it."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    exported = is_ctranslate2_folder(path)
    if engine == "torch" and exported:
        raise ValueError(f"{path} is a CTranslate2 export: the torch engine needs the model folder (or engine auto)")
    return "ctranslate2" if exported or engine == "ctranslate2" else "torch"


def load_translator(path: str, engine: str = "auto", placement: Placement = DEFAULT_PLACEMENT) -> Translator:
    """A translator for a model folder (the torch engine) or an exported CTranslate2 folder (see `engine_of`), on
    `placement`'s device and precision."""
    if not isinstance(placement, Placement):
        raise TypeError(f"placement must be a Placement, got {placement!r}: Placement(device=..., dtype=...)")
    if engine_of(path, engine) == "ctranslate2":
        with nested_json_named(path, str(path)):  # load_model_folder names the torch engine's files itself
            return CTranslate2Translator(path, placement)
    return PyTorchTranslator.from_folder(path, placement)


__all__ = [
    "Translation",
    "Guards",
    "SearchOptions",
    "Placement",
    "PairScore",
    "Alignment",
    "Translator",
    "Capabilities",
    "UnsupportedError",
    "PyTorchTranslator",
    "CTranslate2Translator",
    "load_translator",
    "engine_of",
    "ENGINES",
]
