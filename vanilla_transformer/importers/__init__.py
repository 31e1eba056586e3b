"""The importers of trained models of other implementations of the same architecture, one module per source, and
the one table of them: `IMPORTERS` maps each kind that `import_checkpoint` and `vanilla-transformer import --from`
accept to its `Importer` (the function that reads the source, and what the source is, as the model card names it);
`KINDS` is the kinds, in order. The mapping every importer shares is in `mapping`."""

from collections.abc import Callable
from typing import NamedTuple

from .fairseq import import_fairseq
from .fsmt import import_fsmt
from .mapping import CheckpointImportError
from .marian import import_marian


class Importer(NamedTuple):
    """One source: `read(source, trust_pickle)` returns the model, its tokenizer and the source's generation
    settings; `description` names the source in the model card; `hub_base_model` says whether a SOURCE that is no
    local path is a Hub id the card names as its base model (the Hub repository of a transformers model);
    `model_type` is the `model_type` of a model folder that this importer brings in (None: the source is no model
    folder); `takes_languages`: `read` also takes `languages`, (source, target), for a source that may not name them;
    `tokenizer_files`: the files a source folder's tokenizer cannot load without (named before it is read), unless
    the folder holds a fast tokenizer's `tokenizer.json`; `tokenizer_files_when`, those it needs where its
    tokenizer_config.json sets a setting."""

    read: Callable
    description: str
    hub_base_model: bool
    model_type: str | None
    takes_languages: bool = False
    tokenizer_files: tuple[str, ...] = ()
    tokenizer_files_when: tuple[tuple[str, str], ...] = ()  # (setting, file): the file needed where the setting is on


IMPORTERS = {
    "marian": Importer(
        import_marian,
        "MarianMTModel (transformers)",
        hub_base_model=True,
        model_type="marian",
        tokenizer_files=("source.spm", "target.spm", "vocab.json"),
        tokenizer_files_when=(("separate_vocabs", "target_vocab.json"),),
    ),
    "fsmt": Importer(
        import_fsmt,
        "FSMTForConditionalGeneration (transformers)",
        hub_base_model=True,
        model_type="fsmt",
        tokenizer_files=("vocab-src.json", "vocab-tgt.json", "merges.txt"),
    ),
    "fairseq": Importer(
        import_fairseq,
        "a fairseq translation Transformer checkpoint",
        hub_base_model=False,
        model_type=None,
        takes_languages=True,
    ),
}
KINDS = tuple(IMPORTERS)

__all__ = ["IMPORTERS", "KINDS", "Importer", "CheckpointImportError"]
