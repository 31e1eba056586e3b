"""Translation metrics with sacreBLEU: BLEU and chrF (cased and lowercased), plus exact match, overall and per group
(the embedded task groups its numbers by digit count)."""

import sacrebleu


def translation_metrics(hypotheses: list[str], references: list[str]) -> dict[str, float | str]:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references.")
    bleu = sacrebleu.metrics.BLEU()
    bleu_cased = bleu.corpus_score(hypotheses, [references])
    bleu_lc = sacrebleu.metrics.BLEU(lowercase=True)
    bleu_lower = bleu_lc.corpus_score(hypotheses, [references])
    chrf = sacrebleu.metrics.CHRF()
    chrf_score = chrf.corpus_score(hypotheses, [references])
    chrf_lc = sacrebleu.metrics.CHRF(lowercase=True)
    chrf_lower = chrf_lc.corpus_score(hypotheses, [references])
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / max(1, len(references))
    return {
        "bleu": round(bleu_cased.score, 2),
        "bleu_lowercase": round(bleu_lower.score, 2),
        "chrf": round(chrf_score.score, 2),
        "chrf_lowercase": round(chrf_lower.score, 2),
        "exact_match": round(100 * exact, 2),
        "bleu_signature": str(bleu.get_signature()),
        "bleu_lowercase_signature": str(bleu_lc.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "chrf_lowercase_signature": str(chrf_lc.get_signature()),
    }


def exact_match_by_group(hypotheses: list[str], references: list[str], groups: list) -> dict[str, float]:
    """Exact match in percent within each group, keyed by the group (as a string, for JSON), in sorted group order."""
    totals: dict = {}
    for hypothesis, reference, group in zip(hypotheses, references, groups, strict=True):
        hits, count = totals.get(group, (0, 0))
        totals[group] = (hits + (hypothesis.strip() == reference.strip()), count + 1)
    return {str(group): round(100 * hits / count, 2) for group, (hits, count) in sorted(totals.items())}
