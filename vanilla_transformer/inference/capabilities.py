"""What an engine can do beyond translating, declared by each (`Capabilities`), and the error of asking an engine
for what it cannot do (`UnsupportedError`): the commands and the server ask the declaration, never an engine's name."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do beyond translating (prefixes, n-best lists, guards and scores every engine has)."""

    terms: bool  # lexically constrained search (`SearchOptions.terms`)
    alignments: bool  # word alignments (`SearchOptions.alignment`, `align`)
    scoring: bool  # forced decoding of given translations (`score`)
    parallel_batches: bool  # several batches at once (`Placement.inter_threads`)


CAPABILITY_NAMES = {
    "terms": "lexically constrained search (terms)",
    "alignments": "word alignments (they come from the torch model's cross-attention)",
    "scoring": "scoring of given translations",
    "parallel_batches": "batches in parallel (inter_threads)",
}


class UnsupportedError(ValueError):
    """Asked of an engine what its `Capabilities` say it cannot do; `capability` names it."""

    def __init__(self, message: str, capability: str):
        super().__init__(message)
        self.capability = capability


__all__ = ["Capabilities", "CAPABILITY_NAMES", "UnsupportedError"]
