"""The model behind the server: a translator (PyTorch's `generate()` or CTranslate2), its languages, its search
settings and its limits, loaded once and warmed up."""

import atexit
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..configuration import position_limit
from ..exports.ctranslate2 import export_ctranslate2, is_ctranslate2_folder
from ..inference.translators import CTranslate2Translator, PyTorchTranslator, Translator, engine_of
from ..model_folder import card_languages
from .settings import EngineSettings


class Engine:
    """`translate(sentences, n_best, terms)` (from the worker thread), `score(sources, targets)` and
    `count_tokens(texts)` on one translator."""

    def __init__(self, translator: Translator, settings: EngineSettings, languages: tuple[str, str], limit: int):
        self.translator, self.settings = translator, settings
        self.source_lang, self.target_lang = languages
        self.max_sentence_tokens = limit
        self.name, self.capabilities = translator.name, translator.capabilities

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.translator.count_tokens(texts)

    def translate(self, sentences: list[str], n_best: int = 1, terms: list[list[str]] | None = None):
        """Each sentence's n_best translations (alternatives are texts: two segmentations of one string are one)."""
        with torch.inference_mode():
            return self.translator.translate(sentences, self.settings.search(self.translator, n_best, terms))

    def check_terms(self, terms: list[list[str]]) -> None:
        """An `UnsupportedError` where the engine has no constrained search, a ValueError naming a term the model
        cannot write, or a text whose terms cannot all fit in its translation (checked before the text is queued:
        an error in a batch would fail every request in it)."""
        self.translator.require("terms")
        limit = position_limit(self.translator.model.config)
        room = self.settings.max_length if limit is None else min(self.settings.max_length, limit - 1)
        self.translator.term_ids(terms, [room] * len(terms))

    def score(self, sources: list[str], targets: list[str]):
        """Each pair's `PairScore` (see `vanilla_transformer.inference.scoring`), in one batch."""
        with torch.inference_mode():
            return self.translator.score(sources, targets, batch_size=max(1, len(sources)))

    def warm_up(self) -> None:
        """One translation, so that the first request does not pay for the first call's setup."""
        self.translate(["warm up"])


def load_engine(settings: EngineSettings) -> Engine:
    """The translator of `settings.model`, exporting a model folder to CTranslate2 (`export_on_the_fly`) when
    `engine` is ctranslate2; a ValueError names what is missing."""
    if engine_of(settings.model, settings.engine) == "ctranslate2":
        exported = is_ctranslate2_folder(settings.model)
        folder = settings.model if exported else export_on_the_fly(settings.model)
        translator = CTranslate2Translator(folder, settings.placement)
        limit = translator.max_positions
    else:
        translator = PyTorchTranslator.from_folder(settings.model, settings.placement)
        limit = position_limit(translator.model.config)
    limit = min(settings.max_sentence_tokens, limit or settings.max_sentence_tokens)
    return Engine(translator, settings, languages(settings), limit)


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
    """The source and target languages: the flags, else the model card's (`language: [source, target]`); a
    ValueError names a flag or card whose code is not one."""
    card = card_languages(settings.model) or (None, None)
    source = chosen_language(settings.source_lang, "--source-lang", card[0], settings.model)
    target = chosen_language(settings.target_lang, "--target-lang", card[1], settings.model)
    if not source or not target:
        raise ValueError(
            f"{settings.model}: its languages are not in a model card (README.md with `language: [source, target]`); "
            "give them with --source-lang and --target-lang"
        )
    return source, target


def chosen_language(given: str | None, flag: str, carded: str | None, model: str) -> str | None:
    """The flag's code, else the card's; a ValueError naming whichever is used where it is not a code."""
    if given is not None:
        check_language(given, flag)
        return given
    if carded is not None:
        check_language(carded, f"{model}: its card's language")
    return carded


def check_language(code: str, where: str) -> None:
    """A ValueError, starting with `where`, for a code that no request could name: empty, with spaces, or `auto`
    (which a request gives as its source to have it detected)."""
    if not code or any(character.isspace() for character in code) or code == "auto":
        raise ValueError(f"{where} {code!r}: expected a language code such as en or pt-BR (auto is for requests: "
                         "detect the language)")  # fmt: skip
