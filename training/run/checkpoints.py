"""Checkpoints: written atomically with `accelerator.save_state`, pruned to the last few, found again for
`--resume-from`, and averaged as the paper averaged its last checkpoints (§6.1).

Each checkpoint records what its weights were built with (`built_with` in its trainer_state.json: the model's
configuration and the tokenizer's identity), so that a resume with other sizes or another tokenizer is refused
before loading, in one line naming the setting (`check_resume_matches`)."""

import hashlib
import json
import os
import re
import shutil

import torch
from accelerate.utils import extract_model_from_parallel, id_tensor_storage
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ...configuration.configuration_vanilla_transformer import STUDY_SWITCHES, fold_switches
from ..options.argument_types import option_flag
from ..options.arguments import TokenizerArguments

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.json"
WEIGHTS_FILE = "model.safetensors"
TEMPORARY_PREFIX = ".tmp-checkpoint-"


def checkpoint_dir(output_dir: str) -> str:
    return os.path.join(output_dir, "checkpoints")


def list_checkpoints(output_dir: str) -> list[str]:
    """Complete checkpoints of a run, oldest first (temporary folders of interrupted writes are ignored)."""
    folder = checkpoint_dir(output_dir)
    if not os.path.isdir(folder):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(folder) if (m := CHECKPOINT_PATTERN.match(name))]
    return [os.path.join(folder, name) for _, name in sorted(found)]


def _fsync_tree(path: str) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                os.fsync(handle.fileno())
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def drop_tied_copies(models: list, weights: list[dict], output_dir: str) -> None:
    """An `accelerator.save_state` pre-hook. A tied weight (the one matrix of §3.4 for both embeddings and the
    pre-softmax projection) is one tensor under several names in a state dict; safetensors stores a tensor once, so
    accelerate would drop the other names while writing, with the notice "Removed shared tensor {...} while saving"
    at every checkpoint. Dropping them here writes the same file without it. Only names the model declares tied, and
    only where they hold the tensor of a name that is kept: any other sharing still gets accelerate's notice. Loading
    (`load_state`, `from_pretrained`) ties the names again."""
    for model, state in zip(models, weights):
        tied = getattr(extract_model_from_parallel(model), "all_tied_weights_keys", None) or {}
        kept = {}  # tensor storage -> the first name that holds it
        for name in list(state):
            if not isinstance(state[name], torch.Tensor):
                continue
            storage = id_tensor_storage(state[name])
            # a wrapper (DistributedDataParallel, torch.compile) prefixes the model's own names
            if storage in kept and any(name == target or name.endswith("." + target) for target in tied):
                del state[name]
            else:
                kept.setdefault(storage, name)


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, no permission); the earlier checkpoints are untouched."""


def save_checkpoint(
    accelerator, output_dir: str, step: int, state: dict, keep: int, weights: dict | None = None
) -> str | None:
    """Write `checkpoint-STEP` under a temporary name, fsync it, then rename it into place, so that a checkpoint on
    disk is always whole: a crash or a kill at any moment leaves the earlier checkpoints and at most a temporary
    folder, which the next write removes. Keeps the last `keep` checkpoints. Called on every process. `weights`:
    the whole weights of a model that accelerate saves in its engine's own files (FSDP, DeepSpeed), written beside
    them as model.safetensors by the main process."""
    folder = checkpoint_dir(output_dir)
    final = os.path.join(folder, f"checkpoint-{step}")
    temporary = os.path.join(folder, f"{TEMPORARY_PREFIX}{step}")
    try:
        if accelerator.is_main_process:
            os.makedirs(folder, exist_ok=True)
            for name in os.listdir(folder):  # left by a write that was interrupted
                if name.startswith(TEMPORARY_PREFIX):
                    shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        accelerator.wait_for_everyone()
        # a whole model's weights are accelerate's to write (`drop_tied_copies`); a sharded one's, its engine's
        hook = accelerator.register_save_state_pre_hook(drop_tied_copies) if weights is None else None
        try:
            accelerator.save_state(temporary, safe_serialization=True)
        finally:
            if hook is not None:
                hook.remove()
        accelerator.wait_for_everyone()  # every process has written its files (random states, shards) before renaming
        if accelerator.is_main_process:
            if weights is not None:
                weights = {name: value.contiguous() for name, value in weights.items()}
                save_file(weights, os.path.join(temporary, WEIGHTS_FILE), metadata={"format": "pt"})
            with open(os.path.join(temporary, STATE_FILE), "w") as handle:
                json.dump(state, handle, indent=2)
            _fsync_tree(temporary)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(temporary, final)
            _fsync_tree(folder)
    except (OSError, SafetensorError, RuntimeError) as error:  # torch.save reports a failed write as RuntimeError
        shutil.rmtree(temporary, ignore_errors=True)
        done = list_checkpoints(output_dir)
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise CheckpointWriteError(
            f"could not write the step-{step} checkpoint in {folder}: {reason}. The last complete "
            f"checkpoint is {done[-1] if done else 'none'}; it is untouched. Free space or fix the permissions, then "
            "continue with --resume-from."
        ) from error
    if accelerator.is_main_process:
        for old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def resolve_resume(path: str) -> str:
    """`--resume-from` accepts a checkpoint folder or a run folder (its newest checkpoint is used)."""
    if not os.path.isdir(path):
        raise ValueError(f"--resume-from {path}: no such folder.")
    if not os.path.isfile(os.path.join(path, STATE_FILE)):
        checkpoints = list_checkpoints(path)
        if not checkpoints:
            raise ValueError(
                f"--resume-from {path}: not a checkpoint (no {STATE_FILE}) and not a run folder with checkpoints."
            )
        path = checkpoints[-1]
    if not os.path.isfile(os.path.join(path, WEIGHTS_FILE)):
        raise ValueError(f"--resume-from {path}: the checkpoint has no {WEIGHTS_FILE}.")
    return path


def read_state(checkpoint: str) -> dict:
    with open(os.path.join(checkpoint, STATE_FILE)) as handle:
        return json.load(handle)


def average_checkpoints(paths: list[str]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights saved in `paths` (safetensors only)."""
    if not paths:
        raise ValueError("--average-checkpoints: no checkpoint to average.")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        weights = load_file(os.path.join(path, WEIGHTS_FILE))
        if total and weights.keys() != total.keys():
            raise ValueError(f"--average-checkpoints: {path} holds different weights from {paths[0]}.")
        for key, value in weights.items():
            dtypes[key] = value.dtype
            total[key] = total.get(key, 0) + value.double()
    return {key: (value / len(paths)).to(dtypes[key]) for key, value in total.items()}


def load_saved_weights(model, weights: dict[str, torch.Tensor]) -> tuple[list, list] | None:
    """Load weights as a checkpoint or a folder saves them (each tied matrix once, under the name the others are tied
    to) into `model`; returns its (missing, unexpected) names where they do not fit, None where they do. The caller
    ties the weights again (`tie_weights`)."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    return (missing, unexpected) if unexpected or set(missing) - set(model.all_tied_weights_keys) else None


# ---------------------------------------------------------------------------------------------------------------------
# What a checkpoint's weights were built with, and a resume whose model or tokenizer differs refused in one line
# ---------------------------------------------------------------------------------------------------------------------

# the settings that shape the weights, in the order a difference is named; the dropout rates shape none and may
# change on resume
MODEL_SETTINGS = (
    "encoder_layers",
    "decoder_layers",
    "d_model",
    "num_heads",
    "d_ff",
    "norm_position",
    "position_encoding",
    "activation",
    "share_embeddings",
)
RECORDED_CONFIG = (
    MODEL_SETTINGS
    + tuple(STUDY_SWITCHES)
    + (  # the switches where changed (to_dict drops the rest)
        "vocab_size",
        "max_position_embeddings",
        "dropout",
        "attention_dropout",
        "activation_dropout",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "decoder_start_token_id",
    )
)
ADVICE = "give the checkpoint's value or start a new run"


def tokenizer_identity(tokenizer, options: TokenizerArguments) -> dict:
    """The tokenizer's size, a hash of its vocabulary (token -> id) and the flags that chose it (`options`)."""
    vocabulary = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    return {
        "size": len(tokenizer),
        "vocabulary_sha256": hashlib.sha256(vocabulary.encode("utf-8")).hexdigest(),
        "tokenizer_name": options.tokenizer_name,
        "vocab_size": None if options.tokenizer_name else options.vocab_size,
        "lowercase": bool(options.lowercase),
    }


def built_with(model, identity: dict) -> dict:
    """The record a checkpoint keeps of what its weights were built with (see `check_resume_matches`): the model's
    settings and the tokenizer's `identity` (`tokenizer_identity`)."""
    config = extract_model_from_parallel(model).config.to_dict()
    return {
        "model": {key: config[key] for key in RECORDED_CONFIG if key in config},
        "tokenizer": identity,
    }


def differing_model_setting(old: dict, config, longest: int) -> str | None:
    """The first setting of MODEL_SETTINGS and the study switches (and the learned position table) in which the
    checkpoint's `old` differs from this run's model `config`, as one sentence; None where they agree. `longest`: the
    longer of this run's --max-source-length and --max-target-length."""
    old = fold_switches(old)  # a checkpoint of an earlier version names the folded switches as booleans
    recorded = {key: old[key] for key in MODEL_SETTINGS if key in old}
    recorded |= {key: old.get(key, paper) for key, paper in STUDY_SWITCHES.items()}  # recorded only where changed
    for key, was in recorded.items():
        asks = getattr(config, key, STUDY_SWITCHES.get(key))
        if was != asks:
            return f"the checkpoint was trained with {option_flag(key, was)}, this run asks for " + (
                f"{option_flag(key, asks)}; {ADVICE}"
            )
    positions = old.get("max_position_embeddings")
    if config.position_encoding == "learned" and positions is not None and positions != config.max_position_embeddings:
        # the learned table covers the longer of the two length limits, and a few positions more
        spare = config.max_position_embeddings - longest
        return (
            f"the checkpoint was trained with learned positions for --max-source-length/--max-target-length up to "
            f"{positions - spare}, this run asks for up to {longest}; {ADVICE}"
        )
    return None


def describe_tokenizer(identity: dict) -> str:
    if identity.get("tokenizer_name"):
        return f"--tokenizer-name {identity['tokenizer_name']}"
    return f"--vocab-size {identity.get('vocab_size')}" + (" --lowercase" if identity.get("lowercase") else "")


def tokenizer_advice(old: dict, checkpoint: str) -> str:
    """Where the checkpoint's tokenizer is: its --tokenizer-name, or the tokenizer folder of its run."""
    folder = old.get("tokenizer_name")
    run = os.path.normpath(os.path.join(checkpoint, os.pardir, os.pardir))  # RUN/checkpoints/checkpoint-N
    if not folder and os.path.isfile(os.path.join(run, "tokenizer", "tokenizer.json")):
        folder = os.path.join(run, "tokenizer")
    where = f" (--tokenizer-name {folder})" if folder else ""
    return f"resume with the checkpoint's tokenizer{where} or start a new run"


def differing_tokenizer(old: dict, new: dict, checkpoint: str) -> str | None:
    """How this run's tokenizer `new` differs from the checkpoint's `old` (`tokenizer_identity`), as one sentence."""
    if not old.get("tokenizer_name") and not new["tokenizer_name"]:  # both trained here: their flags must agree
        if old.get("vocab_size") != new["vocab_size"]:
            return f"the checkpoint was trained with --vocab-size {old.get('vocab_size')}, this run asks for " + (
                f"--vocab-size {new['vocab_size']}; {ADVICE}"
            )
        if bool(old.get("lowercase")) != new["lowercase"]:
            return f"the checkpoint was trained {'with' if old.get('lowercase') else 'without'} --lowercase, " + (
                f"this run asks for {'it' if new['lowercase'] else 'none'}; {ADVICE}"
            )
    if old.get("size") != new["size"]:
        return (
            f"the checkpoint was trained with {describe_tokenizer(old)} (a vocabulary of {old.get('size')} tokens), "
            f"this run asks for {describe_tokenizer(new)} ({new['size']} tokens); {tokenizer_advice(old, checkpoint)}"
        )
    if old.get("vocabulary_sha256") != new["vocabulary_sha256"]:
        return (
            f"this run's tokenizer ({describe_tokenizer(new)}) differs from the one the checkpoint was trained with "
            f"({describe_tokenizer(old)}): the same {new['size']} tokens in size, but another vocabulary; "
            f"{tokenizer_advice(old, checkpoint)}"
        )
    return None


def saved_shapes(checkpoint: str) -> dict[str, list[int]]:
    """The shape of each weight in the checkpoint's weights file, read from its header only."""
    try:
        with safe_open(os.path.join(checkpoint, WEIGHTS_FILE), framework="pt") as weights:
            return {name: list(weights.get_slice(name).get_shape()) for name in weights.keys()}
    except (OSError, SafetensorError) as error:
        raise ValueError(f"--resume-from {checkpoint}: cannot read its {WEIGHTS_FILE} ({error}).") from error


def settings_from_shapes(shapes: dict[str, list[int]]) -> dict:
    """The model settings a checkpoint's weight shapes show (for checkpoints written without `built_with`)."""
    found = {
        "share_embeddings": "model.shared.weight" in shapes,
        "position_encoding": "learned" if any(n.endswith("embed_positions.weight") for n in shapes) else "sinusoidal",
        "norm_position": "pre" if any(n.endswith("final_norm.weight") for n in shapes) else "post",
    }
    for stack in ("encoder", "decoder"):
        layers = {int(m.group(1)) for n in shapes if (m := re.match(rf"model\.{stack}\.layers\.(\d+)\.", n))}
        if layers:
            found[f"{stack}_layers"] = max(layers) + 1
    for name, shape in shapes.items():
        if name.endswith("ffn.w_1.weight"):
            found["d_ff"], found["d_model"] = shape
        elif name.endswith(("shared.weight", "embed_tokens.weight", "lm_head.weight")):
            found["vocab_size"] = shape[0]
        elif name.endswith("embed_positions.weight"):
            found["max_position_embeddings"] = shape[0]
    return found


def differing_weights(checkpoint: str, model, identity: dict, longest: int) -> str | None:
    """The first weight whose shape (or presence) differs between the checkpoint's weights file and this run's model,
    with the setting that likely made it differ, as one sentence; None where every weight fits."""
    saved = saved_shapes(checkpoint)
    tied = getattr(model, "all_tied_weights_keys", None) or {}  # written once, under the name they are tied to
    expected = {name: list(value.shape) for name, value in model.state_dict().items() if name not in tied}
    name = next((n for n in sorted(saved.keys() | expected.keys()) if saved.get(n) != expected.get(n)), None)
    if name is None:
        return None
    found = f"has {name} {saved[name]}" if name in saved else f"has no {name}"
    wanted = f"has {expected[name]}" if name in expected else "has none"
    where = f"the checkpoint's {WEIGHTS_FILE} {found}, this run's model {wanted}"
    old = settings_from_shapes(saved)
    reason = differing_model_setting(old, model.config, longest)
    if reason is None and old.get("vocab_size", model.config.vocab_size) != model.config.vocab_size:
        reason = (
            f"the checkpoint has a vocabulary of {old['vocab_size']} tokens, this run's tokenizer "
            f"({describe_tokenizer(identity)}) has {model.config.vocab_size}; "
            f"{tokenizer_advice({}, checkpoint)}"
        )
    return (
        f"{where}: {reason}" if reason else f"{where}; resume with the settings it was trained with or start a new run"
    )


def check_resume_matches(checkpoint: str, state: dict, model, identity: dict, longest: int) -> None:
    """Refuse, before loading, a resume whose model or tokenizer (`identity`: `tokenizer_identity`) differs from the
    checkpoint's: a ValueError of one line naming the setting, the checkpoint's value and this run's. The checkpoint's
    record (`built_with`) is compared first; the weight shapes in its file then, the only evidence in checkpoints
    written without a record."""
    unwrapped = extract_model_from_parallel(model)
    recorded = state.get("built_with")
    reason = None
    if recorded:
        reason = differing_model_setting(recorded.get("model", {}), unwrapped.config, longest)
        if reason is None and "tokenizer" in recorded:
            reason = differing_tokenizer(recorded["tokenizer"], identity, checkpoint)
    reason = reason or differing_weights(checkpoint, unwrapped, identity, longest)
    if reason:
        raise ValueError(f"--resume-from {checkpoint}: {reason}")
