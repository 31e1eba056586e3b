"""Translation metrics with sacreBLEU: BLEU and chrF (cased and lowercased), plus exact match, overall and per group
(the embedded task groups its numbers by digit count). `MetricSums` takes a corpus in parts and keeps only each
metric's summed sufficient statistics (sacreBLEU's own: n-gram matches and totals, lengths), so that a split of any
size is scored in bounded memory, to the same figures as the whole corpus at once."""

import sacrebleu
from sacrebleu.utils import sum_of_lists

METRICS = {
    "bleu": lambda: sacrebleu.metrics.BLEU(),
    "bleu_lowercase": lambda: sacrebleu.metrics.BLEU(lowercase=True),
    "chrf": lambda: sacrebleu.metrics.CHRF(),
    "chrf_lowercase": lambda: sacrebleu.metrics.CHRF(lowercase=True),
}


class MetricSums:
    """BLEU, chrF and exact match over the parts given to `add`, in any number of parts."""

    def __init__(self):
        self.metrics = {name: make() for name, make in METRICS.items()}
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


def translation_metrics(hypotheses: list[str], references: list[str]) -> dict[str, float | str]:
    """The scores of a whole corpus at once."""
    return MetricSums().add(hypotheses, references).result()
