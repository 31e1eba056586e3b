"""Translation metrics with sacreBLEU: BLEU and chrF (cased and lowercased), plus exact match, overall and per group
(the embedded task groups its numbers by digit count). `MetricSums` takes a corpus in parts and keeps only each
metric's summed sufficient statistics (sacreBLEU's own: n-gram matches and totals, lengths), so that a split of any
size is scored in bounded memory, to the same figures as the whole corpus at once."""

import warnings

import sacrebleu
from sacrebleu.utils import sum_of_lists

METRICS = {
    "bleu": lambda language: bleu(language),
    "bleu_lowercase": lambda language: bleu(language, lowercase=True),
    "chrf": lambda language: sacrebleu.metrics.CHRF(),
    "chrf_lowercase": lambda language: sacrebleu.metrics.CHRF(lowercase=True),
}


def bleu(target_lang: str | None, lowercase: bool = False) -> sacrebleu.metrics.BLEU:
    """sacreBLEU's BLEU with the tokenizer it chooses for the target language (as `sacrebleu -l SRC-TGT`: zh, and
    MeCab's for ja and ko; 13a for the rest). Where MeCab is not installed, 13a, with a warning (its signature says
    which tokenizer scored)."""
    try:
        return sacrebleu.metrics.BLEU(lowercase=lowercase, trg_lang=target_lang or "")
    except (ImportError, RuntimeError):  # ja, ko: MeCab, which sacrebleu[ja] or sacrebleu[ko] installs
        warnings.warn(f"BLEU of {target_lang} text is tokenised with 13a: its own tokenizer needs "
                      f"sacrebleu[{target_lang}]", stacklevel=2)  # fmt: skip
        return sacrebleu.metrics.BLEU(lowercase=lowercase, tokenize="13a")


class MetricSums:
    """BLEU, chrF and exact match over the parts given to `add`, in any number of parts; BLEU tokenised for
    `target_lang` (`bleu`)."""

    def __init__(self, target_lang: str | None = None):
        self.metrics = {name: make(target_lang) for name, make in METRICS.items()}
        self.sums: dict[str, list] = {}
        self.exact: dict = {}  # group (None: no groups) -> (exact matches, sentences)

    def add(self, hypotheses: list[str], references: list[str], groups: list | None = None) -> "MetricSums":
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references.")
        if not hypotheses:
            return self
        for name, metric in self.metrics.items():
            stats = metric._extract_corpus_statistics(hypotheses, [references])
            self.sums[name] = sum_of_lists(stats + ([self.sums[name]] if name in self.sums else []))
        groups = groups if groups is not None else [None] * len(hypotheses)
        for hypothesis, reference, group in zip(hypotheses, references, groups, strict=True):
            hits, count = self.exact.get(group, (0, 0))
            self.exact[group] = (hits + (hypothesis.strip() == reference.strip()), count + 1)
        return self

    def result(self) -> dict:
        """The figures of `translation_metrics`; with groups, exact match first, then per group, then the rest."""
        scores = {name: self.score(name) for name in self.metrics}
        hits, count = (sum(values) for values in zip(*self.exact.values())) if self.exact else (0, 0)
        exact = round(100 * hits / max(1, count), 2)
        signatures = {f"{name}_signature": str(metric.get_signature()) for name, metric in self.metrics.items()}
        if None in self.exact or not self.exact:
            return {**scores, "exact_match": exact, **signatures}
        by_group = {str(group): round(100 * h / c, 2) for group, (h, c) in sorted(self.exact.items())}
        return {"exact_match": exact, "exact_match_by_digits": by_group, **scores, **signatures}

    def score(self, name: str) -> float:
        metric = self.metrics[name]
        if name not in self.sums:  # nothing added: sacreBLEU's own figure for an empty corpus
            return round(metric.corpus_score([], [[]]).score, 2)
        return round(metric._compute_score_from_stats(self.sums[name]).score, 2)


def translation_metrics(
    hypotheses: list[str], references: list[str], target_lang: str | None = None
) -> dict[str, float | str]:
    """The scores of a whole corpus at once."""
    return MetricSums(target_lang).add(hypotheses, references).result()
