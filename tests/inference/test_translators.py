"""Translating through either engine: the same arguments, the same translations, the same n-best lists and scores."""

import re
from dataclasses import replace

import pytest
from vanilla_transformer.training.tasks.numbers import english

from vanilla_transformer.inference.devices import Placement
from vanilla_transformer.inference.options import Translation
from vanilla_transformer.inference.translators import CTranslate2Translator, Guards, PyTorchTranslator, load_translator

SENTENCES = [english(n) for n in (101, 152, 203, 254, 305, 356, 399, 42)]


@pytest.fixture(scope="module")
def exported(exported_folder):
    return exported_folder


def test_the_engine_is_told_from_the_folder(trained_folder, exported):
    assert isinstance(load_translator(str(trained_folder)), PyTorchTranslator)
    assert isinstance(load_translator(str(exported)), CTranslate2Translator)
    with pytest.raises(ValueError, match="not a CTranslate2 model folder"):
        load_translator(str(trained_folder), engine="ctranslate2")
    with pytest.raises(ValueError, match="engine 'onnx'"):
        load_translator(str(trained_folder), engine="onnx")
    with pytest.raises(ValueError, match="is a CTranslate2 export: the torch engine needs the model folder"):
        load_translator(str(exported), engine="torch")


@pytest.mark.parametrize("num_beams", [1, 5])
def test_both_engines_give_the_same_translations_and_scores(trained_folder, exported, num_beams):
    pytorch = load_translator(str(trained_folder)).translate(SENTENCES, num_beams=num_beams, batch_size=3, scores=True)
    fast = load_translator(str(exported), placement=Placement(threads=1)).translate(
        SENTENCES, num_beams=num_beams, batch_size=3
    )
    assert load_translator(str(trained_folder)).translate(SENTENCES[:1], num_beams=num_beams)[0][0].score is None
    assert [[t.text for t in n] for n in fast] == [[t.text for t in n] for n in pytorch]
    assert [[t.tokens for t in n] for n in fast] == [[t.tokens for t in n] for n in pytorch]  # </s> last in both
    for ours, theirs in zip(fast, pytorch):
        assert ours[0].score == pytest.approx(theirs[0].score, abs=1e-3)
        assert ours[0].score < 0


def test_n_best_lists_are_the_same_best_first_and_start_with_the_translation(trained_folder, exported):
    for translator in (load_translator(str(trained_folder)), load_translator(str(exported))):
        one_best = translator.translate(SENTENCES, num_beams=5)
        three_best = translator.translate(SENTENCES, num_beams=5, n_best=3)
        assert all(len(n) == 3 for n in three_best)
        assert [n[0].text for n in three_best] == [n[0].text for n in one_best]
        assert all(n[0].score >= n[1].score >= n[2].score for n in three_best)
        assert all(len({t.text for t in n}) == 3 for n in three_best)  # three different translations
    # across the engines, under the one stopping rule they share exactly (generate()'s early_stopping=True is
    # CTranslate2's patience 1): with generate()'s default, either may end the search before the other and find
    # other hypotheses below the best
    translators = load_translator(str(trained_folder)), load_translator(str(exported))
    for translator in translators:
        translator.generation_config.early_stopping = True
    pytorch, fast = (translator.translate(SENTENCES, num_beams=5, n_best=3) for translator in translators)
    assert [[t.text for t in n] for n in fast] == [[t.text for t in n] for n in pytorch]
    flat = lambda results: [t.score for n in results for t in n]  # noqa: E731
    assert flat(fast) == pytest.approx(flat(pytorch), abs=1e-3)


def test_the_length_penalty_and_max_length_are_honoured_alike(trained_folder, exported):
    # up to a length penalty of about 1; far above it, generate()'s stopping rule (early_stopping=False) and
    # ctranslate2's (patience) end the search at different points, and either may find the better-scoring translation
    for kwargs in (dict(length_penalty=0.0), dict(length_penalty=0.6), dict(max_length=2)):
        pytorch = load_translator(str(trained_folder)).translate(SENTENCES, num_beams=5, **kwargs)
        fast = load_translator(str(exported)).translate(SENTENCES, num_beams=5, **kwargs)
        assert [n[0].text for n in fast] == [n[0].text for n in pytorch], kwargs
        assert [n[0].tokens for n in fast] == [n[0].tokens for n in pytorch], kwargs  # at the limit: no </s>
    short = load_translator(str(exported)).translate(SENTENCES, num_beams=5, max_length=2)
    assert all(len(n[0].text.split()) <= 2 for n in short)


def test_more_best_translations_than_beams_is_refused(exported, trained_folder):
    for path in (exported, trained_folder):
        with pytest.raises(ValueError, match="n_best 3: beam search keeps only num_beams=2"):
            load_translator(str(path)).translate(SENTENCES, num_beams=2, n_best=3)


@pytest.mark.parametrize("num_beams", [1, 5])
def test_batches_translated_in_parallel_give_what_one_batch_at_a_time_gives(exported, num_beams):
    one = load_translator(str(exported), placement=Placement(threads=1))
    parallel = load_translator(str(exported), placement=Placement(threads=1, inter_threads=3))
    assert parallel.batch_share(len(SENTENCES), 32) == 3  # 8 sentences: three batches of at most 3
    assert parallel.batch_share(1000, 32) == 32 and parallel.batch_share(1, 32) == 1
    expected, got = (t.translate(SENTENCES, num_beams=num_beams, n_best=num_beams // 2 + 1) for t in (one, parallel))
    assert [[t.text for t in n] for n in got] == [[t.text for t in n] for n in expected]
    flat = lambda results: [t.score for n in results for t in n]  # noqa: E731
    assert flat(got) == pytest.approx(flat(expected), abs=1e-5)
    references = [n[0].text for n in expected]
    assert parallel.reference_log_probs(SENTENCES, references) == [
        pytest.approx(row, abs=1e-5) for row in one.reference_log_probs(SENTENCES, references)
    ]


def test_batches_in_parallel_are_refused_for_the_torch_engine(trained_folder):
    with pytest.raises(ValueError, match="inter_threads=2: batches in parallel need the CTranslate2 engine"):
        load_translator(str(trained_folder), placement=Placement(inter_threads=2))


def test_distinct_n_best_lists_hold_each_text_once_with_its_best_score():
    from vanilla_transformer.inference.options import Translation, distinct_texts

    hypotheses = [Translation("a b", -0.1), Translation("a b", -0.3), Translation("a c", -0.4), Translation("d", -0.9)]
    assert distinct_texts([hypotheses], 2) == [[Translation("a b", -0.1), Translation("a c", -0.4)]]


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_distinct_n_best_list_starts_with_the_translation_and_repeats_no_text(trained_folder, exported, engine):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    plain = translator.translate(SENTENCES, num_beams=4, n_best=4)
    distinct = translator.translate(SENTENCES, num_beams=4, n_best=3, distinct=True)
    for every, unique in zip(plain, distinct):
        assert unique[0] == every[0] and len({t.text for t in unique}) == len(unique) <= 3
        assert [t.text for t in unique] == list(dict.fromkeys(t.text for t in every))[:3]


PREFIXES = ["", "dreihundert", "zwei", "", "dreihundert drei", "drei", "", "vier"]  # 0 to 2 tokens, mixed


@pytest.mark.parametrize("num_beams", [1, 5])
def test_translations_go_on_from_their_prefixes_batched_as_alone(trained_folder, num_beams):
    ours = load_translator(str(trained_folder))
    plain = [t[0].text for t in ours.translate(SENTENCES, num_beams=num_beams)]
    given = [t[0].text for t in ours.translate(SENTENCES, num_beams=num_beams, prefix=PREFIXES)]
    assert all(text.startswith(p) for text, p in zip(given, PREFIXES))
    assert [g for g, p in zip(given, PREFIXES) if not p] == [t for t, p in zip(plain, PREFIXES) if not p]
    alone = [ours.translate([s], num_beams=num_beams, prefix=[p])[0][0].text for s, p in zip(SENTENCES, PREFIXES)]
    assert given == alone  # batched with prefixes of other lengths, or alone: the same


@pytest.mark.parametrize("num_beams", [1, 5])
def test_translations_from_prefixes_are_ctranslate2s_with_their_scores(trained_folder, exported, num_beams):
    """The prefix's tokens count in a translation's score in both (CTranslate2's target_prefix; fairseq's
    --prefix-size); CTranslate2's patience 1 is the stopping rule of the package's search (fairseq's). A sentence
    without a prefix is translated as without the option, by generate()'s search."""
    ours, theirs = load_translator(str(trained_folder)), load_translator(str(exported))
    given = ours.translate(SENTENCES, num_beams=num_beams, n_best=num_beams, prefix=PREFIXES)
    expected = theirs.translate(SENTENCES, num_beams=num_beams, n_best=num_beams, prefix=PREFIXES, patience=1)
    plain = ours.translate(SENTENCES, num_beams=num_beams, n_best=num_beams)
    assert [g for g, p in zip(given, PREFIXES) if not p] == [t for t, p in zip(plain, PREFIXES) if not p]
    for a, b in (pair for pair, p in zip(zip(given, expected), PREFIXES) if p):
        assert [t.text for t in a] == [t.text for t in b]
        assert [t.score for t in a] == pytest.approx([t.score for t in b], abs=1e-4)


def test_a_prefix_per_sentence_is_required(trained_folder):
    with pytest.raises(ValueError, match="2 prefixes for 1 sentences"):
        load_translator(str(trained_folder)).translate(["one"], prefix=["eins", "zwei"])


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_each_sentence_gets_the_length_limit_of_its_source_batched_as_alone(trained_folder, exported, engine):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    sources = [english(n) for n in (101, 7, 254, 305000, 42)]
    guards = Guards(max_len_a=0.5, max_len_b=1)
    together = translator.translate(sources, num_beams=2, guards=guards)
    source_lengths = [len(row) for row in translator.tokenizer(sources)["input_ids"]]
    for source, length, [translation] in zip(sources, source_lengths, together):
        limit = int(0.5 * length + 1)
        new_tokens = translator.tokenizer(text_target=[translation.text])["input_ids"][0][:-1]  # without </s>
        assert len(new_tokens) <= limit
        assert translation.at_limit == (len(new_tokens) == limit)  # stopped there, not ended
        [[alone]] = translator.translate([source], num_beams=2, guards=guards)
        assert alone == translation
    assert any(translation.at_limit for [translation] in together)


def test_both_engines_block_repeated_ngrams_alike(trained_folder, exported):
    """Neither engine writes a bigram twice. Greedy search chooses alike; beam search may not, as docs/tools.md
    says: generate() blocks a token in the log-probabilities it ranks by, CTranslate2 in the logits before the
    softmax, so that the other tokens' share differs."""
    sources = [english(n) for n in (101, 152, 203, 777777, 42, 999999)]
    guards = Guards(no_repeat_ngram_size=2)
    translators = load_translator(str(trained_folder)), load_translator(str(exported))
    tokenizer = translators[0].tokenizer
    for beams in (1, 3):
        ours, theirs = (translator.translate(sources, num_beams=beams, guards=guards) for translator in translators)
        for [translation] in ours + theirs:
            ids = tokenizer(text_target=[translation.text])["input_ids"][0]
            bigrams = list(zip(ids, ids[1:]))
            assert len(bigrams) == len(set(bigrams)), (beams, translation.text)
        if beams == 1:
            assert [a.text for [a] in ours] == [b.text for [b] in theirs]
            unguarded = translators[0].translate(sources, num_beams=1)
            assert [a.text for [a] in ours] != [u.text for [u] in unguarded]  # the model repeats itself unguarded


def repeated_tokens(tokenizer, texts: list[str]) -> int:
    rows = tokenizer(text_target=texts)["input_ids"]
    return sum(len(row) - len(set(row)) for row in rows)


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_repetition_penalty_makes_fewer_repeated_tokens(trained_folder, exported, engine):
    """Each engine applies its library's rule (generate()'s divides the log-probabilities it ranks by, the decoder's
    start counted; CTranslate2's the logits), so the two need not agree token for token."""
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    sources = [english(n) for n in (101, 152, 203, 777777, 42, 999999)]
    plain = [t.text for [t] in translator.translate(sources, num_beams=3)]
    penalised = [t.text for [t] in translator.translate(sources, num_beams=3, guards=Guards(repetition_penalty=2))]
    assert repeated_tokens(translator.tokenizer, penalised) < repeated_tokens(translator.tokenizer, plain)
    with pytest.raises(ValueError, match="repetition_penalty"):
        translator.translate(sources[:1], guards=Guards(repetition_penalty=0))


def test_the_translate_command_warns_of_a_translation_stopped_at_its_limit(trained_folder, capsys):
    from vanilla_transformer.cli import main

    assert main(["translate", "--model", str(trained_folder), "--max-length", "2", english(777777)]) == 0
    assert "warning: sentence 1: the translation stopped at its length limit" in capsys.readouterr().err
    assert main(["translate", "--model", str(trained_folder), english(7)]) == 0
    assert "length limit" not in capsys.readouterr().err


def test_a_limit_of_one_token_stops_a_longer_translation_and_says_so(trained_folder):
    """docs/tools.md's example of a guard."""
    [[translation]] = load_translator(str(trained_folder)).translate(
        ["seven hundred thousand"], guards=Guards(max_len_b=1)
    )
    assert translation.at_limit


def test_a_prefix_that_leaves_no_room_in_the_positions_is_named(learned_folder):
    translator = load_translator(str(learned_folder))
    long_prefix = " ".join(["siebenhundertelf"] * 12)
    with pytest.raises(ValueError, match=r"sentence 2: the prefix has \d+ tokens; the model writes at most 18"):
        translator.translate(["one", "two"], prefix=["eins", long_prefix])
    [[translation]] = translator.translate(["one"], prefix=["eins"], max_length=100)  # cut to the positions
    assert translation.text.startswith("eins")


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_sentences_must_be_a_list_of_strings(trained_folder, exported, engine):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    with pytest.raises(TypeError, match="sentences must be a list of strings, got 'forty-two': put one sentence in"):
        translator.translate("forty-two")
    with pytest.raises(ValueError, match="sentence 2: sentences must be strings, got None"):
        translator.translate(["one", None])
    with pytest.raises(TypeError, match="options must be a SearchOptions or None, got {'num_beams': 2}"):
        translator.translate(["one"], {"num_beams": 2})


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_prefix_with_a_token_the_vocabulary_lacks_is_named(trained_folder, exported, engine):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    with pytest.raises(ValueError, match=r"sentence 2: the prefix '日本語' has a token the target vocabulary lacks"):
        translator.translate(["one", "two"], prefix=["eins", "日本語"])
    for prefix in ("<pad>", "drei</s>vier", "</s>", "<s>"):
        # a special token's text is text (here, characters the vocabulary lacks), not the token: the search would go
        # on from that as from no text (an empty translation, a prefix cut short, or no end)
        lacks = f"sentence 1: the prefix '{prefix}' has a token the target vocabulary lacks \\(<unk>\\)"
        with pytest.raises(ValueError, match=lacks):
            translator.translate(["forty-two"], num_beams=2, prefix=[prefix])


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_special_tokens_text_in_a_sentence_is_read_as_text(trained_folder, exported, engine):
    """As Marian's SentencePiece and fairseq's Moses tokenizer read it: a `</s>` in a source does not end it, nor does
    a `<pad>` put padding inside it. Here their characters are ones the vocabulary lacks, as `|` is: each sentence
    is translated as the same sentence with `|` in their place."""
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    sources = ["seven </s> forty-two", "three <pad> thousand", "<s> nine", "<unk>"]
    alike = [re.sub("[</>]", "|", source) for source in sources]
    found, expected = translator.translate(sources, num_beams=2), translator.translate(alike, num_beams=2)
    assert [[t.text for t in n] for n in found] == [[t.text for t in n] for n in expected]
    assert all(same(a, b) for n, m in zip(found, expected) for a, b in zip(n, m))


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
@pytest.mark.parametrize("size", [0, -1, 1.5])
def test_scores_need_a_positive_whole_batch_size(trained_folder, exported, engine, size):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    with pytest.raises(ValueError, match=rf"batch_size \({size}\) must be"):
        translator.score(["one"], ["eins"], batch_size=size)
    with pytest.raises(TypeError, match="targets must be a list of strings"):
        translator.score(["one"], "eins")


def same(translation: Translation, other: Translation) -> bool:
    """The same text and limit, and the same score to float32's last bits: beside other sentences in a batch, or on
    one thread, the kernels may round it otherwise."""
    score = other.score if other.score is None else pytest.approx(other.score, rel=1e-5, abs=1e-6)
    return replace(translation, score=score) == other


EXAMPLE = "examples/numbers-en-de"  # the committed model, whose beam search differs from the package's here


@pytest.mark.parametrize("none", [{"prefix": [""]}, {"prefix": ["  "]}, {"prefix": [None]}, {"terms": [[]]}])
def test_a_sentence_without_a_prefix_or_terms_is_translated_as_without_the_option(none):
    translator = load_translator(EXAMPLE)
    sentence = "fifty-seven thousand five and so on blah"  # generate()'s search and the package's part ways here
    [[plain]] = translator.translate([sentence], num_beams=2, scores=True)
    assert translator.translate([sentence], num_beams=2, scores=True, **none) == [[plain]]
    name, [value] = next(iter(none.items()))
    other = "sieben" if name == "prefix" else ["sieben"]
    [[given], [beside]] = translator.translate([sentence, "seven"], num_beams=2, scores=True, **{name: [value, other]})
    assert same(given, plain) and beside.text.startswith("sieben")  # whatever the other sentences are given


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_prefix_given_to_another_sentence_leaves_a_sentences_length_limit_as_it_was(trained_folder, exported, engine):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    sources, prefix = [english(399), english(7)], ["", "dreihundertneunundneunzig"]
    [[alone], _] = translator.translate(sources, num_beams=2, max_length=2)
    [[given], [other]] = translator.translate(sources, num_beams=2, max_length=2, prefix=prefix)
    assert same(given, alone) and given.at_limit  # two new tokens, not two and the other's prefix
    assert other.text.startswith("dreihundertneunundneunzig")


def test_an_exported_models_prefix_past_its_positions_is_named(exported):
    translator = load_translator(str(exported))
    too_long = " ".join(["sieben"] * (translator.max_positions + 10))
    with pytest.raises(ValueError, match=r"sentence 2: the prefix has \d+ tokens; the model writes at most"):
        translator.translate(["one", "two"], prefix=["eins", too_long])


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_no_pairs_score_to_none_and_a_pair_cut_to_the_positions_is_named(trained_folder, exported, engine, capsys):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    assert translator.score([], []) == []
    if engine == "torch":
        assert translator.align([], []) == []
        return
    long = " ".join(["sieben"] * (translator.max_positions + 10))
    [score] = translator.score(["seven"], [long])
    assert len(score.tokens) == translator.max_positions and "truncated to" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_string_that_is_not_unicode_text_is_named(trained_folder, exported, engine):
    translator = load_translator(str(exported if engine == "ctranslate2" else trained_folder))
    with pytest.raises(ValueError, match=r"sentence 2: not Unicode text: '\\ud800' at character 6 is a lone surr"):
        translator.translate(["one", "seven\ud800"])
    with pytest.raises(ValueError, match=r"prefix\[0\]: not Unicode text: '\\udcff' at character 1"):
        translator.translate(["one"], prefix=["\udcff"])
    with pytest.raises(ValueError, match="sentence 1: not Unicode text"):
        translator.score(["one"], ["eins\ud800"])


def test_repetition_guards_with_prefixes_are_refused_whatever_the_prefixes(trained_folder):
    """The package's own search, which prefixes and terms take, has no such guard: refused before any search, not
    once a sentence with a prefix comes."""
    translator = load_translator(str(trained_folder))
    for prefix in (["", ""], ["", "zwei"]):
        with pytest.raises(ValueError, match="no_repeat_ngram_size and repetition_penalty apply to generate"):
            translator.translate(["one", "two"], prefix=prefix, guards=Guards(no_repeat_ngram_size=2))
