"""The scores of a corpus given in parts: the same figures as sacreBLEU's on the whole corpus at once."""

import random

import pytest
import sacrebleu
from vanilla_transformer.training.report.metrics import MetricSums, translation_metrics

WORDS = "a man in a blue shirt is standing on a ladder cleaning windows two dogs run across the grass".split()


def corpus(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """References of varied lengths and hypotheses that keep, drop, swap or change some of their words."""
    rng = random.Random(seed)
    references, hypotheses = [], []
    for _ in range(count):
        reference = [rng.choice(WORDS) for _ in range(rng.randint(1, 14))]
        hypothesis = [w if rng.random() < 0.8 else rng.choice(WORDS).upper() for w in reference if rng.random() < 0.9]
        references.append(" ".join(reference))
        hypotheses.append(" ".join(hypothesis) if rng.random() < 0.9 else " ".join(reference))
    return hypotheses, references


def test_the_whole_corpus_scores_as_sacrebleu_does():
    hypotheses, references = corpus(200)
    scores = translation_metrics(hypotheses, references)
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
    assert scores["bleu_lowercase"] == round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score, 2)
    assert scores["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
    assert scores["bleu_lowercase"] > scores["bleu"] > 0  # the upper-cased words count only when lowercased
    exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    assert scores["exact_match"] == round(100 * exact, 2) > 0
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed")


@pytest.mark.parametrize("part", [1, 7, 64])
def test_a_corpus_in_parts_scores_as_the_whole(part):
    hypotheses, references = corpus(200, seed=1)
    sums = MetricSums()
    for start in range(0, len(references), part):
        sums.add(hypotheses[start : start + part], references[start : start + part])
    assert sums.result() == translation_metrics(hypotheses, references)


def test_groups_give_exact_match_per_group_first():
    hypotheses, references = ["eins", "zwei", "drei", "vier"], ["eins", "zwei", "dreI", "fünf"]
    sums = MetricSums().add(hypotheses[:3], references[:3], [1, 1, 2]).add(hypotheses[3:], references[3:], [2])
    scores = sums.result()
    assert list(scores)[:3] == ["exact_match", "exact_match_by_digits", "bleu"]
    assert scores["exact_match"] == 50.0 and scores["exact_match_by_digits"] == {"1": 100.0, "2": 0.0}


def test_parts_of_different_lengths_are_named():
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        MetricSums().add(["a", "b"], ["a"])


def test_bleu_is_tokenised_for_the_target_language_as_sacrebleu_chooses():
    hypotheses = ["我喜欢吃苹果和香蕉。", "他们在公园里跑步。"]
    references = ["我喜欢吃苹果和梨。", "他们在公园里散步。"]
    chinese = translation_metrics(hypotheses, references, target_lang="zh")
    assert chinese["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references], tokenize="zh").score, 2) > 30
    assert "tok:zh" in chinese["bleu_signature"] and "tok:zh" in chinese["bleu_lowercase_signature"]
    assert translation_metrics(hypotheses, references)["bleu"] == 0  # 13a: each sentence one word
    assert "tok:13a" in translation_metrics(*corpus(5), target_lang="de")["bleu_signature"]


def test_bleu_without_the_target_languages_tokenizer_installed_says_it_scored_with_13a():
    try:
        sacrebleu.metrics.BLEU(trg_lang="ja")
        pytest.skip("MeCab is installed: Japanese is tokenised with it")
    except (ImportError, RuntimeError):
        pass
    with pytest.warns(UserWarning, match=r"BLEU of ja text is tokenised with 13a: .* needs sacrebleu\[ja\]"):
        scores = translation_metrics(*corpus(5), target_lang="ja")
    assert "tok:13a" in scores["bleu_signature"]
