"""The model behind the server: a translator (PyTorch's `generate()` or CTranslate2), its languages, its search
settings and its limits, loaded once and warmed up."""

import atexit
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..configuration import position_limit
from ..exports.ctranslate2 import export_ctranslate2, is_ctranslate2_folder
from ..inference.translators import CTranslate2Translator, PyTorchTranslator
from ..model_folder import card_languages

ENGINES = ("auto", "torch", "ctranslate2")


@dataclass(frozen=True)
class EngineSettings:
    model: str  # a model folder or a CTranslate2 export
    engine: str = "auto"  # auto: CTranslate2 for an export, torch for a model folder
    threads: int | None = None  # the engine's computation threads (default: every core)
    num_beams: int | None = None  # default: the model's generation config
    length_penalty: float | None = None
    max_length: int = 256  # most new tokens per sentence
    max_sentence_tokens: int = 256  # longer sentences are refused (413)
    source_lang: str | None = None  # default: the model card's languages
    target_lang: str | None = None


class Engine:
    """`translate(sentences, n_best)` (from the worker thread), `score(sources, targets)` and `count_tokens(texts)`
    on one translator."""

    def __init__(self, translator, settings: EngineSettings, source_lang: str, target_lang: str, limit: int):
        self.translator, self.settings = translator, settings
        self.source_lang, self.target_lang = source_lang, target_lang
        self.max_sentence_tokens = limit
        self.name = "torch" if translator.backend == "pytorch" else "ctranslate2"

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.translator.tokenizer(texts, add_special_tokens=True)["input_ids"]]

    def translate(self, sentences: list[str], n_best: int = 1, terms: list[list[str]] | None = None):
        beams = max(self.settings.num_beams or self.translator.generation_config.num_beams or 1, n_best)
        with torch.inference_mode():
            return self.translator.translate(
                sentences,
                num_beams=beams,
                length_penalty=self.settings.length_penalty,
                max_length=self.settings.max_length,
                n_best=n_best,
                batch_size=len(sentences),
                scores=n_best > 1,
                distinct=n_best > 1,  # alternatives are texts: two segmentations of one string are one
                **({"constraints": terms} if terms is not None else {}),
            )

    def check_terms(self, terms: list[list[str]]) -> None:
        """A ValueError naming a term the model cannot write, or the engine that has no constrained search."""
        if self.name != "torch":
            raise ValueError("the CTranslate2 engine has no lexically constrained search: serve the model folder")
        self.translator.term_ids(terms, len(terms), None)

    def score(self, sources: list[str], targets: list[str]):
        """Each pair's `PairScore` (see `vanilla_transformer.inference.scoring`), in one batch."""
        with torch.inference_mode():
            return self.translator.score(sources, targets, batch_size=max(1, len(sources)))

    def warm_up(self) -> None:
        """One translation, so that the first request does not pay for the first call's setup."""
        self.translate(["warm up"])


def engine_threads(threads: int | None) -> int:
    """The engine's threads: every core unless told; the event loop's thread mostly waits."""
    return threads or os.cpu_count() or 1


def load_engine(settings: EngineSettings) -> Engine:
    """The translator of `settings.model`, exporting a model folder to CTranslate2 (`export_on_the_fly`) when
    `engine` is ctranslate2; a ValueError names what is missing."""
    threads = engine_threads(settings.threads)
    exported = is_ctranslate2_folder(settings.model)
    if settings.engine == "torch" and exported:
        raise ValueError(f"{settings.model} is a CTranslate2 export: serve it with --engine ctranslate2 (or auto)")
    if settings.engine == "ctranslate2" or exported:
        folder = settings.model if exported else export_on_the_fly(settings.model)
        translator = CTranslate2Translator(folder, threads=threads)
        limit = translator.max_positions
    else:
        translator = PyTorchTranslator.from_folder(settings.model, threads=threads)
        limit = position_limit(translator.model.config)
    source, target = languages(settings)
    limit = min(settings.max_sentence_tokens, limit or settings.max_sentence_tokens)
    return Engine(translator, settings, source, target, limit)


def export_on_the_fly(model: str) -> str:
    """`model` exported to CTranslate2 in the temporary folder's `vanilla-transformer-ct2/DIGEST`, DIGEST the model
    folder's (`folder_digest`): written beside and renamed into place whole, reused by a later start on the same
    model (after a crash, say) and removed at a normal exit, so that crashes leave at most one export a model. The
    partial exports of processes that no longer run are removed."""
    root = Path(tempfile.gettempdir()) / "vanilla-transformer-ct2"
    root.mkdir(exist_ok=True)
    folder = root / folder_digest(model)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    if is_ctranslate2_folder(str(folder / "model")):
        return str(folder / "model")
    for partial in root.glob("*.partial-*"):
        if not process_runs(int(partial.name.rpartition("-")[2])):
            shutil.rmtree(partial, ignore_errors=True)
    partial = root / f"{folder.name}.partial-{os.getpid()}"
    export_ctranslate2(model, str(partial / "model"))
    shutil.rmtree(folder, ignore_errors=True)  # an incomplete folder of that name, if any
    os.replace(partial, folder)
    return str(folder / "model")


def folder_digest(model: str) -> str:
    """A digest of a model folder's files (their names and contents; not its sub-folders, such as checkpoints)."""
    digest = hashlib.sha256()
    for path in sorted(Path(model).iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0")
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()[:16]


def process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: no signal, only the check that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        pass
    return True


def languages(settings: EngineSettings) -> tuple[str, str]:
    """The source and target languages: the flags, else the model card's (`language: [source, target]`)."""
    card = card_languages(settings.model)
    source = settings.source_lang or (card[0] if card else None)
    target = settings.target_lang or (card[1] if card else None)
    if not source or not target:
        raise ValueError(
            f"{settings.model}: its languages are not in a model card (README.md with `language: [source, target]`); "
            "give them with --source-lang and --target-lang"
        )
    return source, target
