"""The server's settings, each default written once, with its flag's help: `serve` makes its flags from these
fields and builds the settings from them by keyword."""

import os
from dataclasses import dataclass, field

from ..inference.devices import DEVICE_HELP, DTYPE_HELP, DTYPES, MOST_THREADS, Placement
from ..inference.options import ENGINES, MAX_BEAMS, SearchOptions


def setting(default, help: str, **flag):
    """A field of the server's settings with its flag's help (and `choices`, or `positive` for a number that must be
    above 0, `non_negative` for one that may be 0; any other number must be finite; `beams` for a beam size,
    `length_penalty` for one; `most`, the largest number and why): the one place its default is written, which
    `serve`'s flags read."""
    return field(default=default, metadata={"help": help, **flag})


@dataclass(frozen=True)
class EngineSettings:
    model: str = setting(None, "a model folder or an exported CTranslate2 folder")
    engine: str = setting("auto", "what runs the model: auto is CTranslate2 for an export and torch for a model "
                          "folder; ctranslate2 on a model folder exports it first, into a temporary folder",
                          choices=ENGINES)  # fmt: skip
    device: str = setting("auto", DEVICE_HELP)
    dtype: str = setting("auto", DTYPE_HELP, choices=("auto", *DTYPES))
    compute_type: str = setting("default", "the CTranslate2 engine's precision, in its names (default: the export's; "
                                "on CUDA float16 or int8_float16)")  # fmt: skip
    threads: int | None = setting(None, "the engine's CPU threads (default: every core)", positive=True)
    num_beams: int | None = setting(None, "beam size (default: the model's generation config)", beams=True)
    length_penalty: float | None = setting(None, "default: the model's generation config", length_penalty=True)
    max_length: int = setting(256, "most new tokens per sentence", positive=True)
    max_sentence_tokens: int = setting(256, "longer sentences are refused with 413 (and at most the model's "
                                       "positions)", positive=True)  # fmt: skip
    source_lang: str | None = setting(None, "the model's source language (default: its model card's)")
    target_lang: str | None = setting(None, "the model's target language (default: its model card's)")

    @property
    def placement(self) -> Placement:
        """Every core unless told: the event loop's thread mostly waits."""
        threads = self.threads or min(os.cpu_count() or 1, MOST_THREADS)
        return Placement(self.device, self.dtype, self.compute_type, threads)

    def search(self, translator, n_best: int, terms) -> SearchOptions:
        """A batch's search: the settings' beams (at least n_best), length and batch, distinct alternatives."""
        beams = max(self.num_beams or translator.generation_config.num_beams or 1, n_best)
        return SearchOptions(num_beams=beams, length_penalty=self.length_penalty, max_length=self.max_length,
                             n_best=n_best, distinct=n_best > 1, terms=terms, batch_size=1 << 30)  # fmt: skip


@dataclass(frozen=True)
class ServerSettings:
    """The queue's, the requests' and the connections' limits: each default written once, here, with its flag's
    help (`serve` makes its flags from these fields)."""

    max_batch_tokens: int = setting(4096, "source tokens per batch", positive=True)
    max_wait_ms: float = setting(10.0, "the longest a batch's first sentence waits for others", non_negative=True)
    max_queue_tokens: int = setting(65536, "source tokens waiting beyond which 429", positive=True)
    max_queue_requests: int = setting(1024, "unanswered requests beyond which 429", positive=True)
    max_chars: int = setting(20000, "characters of one request (413 beyond)", positive=True)
    max_alternatives: int = setting(4, "the most `alternatives` a request may ask (each one beam more)",
                                    non_negative=True, most=(MAX_BEAMS - 1, f"one beam less than {MAX_BEAMS}, "
                                                                            "the most a search has"))  # fmt: skip
    timeout: float = setting(60.0, "seconds a request may wait (504 beyond)", positive=True)
    drain_timeout: float = setting(30.0, "seconds to answer the queued requests on SIGTERM", non_negative=True)
    read_timeout: float = setting(15.0, "seconds a client may take to send a request's headers (then 408 and the "
                                  "connection closed), and again its body (408)", positive=True)  # fmt: skip
    keep_alive_timeout: float = setting(5.0, "seconds an idle connection stays open between requests (behind a "
                                        "reverse proxy that keeps connections to the server open: more than the "
                                        "proxy's idle timeout)", positive=True)  # fmt: skip
    limit_concurrency: int = setting(2048, "requests in progress at once, beyond which 503 (the queue's own limits "
                                     "answer 429)", positive=True)  # fmt: skip

    @property
    def max_body_bytes(self) -> int:
        """The largest body read: room for `max_chars` characters each escaped in JSON (12 bytes for a character
        outside the BMP), and the other fields; `max_chars` stays the limit a client meets."""
        return 12 * self.max_chars + 65536
