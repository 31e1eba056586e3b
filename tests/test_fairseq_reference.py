"""The fairseq import against real fairseq: three tiny models that `fairseq-train` trained on a small English-German
corpus (tests/fairseq_reference: Moses tokenisation, 400 joint subword-nmt merges, joined and separate dictionaries;
post-norm and pre-norm, sinusoidal and learned positions, each way of sharing the embeddings, bpecodes in subword-nmt's
and in fastBPE's format, each in at least one of them), imported with `import_checkpoint(..., kind="fairseq")`.

An imported model computes fairseq's logits on the same ids; its tokenizer gives the ids that fairseq gives the same
raw text (the source as fairseq-interactive encodes it with `--tokenizer moses --bpe ...`, the target as the corpus
was prepared for training); and `generate()` writes fairseq-interactive's beam-5 translations of 300 held-out
sentences, token for token, for at least 99% of them.

fairseq needs numpy < 2 and runs in its own environment: `.venv-fairseq` at the repository root, or the Python that
VANILLA_TRANSFORMER_FAIRSEQ_PYTHON names (`bash tests/fairseq_reference/make_env.sh` builds `.venv-fairseq`). Without
it these tests are skipped, with that reason, unless VANILLA_TRANSFORMER_FAIRSEQ is `required`.
The models and fairseq's outputs are made once (a few minutes) and kept in pytest's cache folder.
"""

import os
from dataclasses import dataclass

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.fairseq_reference.recipe import (
    CONSTRAINED,
    CONSTRAINT_MODES,
    VARIANTS,
    constraint_terms,
    fairseq_python,
    references,
)
from vanilla_transformer import CheckpointImportError, import_checkpoint
from vanilla_transformer.inference.alignment import token_alignments
from vanilla_transformer.inference.options import FAIRSEQ, SearchOptions
from vanilla_transformer.inference.search import beam_search
from vanilla_transformer.inference.translators import PyTorchTranslator

MISSING_FAIRSEQ = (
    "needs fairseq in an environment of its own: .venv-fairseq (tests/fairseq_reference/make_env.sh builds it), or "
    "its Python named by "
    "VANILLA_TRANSFORMER_FAIRSEQ_PYTHON"
)
PYTHON = fairseq_python()
REQUIRED = os.environ.get("VANILLA_TRANSFORMER_FAIRSEQ") == "required"
LOGITS_TOLERANCE = 1e-4
AGREEMENT = 0.99  # the share of held-out sentences whose beam-5 translation must equal fairseq's, token for token
FAIRSEQ_MAX_LENGTH = 200  # fairseq-interactive's default --max-len-b (and --max-len-a 0)
SEARCHES = {"default": {}, "early_stopping": {"early_stopping": True}}  # generate()'s settings beyond the model's own
BATCH = 50

pytestmark = pytest.mark.skipif(PYTHON is None and not REQUIRED, reason=MISSING_FAIRSEQ)


@dataclass
class Imported:
    model: torch.nn.Module
    tokenizer: object
    folder: str  # what import_checkpoint wrote
    target_symbols: list[str]  # fairseq's target dictionary, by id


@pytest.fixture(scope="session")
def fairseq(request, tmp_path_factory):
    """Every variant's fairseq reference (tests/fairseq_reference/recipe.py), made once per recipe."""
    if PYTHON is None:  # only where the tests are required
        pytest.fail(MISSING_FAIRSEQ)
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider: made again in each session
    return references(PYTHON, cache.mkdir("fairseq-reference") if cache else tmp_path_factory.mktemp("fairseq"))


def fairseq_dictionary(path) -> list[str]:
    """fairseq's Dictionary, by id: <s> <pad> </s> <unk>, then the first field of each line of dict.LANG.txt."""
    with open(path, encoding="utf-8") as lines:
        return ["<s>", "<pad>", "</s>", "<unk>"] + [line.split(" ")[0] for line in lines]


@pytest.fixture(scope="session")
def imported(fairseq, tmp_path_factory):
    """Each variant imported into a model folder and loaded back from it, as a user would."""
    done = {}

    def load(name: str) -> Imported:
        if name not in done:
            out = tmp_path_factory.mktemp("fairseq-import") / name
            import_checkpoint(fairseq[name].folder, kind="fairseq", out=out, trust_pickle=True)
            model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
            symbols = fairseq_dictionary(fairseq[name].folder / "dict.de.txt")
            done[name] = Imported(model, AutoTokenizer.from_pretrained(out), str(out), symbols)
        return done[name]

    return load


def right_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows])
    return ids, (ids != pad).long()


@pytest.mark.parametrize("name", VARIANTS)
def test_the_checkpoint_imports_as_the_architecture_it_was_trained_with(fairseq, imported, name):
    flags, config = fairseq[name].variant.flags, imported(name).model.config
    assert {"config.json", "generation_config.json", "model.safetensors"} <= set(os.listdir(imported(name).folder))
    assert config.model_type == "vanilla_transformer"
    assert config.norm_position == ("pre" if "--encoder-normalize-before" in flags else "post")
    assert config.position_encoding == ("learned" if "--encoder-learned-pos" in flags else "sinusoidal")
    assert config.share_embeddings == ("--share-all-embeddings" in flags)
    if not config.share_embeddings:
        assert config.share_decoder_embeddings == ("--share-decoder-input-output-embed" in flags)
    assert (config.d_model, config.num_heads, config.d_ff, config.encoder_layers) == (48, 4, 96, 2)


def test_a_checkpoint_trained_without_naming_its_languages_imports_with_the_languages_given(fairseq, tmp_path):
    """fairseq-train infers --source-lang and --target-lang from the data folder's file names, and its checkpoint
    names neither. Here the data folder has moved since (the reference is built in a scratch folder and renamed):
    the import says so and asks for the languages; given them, it imports."""
    folder = fairseq["post-norm-shared-all"].folder.parent / "languages-inferred"
    with pytest.raises(CheckpointImportError, match=r"name no source_lang.*--languages SRC TGT"):
        import_checkpoint(folder, kind="fairseq", trust_pickle=True)
    model, tokenizer = import_checkpoint(
        folder, kind="fairseq", out=tmp_path / "model", trust_pickle=True, languages=("en", "de")
    )
    assert (tokenizer.src_lang, tokenizer.tgt_lang) == ("en", "de")
    assert model.config.share_embeddings
    named = fairseq["pre-norm-separate"].folder  # a checkpoint that names its languages keeps them
    with pytest.raises(CheckpointImportError, match="is en to de, not de to en"):
        import_checkpoint(named, kind="fairseq", trust_pickle=True, languages=("de", "en"))


@pytest.mark.parametrize("name", VARIANTS)
def test_the_imported_model_computes_fairseqs_logits(fairseq, imported, name):
    reference, model = fairseq[name].encodings, imported(name).model
    count = len(reference["logits"])
    input_ids, attention_mask = right_padded(reference["source_ids"][:count], model.config.pad_token_id)
    decoder_input_ids, decoder_mask = right_padded(reference["decoder_input_ids"], model.config.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    differences = [
        (logits[row, : len(expected)] - torch.tensor(expected)).abs().max().item()
        for row, expected in enumerate(reference["logits"])
    ]
    assert max(differences) < LOGITS_TOLERANCE, f"largest difference {max(differences):.3g}"


def mismatches(ours: list[list[int]], theirs: list[list[int]], texts: list[str], symbols: list[str]) -> str:
    """'' where every row is equal, else how many differ and the first three, spelled in fairseq's symbols."""
    differ = [(text, a, b) for text, a, b in zip(texts, ours, theirs) if a != b]
    spell = lambda ids: " ".join(symbols[i] if i < len(symbols) else str(i) for i in ids)  # noqa: E731
    examples = "".join(f"\n  {text!r}:\n    ours   {spell(a)}\n    fairseq {spell(b)}" for text, a, b in differ[:3])
    return f"{len(differ)} of {len(texts)} differ{examples}" if differ else ""


@pytest.mark.parametrize("name", VARIANTS)
def test_the_tokenizer_encodes_the_source_as_fairseq_interactive_does(fairseq, imported, name):
    case, reference = imported(name), fairseq[name]
    english = [pair[0] for pair in reference.pairs]
    ours = case.tokenizer(english)["input_ids"]
    symbols = fairseq_dictionary(reference.folder / "dict.en.txt")
    differences = mismatches(ours, reference.encodings["source_ids"], english, symbols)
    assert not differences, differences


@pytest.mark.parametrize("name", VARIANTS)
def test_the_tokenizer_encodes_the_target_as_fairseqs_target_dictionary_does(fairseq, imported, name):
    case, reference = imported(name), fairseq[name]
    german = [pair[1] for pair in reference.pairs]
    ours = case.tokenizer(text_target=german)["input_ids"]
    differences = mismatches(ours, reference.encodings["target_ids"], german, case.target_symbols)
    assert not differences, differences


@pytest.fixture(scope="session")
def translations(fairseq, imported):
    """generate()'s translations of the held-out sentences, by (variant, search, input): token ids without the
    decoder's first token, </s> and padding. The input is the raw text through the imported tokenizer (`text`) or
    fairseq's own encoding of it (`fairseq_ids`), which leaves the search alone to compare."""
    done = {}

    def translate(name: str, search: str, given: str = "text") -> list[list[int]]:
        if (name, search, given) not in done:
            case, reference = imported(name), fairseq[name]
            config, rows = case.model.config, []
            for start in range(0, len(reference.pairs), BATCH):
                if given == "text":
                    english = [pair[0] for pair in reference.pairs[start : start + BATCH]]
                    batch = dict(case.tokenizer(english, padding=True, return_tensors="pt"))
                else:
                    ids = reference.encodings["source_ids"][start : start + BATCH]
                    batch = dict(zip(("input_ids", "attention_mask"), right_padded(ids, config.pad_token_id)))
                with torch.no_grad():
                    output = case.model.generate(**batch, **SEARCHES[search])
                special = {config.pad_token_id, config.eos_token_id}
                rows += [[i for i in row[1:] if i not in special] for row in output.tolist()]
            done[name, search, given] = rows
        return done[name, search, given]

    return translate


def agreement(case: Imported, reference, rows: list[list[int]]) -> tuple[list[int], str]:
    """The sentences whose translation is not fairseq-interactive's, token for token, and a report: how many agree,
    and the first three that do not."""
    ours = [[case.target_symbols[i] for i in row] for row in rows]
    english = [pair[0] for pair in reference.pairs]
    differ = [index for index, (a, b) in enumerate(zip(ours, reference.translations)) if a != b]
    examples = "".join(
        f"\n  {english[i]!r}:\n    ours    {' '.join(ours[i])}\n    fairseq {' '.join(reference.translations[i])}"
        for i in differ[:3]
    )
    agreeing = len(ours) - len(differ)
    return differ, f"{agreeing} of {len(ours)} agree ({agreeing / len(ours):.2%}){examples}"


def normalised_scores(case: Imported, source_ids: list[int], hypotheses: list[list[int]]) -> list[float]:
    """What both searches rank finished hypotheses by: the sum of the tokens' log-probabilities, </s> included, over
    their number (length penalty 1), under the imported model."""
    config = case.model.config
    with torch.no_grad():
        encoder_outputs = case.model.get_encoder()(torch.tensor([source_ids]))
        scores = []
        for hypothesis in hypotheses:
            labels = torch.tensor([hypothesis + [config.eos_token_id]])
            decoder_input_ids = torch.tensor([[config.decoder_start_token_id] + hypothesis])
            logits = case.model(encoder_outputs=encoder_outputs, decoder_input_ids=decoder_input_ids).logits
            log_p = torch.log_softmax(logits.double(), dim=-1).gather(-1, labels[..., None])
            scores.append(log_p.sum().item() / labels.shape[1])
    return scores


def ids_of(case: Imported, symbols: list[str]) -> list[int]:
    return [case.target_symbols.index(symbol) for symbol in symbols]


@pytest.mark.parametrize("given", ["text", "fairseq_ids"])
@pytest.mark.parametrize("name", VARIANTS)
def test_beam_search_with_early_stopping_writes_fairseq_interactives_translations(
    fairseq, imported, translations, name, given, request
):
    """`early_stopping=True` is fairseq's stopping rule: a sentence is done once it has as many finished hypotheses
    as beams. From the raw text through the imported tokenizer, and from the ids fairseq encodes the source to (the
    search alone, whatever the tokenizer does)."""
    differ, report = agreement(imported(name), fairseq[name], translations(name, "early_stopping", given))
    request.node.user_properties.append(("agreement", report.split("\n")[0]))  # in --junitxml's report
    assert len(differ) <= (1 - AGREEMENT) * len(fairseq[name].pairs), report


@pytest.mark.parametrize("name", VARIANTS)
def test_the_default_search_differs_from_fairseqs_only_where_it_finds_a_better_translation(
    fairseq, imported, translations, name, request
):
    """generate()'s default (early_stopping=False, as transformers' FSMT models have it) keeps searching after five
    hypotheses have finished, where fairseq stops: where the two differ, generate()'s translation scores at least as
    high under the model as fairseq's."""
    case, reference = imported(name), fairseq[name]
    rows = translations(name, "default", "fairseq_ids")
    differ, report = agreement(case, reference, rows)
    request.node.user_properties.append(("agreement", report.split("\n")[0]))
    worse = []
    for index in differ:
        source = reference.encodings["source_ids"][index]
        ours, theirs = normalised_scores(case, source, [rows[index], ids_of(case, reference.translations[index])])
        if ours < theirs - 1e-6:
            worse.append((reference.pairs[index][0], round(ours, 5), round(theirs, 5)))
    assert not worse, f"{report}\nscored lower than fairseq's: {worse[:3]}"


@pytest.mark.parametrize("name", VARIANTS)
def test_the_tokenizer_detokenizes_as_fairseq_interactive_does(fairseq, imported, translations, name):
    """Where the tokens agree, the decoded text is fairseq-interactive's (its D- lines: BPE joined, Moses detok)."""
    case, reference = imported(name), fairseq[name]
    rows, decoded = translations(name, "early_stopping"), []
    for row, tokens, text in zip(rows, reference.translations, reference.detokenized):
        if [case.target_symbols[i] for i in row] == tokens:
            decoded.append((case.tokenizer.decode(row, skip_special_tokens=True), text))
    assert decoded and all(ours == theirs for ours, theirs in decoded), [
        pair for pair in decoded if pair[0] != pair[1]
    ][:3]


@pytest.mark.parametrize("name", VARIANTS)
def test_scores_are_fairseqs_sequence_scorer_scores_token_for_token(fairseq, imported, name):
    """`translate.score` on the held-out pairs (raw text through the imported tokenizer) against fairseq's
    SequenceScorer, what `fairseq-generate --score-reference` prints (there in base 2): each target token's natural
    log-probability, the end of sentence last, to 1e-4."""
    case, reference = imported(name), fairseq[name]
    english, german = zip(*reference.pairs)
    ours = PyTorchTranslator(case.model, case.tokenizer).score(list(english), list(german))
    for score, expected in zip(ours, reference.encodings["positional_scores"]):
        assert score.token_log_probs == pytest.approx(expected, abs=LOGITS_TOLERANCE), score.tokens


@pytest.mark.parametrize("name", VARIANTS)
def test_token_alignments_are_fairseq_interactives_print_alignment(fairseq, imported, name, request):
    """The alignment of each of fairseq-interactive's beam-5 translations with its source (the last decoder layer's
    cross-attention averaged over its heads, argmax per target token, ends of sentence left out) against its A- lines
    (`--print-alignment`), token pair for token pair. fairseq records the attention while it searches, the
    alignment here reads it teacher-forced: the two are the same numbers up to rounding."""
    case, reference = imported(name), fairseq[name]
    config, ours = case.model.config, []
    targets = [ids_of(case, tokens) + [config.eos_token_id] for tokens in reference.translations]
    last = case.model.config.decoder_layers - 1
    for start in range(0, len(targets), BATCH):
        input_ids, mask = right_padded(reference.encodings["source_ids"][start : start + BATCH], config.pad_token_id)
        labels, _ = right_padded(targets[start : start + BATCH], config.pad_token_id)
        ours += token_alignments(case.model, {"input_ids": input_ids, "attention_mask": mask}, labels, last, None)
    differ = [i for i, (a, b) in enumerate(zip(ours, reference.alignments)) if a != b]
    report = f"{len(ours) - len(differ)} of {len(ours)} agree" + "".join(
        f"\n  {reference.pairs[i][0]!r}: ours {ours[i]}, fairseq {reference.alignments[i]}" for i in differ[:3]
    )
    request.node.user_properties.append(("agreement", report.split("\n")[0]))
    assert any(reference.alignments) and len(differ) <= (1 - AGREEMENT) * len(ours), report


@pytest.mark.parametrize("name", VARIANTS)
def test_translate_with_alignments_aligns_the_tokens_it_wrote_as_fairseq_interactive(fairseq, imported, name, request):
    """`translate(..., alignment=True)` from the raw text, searching as fairseq does (early stopping): where its
    tokens are fairseq-interactive's, its token pairs are fairseq's A- lines. The alignment is of the tokens the
    search wrote, also where the text would encode back to other tokens."""
    case, reference = imported(name), fairseq[name]
    english = [source for source, _ in reference.pairs]
    early = case.model.generation_config.early_stopping
    case.model.generation_config.early_stopping = True
    try:
        found = PyTorchTranslator(case.model, case.tokenizer).translate(english, num_beams=5, alignment=True)
    finally:
        case.model.generation_config.early_stopping = early
    eos = case.model.config.eos_token_id
    same = [(best, alignment) for [best], tokens, alignment in zip(found, reference.translations, reference.alignments)
            if list(best.tokens) == ids_of(case, tokens) + [eos]]  # fmt: skip
    differ = [pair for pair in same if pair[0].alignment.token_pairs != pair[1]]
    report = f"{len(same) - len(differ)} of {len(same)} translations with fairseq's tokens align as fairseq's"
    request.node.user_properties.append(("agreement", report))
    assert len(same) >= AGREEMENT * len(english) and len(differ) <= (1 - AGREEMENT) * len(same), report


@pytest.mark.parametrize("name", VARIANTS)
def test_translations_from_prefixes_are_fairseqs_prefix_size_translations(fairseq, imported, name, request):
    """The package's beam search from the first two tokens of each held-out reference against fairseq's generator
    given them as `prefix_tokens` (what `fairseq-generate --prefix-size 2` does), beam 5, token for token, the
    prefix's log-probabilities counted in the score as fairseq counts them (its `rules`)."""
    case, reference = imported(name), fairseq[name]
    config, ours = case.model.config, []
    cases = reference.encodings["prefixed"]
    for start in range(0, len(cases), BATCH):
        for length in sorted({len(case_["prefix"]) for case_ in cases[start : start + BATCH]}):
            group = [i for i in range(start, min(start + BATCH, len(cases))) if len(cases[i]["prefix"]) == length]
            input_ids, mask = right_padded([reference.encodings["source_ids"][i] for i in group], config.pad_token_id)
            settings = SearchOptions(num_beams=5, length_penalty=1.0, max_length=FAIRSEQ_MAX_LENGTH, rules=FAIRSEQ)
            found = beam_search(case.model, input_ids, mask, settings, None,
                                [cases[i]["prefix"] for i in group])  # fmt: skip
            ours += [(i, hypotheses[0].tokens) for i, hypotheses in zip(group, found)]
    differ = [i for i, tokens in sorted(ours) if tokens != cases[i]["tokens"]]
    report = f"{len(cases) - len(differ)} of {len(cases)} agree" + "".join(
        f"\n  {reference.pairs[i][0]!r}: ours {dict(ours)[i]}, fairseq {cases[i]['tokens']}" for i in differ[:3]
    )
    request.node.user_properties.append(("agreement", report.split("\n")[0]))
    assert len(differ) <= (1 - AGREEMENT) * len(cases), report
    assert all(tokens[: len(cases[i]["prefix"])] == cases[i]["prefix"] for i, tokens in ours)


@pytest.mark.parametrize("mode", CONSTRAINT_MODES)
@pytest.mark.parametrize("name", CONSTRAINED)
def test_constrained_search_writes_fairseq_interactives_translations_with_their_terms(
    fairseq, imported, name, mode, request
):
    """`translate(..., terms=, ordered=)` against `fairseq-interactive --constraints MODE`: each held-out
    sentence with the two longest words of its reference as terms (in their order, or the other way round for
    unordered), beam 5. The translations are fairseq's, token for token, for at least 99% of them, and every
    translation holds every term, as tokens (in order, where ordered) and as text."""
    case, reference = imported(name), fairseq[name]
    translator = PyTorchTranslator(case.model, case.tokenizer)
    english = [pair[0] for pair in reference.pairs]
    terms = [constraint_terms(german, mode) for _, german in reference.pairs]
    term_ids = translator.term_ids(terms)
    rows = []
    for start in range(0, len(english), BATCH):
        batch = case.tokenizer(english[start : start + BATCH], padding=True, return_tensors="pt")
        settings = SearchOptions(
            num_beams=5, length_penalty=1.0, max_length=FAIRSEQ_MAX_LENGTH, ordered=mode == "ordered", rules=FAIRSEQ
        )
        found = beam_search(case.model, batch["input_ids"], batch["attention_mask"], settings, term_ids[start:][:BATCH])
        rows += [hypotheses[0].tokens[:-1] for hypotheses in found]
    ours = [[case.target_symbols[i] for i in row] for row in rows]
    differ = [i for i, (a, b) in enumerate(zip(ours, reference.constrained[mode])) if a != b]
    report = f"{len(ours) - len(differ)} of {len(ours)} agree" + "".join(
        f"\n  {english[i]!r} {terms[i]}:\n    ours    {' '.join(ours[i])}\n    fairseq "
        f"{' '.join(reference.constrained[mode][i])}"
        for i in differ[:3]
    )
    request.node.user_properties.append(("agreement", report.split("\n")[0]))
    assert len(differ) <= (1 - AGREEMENT) * len(ours), report
    for row, ids in zip(rows, term_ids):
        assert all(term_inside(row, term) for term in ids), (row, ids)
        if mode == "ordered":
            assert in_order(row, ids), (row, ids)
    texts = translator.translate(english[:BATCH], num_beams=5, terms=terms[:BATCH], ordered=mode == "ordered")
    for [translation], sentence_terms in zip(texts, terms):
        assert all(term in translation.text for term in sentence_terms), (sentence_terms, translation.text)


def term_inside(row: list[int], term: list[int]) -> bool:
    return any(row[i : i + len(term)] == term for i in range(len(row) - len(term) + 1))


def in_order(row: list[int], terms: list[list[int]]) -> bool:
    """Whether the terms occur in `row` one after another, each after the end of the one before."""
    position = 0
    for term in terms:
        starts = [i for i in range(position, len(row) - len(term) + 1) if row[i : i + len(term)] == term]
        if not starts:
            return False
        position = starts[0] + len(term)
    return True
