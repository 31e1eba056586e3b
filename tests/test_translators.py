"""Translating through either backend: the same arguments, the same translations, the same n-best lists and scores."""

import pytest
from vanilla_transformer.training.tasks.numbers import english

from vanilla_transformer.ctranslate2_export import export_ctranslate2
from vanilla_transformer.translators import CTranslate2Translator, PyTorchTranslator, load_translator

SENTENCES = [english(n) for n in (101, 152, 203, 254, 305, 356, 399, 42)]


@pytest.fixture(scope="module")
def exported(trained_folder, tmp_path_factory):
    return export_ctranslate2(trained_folder, tmp_path_factory.mktemp("exported") / "ct2")


def test_the_backend_is_told_from_the_folder(trained_folder, exported):
    assert isinstance(load_translator(str(trained_folder)), PyTorchTranslator)
    assert isinstance(load_translator(str(exported)), CTranslate2Translator)
    with pytest.raises(ValueError, match="not a CTranslate2 model folder"):
        load_translator(str(trained_folder), backend="ctranslate2")
    with pytest.raises(ValueError, match="backend 'onnx'"):
        load_translator(str(trained_folder), backend="onnx")


@pytest.mark.parametrize("num_beams", [1, 5])
def test_both_backends_give_the_same_translations_and_scores(trained_folder, exported, num_beams):
    pytorch = load_translator(str(trained_folder)).translate(SENTENCES, num_beams=num_beams, batch_size=3, scores=True)
    fast = load_translator(str(exported), threads=1).translate(SENTENCES, num_beams=num_beams, batch_size=3)
    assert load_translator(str(trained_folder)).translate(SENTENCES[:1], num_beams=num_beams)[0][0].score is None
    assert [[t.text for t in n] for n in fast] == [[t.text for t in n] for n in pytorch]
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
    pytorch = load_translator(str(trained_folder)).translate(SENTENCES, num_beams=5, n_best=3)
    fast = load_translator(str(exported)).translate(SENTENCES, num_beams=5, n_best=3)
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
    short = load_translator(str(exported)).translate(SENTENCES, num_beams=5, max_length=2)
    assert all(len(n[0].text.split()) <= 2 for n in short)


def test_more_best_translations_than_beams_is_refused(exported, trained_folder):
    for path in (exported, trained_folder):
        with pytest.raises(ValueError, match="n_best 3: beam search keeps only num_beams=2"):
            load_translator(str(path)).translate(SENTENCES, num_beams=2, n_best=3)


@pytest.mark.parametrize("num_beams", [1, 5])
def test_batches_translated_in_parallel_give_what_one_batch_at_a_time_gives(exported, num_beams):
    one = load_translator(str(exported), threads=1)
    parallel = load_translator(str(exported), threads=1, inter_threads=3)
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


def test_batches_in_parallel_are_refused_for_the_pytorch_backend(trained_folder):
    with pytest.raises(ValueError, match="inter_threads=2: batches in parallel need the CTranslate2 backend"):
        load_translator(str(trained_folder), inter_threads=2)
