"""Self-contained model folders: code files next to the weights, an `auto_map`, a model card, and uploads.

A folder written by `VanillaTransformerPreTrainedModel.save_pretrained` loads with `trust_remote_code=True` in a Python
without the vanilla-transformer package: the remote-code loader of transformers imports the flat copies of the
configuration, modeling, kernels and this file that are written next to `config.json`, and `config.json`'s `auto_map`
names the classes. With the package installed the same folder loads without `trust_remote_code`.

`HubMixin` gives the model classes their loading, saving and uploading; the functions below do the work.

This file works unchanged in both layouts, inside the package and as a flat copy in a model folder: it imports neither
the configuration nor the modeling file, and finds the code files it copies next to itself.
"""

import os
import re
import sys
import tempfile

import torch
from huggingface_hub import CommitOperationAdd, HfApi, ModelCard, ModelCardData
from safetensors import SafetensorError
from transformers.utils import cached_file

CARD_FILE = "README.md"
GENERIC_MODEL_NAME = "vanilla-transformer translation model"
CONFIGURATION_FILE = "configuration_vanilla_transformer.py"
MODELING_FILE = "modeling_vanilla_transformer.py"
KERNELS_FILE = "kernels_vanilla_transformer.py"
HUB_FILE = "hub_vanilla_transformer.py"
CODE_FILES = (CONFIGURATION_FILE, MODELING_FILE, KERNELS_FILE, HUB_FILE)

AUTO_MAP = {
    "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
    "AutoModel": "modeling_vanilla_transformer.VanillaTransformerModel",
    "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
}

# Inside the package the configuration is a sibling package; in a model folder it sits next to the modeling file.
_PACKAGE_IMPORT = re.compile(r"^from \.\.configuration\.configuration_vanilla_transformer import", re.MULTILINE)
_FLAT_IMPORT = "from .configuration_vanilla_transformer import"


def flat_sources(config_module_file: str) -> dict[str, str]:
    """The text of each code file as it must be in a model folder, with package imports rewritten to flat ones. The
    modeling and kernels files sit next to this one, in the package as in a model folder."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = {name: os.path.join(here, name) for name in CODE_FILES}
    paths[CONFIGURATION_FILE] = config_module_file
    sources = {}
    for name, path in paths.items():
        with open(path, encoding="utf-8") as handle:
            sources[name] = _PACKAGE_IMPORT.sub(_FLAT_IMPORT, handle.read())
    return sources


def write_code_files(folder: str, config) -> list[str]:
    """Copy the configuration, modeling, kernels and hub code into `folder` as flat files; return their paths."""
    config_module_file = sys.modules[type(config).__module__].__file__
    written = []
    for name, text in flat_sources(config_module_file).items():
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written.append(path)
    return written


# What `from_pretrained` passes on to the download of the model card, as it does to that of config.json.
_HUB_ARGUMENTS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only", "subfolder")


def find_model_card(path_or_repo_id, hub_arguments: dict) -> str | None:
    """The text of the README.md model card of the local folder or Hub repository a model is loaded from, so that the
    model carries it into the folders it is saved to; None when there is none or it cannot be fetched (a model loads
    without its card)."""
    if path_or_repo_id is None:
        return None
    arguments = {key: hub_arguments[key] for key in _HUB_ARGUMENTS if hub_arguments.get(key) is not None}
    try:
        path = cached_file(
            str(path_or_repo_id),
            CARD_FILE,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            _raise_exceptions_for_gated_repo=False,
            **arguments,
        )
        if path is None:
            return None
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def weights_fingerprint(model) -> list[tuple[float, float]] | None:
    """A cheap summary of a model's weights, the sum and the sum of squares of each parameter, by which
    `card_for_saving` tells whether the model was changed (fine-tuned) after it was loaded with its card."""
    if any(p.device.type == "meta" for p in model.parameters()):
        return None
    with torch.no_grad():  # summed in float64 without a float64 copy of each parameter
        return [
            (float(p.sum(dtype=torch.float64)), float(p.square().sum(dtype=torch.float64))) for p in model.parameters()
        ]


def card_for_saving(model) -> str | None:
    """The card the model was loaded with, as long as its weights are still those it was loaded with: the measured
    scores of a card describe those weights only, so a model trained further gets the generic card instead."""
    card = getattr(model, "_model_card_text", None)
    if card is None or weights_fingerprint(model) != getattr(model, "_model_card_weights", None):
        return None
    return card


def write_model_card(folder: str, card_text: str | None, config, num_parameters: int) -> None:
    """Write `folder`'s README.md unless it has one: the card the model was loaded with (a training run's card, with
    its measured scores) or, for a model that never had one, the short `generic_card`."""
    path = os.path.join(folder, CARD_FILE)
    if os.path.exists(path):
        return
    if card_text is None:
        generic_card(config, num_parameters).save(path)
        return
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(card_text)


def generic_card(config, num_parameters: int) -> ModelCard:
    """The short card of a model that never had one: Hub metadata and the architecture from the config. A training
    run writes the full card, with the data, the procedure and the scores
    (`vanilla_transformer.training.report.card`)."""
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="translation",
        license="apache-2.0",
        tags=["translation", "vanilla-transformer", "transformer", "encoder-decoder"],
        model_name=GENERIC_MODEL_NAME,
    )
    norm = {"post": "post-norm", "pre": "pre-norm"}.get(config.norm_position, "no LayerNorm")
    text = (
        f"# {GENERIC_MODEL_NAME}\n\n"
        'An encoder-decoder Transformer of Vaswani et al. (2017), "Attention Is All You Need", as a `transformers` '
        "model of type `vanilla_transformer`, made with the [vanilla-transformer](https://pypi.org/project/"
        "vanilla-transformer/) plugin; without the plugin it loads with `trust_remote_code=True`.\n\n"
        "| d_model | h | d_ff | encoder layers | decoder layers | norm | positions | vocabulary | parameters |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        f"| {config.d_model} | {config.num_heads} | {config.d_ff} | {config.encoder_layers} | {config.decoder_layers} "
        f"| {norm} | {config.position_encoding} | {config.vocab_size} | {num_parameters:,} |\n\n"
        "Not evaluated: this folder was written by `save_pretrained` without evaluation results.\n"
    )
    changed = config.changed_switches()  # this folder's own configuration class, where remote code loads it
    if changed:  # a model a study took apart (`vanilla-transformer ablate`)
        text += f"\nNot the paper's model: a study of the architecture changed {changed} (see its config.json).\n"
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{text}")


def upload_folder(
    folder: str,
    repo_id: str,
    *,
    token=None,
    private=None,
    commit_message: str = "Upload model",
    revision=None,
    create_pr: bool = False,
):
    """Create the Hub repository if needed and upload, in one commit, the files at the top of `folder`: a training
    run's checkpoints, resumption tokenizer and tracker logs live in sub-folders and stay local."""
    names = sorted(
        name
        for name in os.listdir(folder)
        if os.path.isfile(os.path.join(folder, name)) and not name.startswith(".") and not name.endswith(".tmp")
    )
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=os.path.join(folder, name)) for name in names]
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    return api.create_commit(repo_id, operations, commit_message=commit_message, revision=revision, create_pr=create_pr)


def mismatched_weights(model_class, folder: str, config=None) -> str:
    """Which weights of a local folder have other shapes than the model its config describes, e.g.
    "model.encoder.layers.0.ffn.w_1.weight has shape (3, 3) in model.safetensors, expected (64, 32)"."""
    from safetensors import safe_open

    config_class = model_class.config_class
    config = config if isinstance(config, config_class) else config_class.from_pretrained(folder)
    with torch.device("meta"):
        expected = {name: tuple(p.shape) for name, p in model_class(config).state_dict().items()}
    found = []
    for file in sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")):
        with safe_open(os.path.join(folder, file), framework="pt") as weights:
            for name in weights.keys():
                shape = tuple(weights.get_slice(name).get_shape())
                if name in expected and shape != expected[name]:
                    found.append(f"{name} has shape {shape} in {file}, expected {expected[name]}")
    return "; ".join(found) or "some weights have other shapes than the config describes"


class WeightShapeError(RuntimeError):
    """A folder's weight whose shape is not the one its config.json gives (a RuntimeError, as the library's)."""


class HubMixin:
    """Loading, saving and uploading of the model classes, on top of those of `PreTrainedModel`, which must follow
    this class among the bases: `class VanillaTransformerPreTrainedModel(HubMixin, PreTrainedModel)`."""

    # The README.md model card of the folder or Hub repository the model was loaded from (not part of config.json):
    # save_pretrained and push_to_hub carry it on, so a trained model keeps its card with its measured scores.
    _model_card_text: str | None = None
    _model_card_weights: list | None = None  # the weights the card describes (see `card_for_saving`)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, use_safetensors: bool | None = True, **kwargs):
        """`PreTrainedModel.from_pretrained`, but weights are read only from safetensors unless the caller passes
        `use_safetensors=False`: a pickled `pytorch_model.bin` is refused, not loaded silently. A truncated or
        corrupted safetensors file is reported with the folder it is in. The model remembers the README.md model
        card of the folder or repository, which `save_pretrained` and `push_to_hub` write again."""
        folder = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        if use_safetensors and os.path.isdir(folder):
            files = os.listdir(folder)
            pickles = sorted(f for f in files if f.endswith((".bin", ".pt", ".pth", ".ckpt")))
            if pickles and not any(f.endswith(".safetensors") for f in files):
                raise OSError(
                    f"{folder}: holds only pickled weights ({', '.join(pickles)}), which can run code when loaded, so "
                    "they are refused. Convert them to safetensors, or pass use_safetensors=False if you trust them."
                )
        try:
            loaded = super().from_pretrained(
                pretrained_model_name_or_path, *args, use_safetensors=use_safetensors, **kwargs
            )
        except SafetensorError as error:
            raise OSError(
                f"{pretrained_model_name_or_path}: the safetensors weights cannot be read (truncated or "
                f"corrupted file): {error}"
            ) from error
        except RuntimeError as error:
            if "ignore_mismatched_sizes" not in str(error) or not os.path.isdir(folder):
                raise
            raise WeightShapeError(
                f"{folder}: {mismatched_weights(cls, folder, kwargs.get('config'))}; "
                "expected the shapes of the folder's config.json (or pass ignore_mismatched_sizes=True "
                "to re-initialise those weights)."
            ) from error
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, loading info) on request
        model._model_card_text = find_model_card(pretrained_model_name_or_path, kwargs)
        model._model_card_weights = weights_fingerprint(model) if model._model_card_text is not None else None
        return loaded

    def save_pretrained(self, save_directory: str | os.PathLike, *args, push_to_hub: bool = False, **kwargs):
        """`PreTrainedModel.save_pretrained`, plus what makes the folder self-contained: the configuration and
        modeling code as flat files, an `auto_map` in config.json, and a README.md model card if there is none yet:
        the card the model was loaded with, else a generic one (see `write_model_card`). With
        `push_to_hub=True` the finished folder is uploaded."""
        self.config.auto_map = dict(AUTO_MAP)
        super().save_pretrained(save_directory, *args, **kwargs)
        if not kwargs.get("is_main_process", True):
            return
        write_code_files(save_directory, self.config)
        write_model_card(save_directory, card_for_saving(self), self.config, self.num_parameters())
        if push_to_hub:
            repo_id = kwargs.get("repo_id", os.path.basename(os.path.normpath(save_directory)))
            upload_folder(save_directory, repo_id, token=kwargs.get("token"), private=kwargs.get("private"))

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | None = None,
        **kwargs,
    ):
        """Upload the self-contained folder that `save_pretrained` writes (weights, config, generation config, code,
        model card) to the Hub repository `repo_id`, creating it if needed."""
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder, max_shard_size=max_shard_size)
            if tags:
                card = ModelCard.load(os.path.join(folder, "README.md"))
                card.data.tags = list(dict.fromkeys((card.data.tags or []) + list(tags)))
                card.save(os.path.join(folder, "README.md"))
            return upload_folder(
                folder,
                repo_id,
                token=token,
                private=private,
                commit_message=commit_message or "Upload model",
                revision=revision,
                create_pr=create_pr,
            )
