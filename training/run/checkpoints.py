"""Checkpoints: written atomically with `accelerator.save_state`, pruned to the last few, found again for
`--resume-from`, and averaged as the paper averaged its last checkpoints (§6.1). What a checkpoint records of the
model and tokenizer it was built with, and the checks of a resume against them, are in `resume_checks.py`."""

import json
import os
import re
import shutil

import torch
from accelerate.utils import extract_model_from_parallel, id_tensor_storage
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

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
    if os.path.isfile(path):
        raise ValueError(f"--resume-from {path}: a file; expected a checkpoint folder (checkpoints/checkpoint-N) or a "
                         "run folder")  # fmt: skip
    if not os.path.isdir(path):
        raise ValueError(f"--resume-from {path}: no such folder.")
    if not os.path.isfile(os.path.join(path, STATE_FILE)):
        checkpoints = list_checkpoints(path)
        if not checkpoints:
            raise ValueError(
                f"--resume-from {path}: not a checkpoint (no {STATE_FILE}) and not a run folder with checkpoints."
            )
        path = checkpoints[-1]
    for name in (WEIGHTS_FILE, STATE_FILE):
        if not os.path.isfile(os.path.join(path, name)):
            raise ValueError(f"--resume-from {path}: the checkpoint has no {name}.")
    return path


def read_state(checkpoint: str) -> dict:
    """The checkpoint's record of where the run was (`save_run`); a ValueError names a file cut short or changed."""
    path = os.path.join(checkpoint, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"--resume-from {checkpoint}: {path} cannot be read ({error}); resume from another") from None
    missing = [key for key in ("step", "epoch", "batches_in_epoch") if not isinstance(state, dict) or key not in state]
    if missing:
        raise ValueError(f"--resume-from {checkpoint}: {path} lacks {', '.join(missing)}; resume from another")
    problem = state_problem(state)
    if problem:
        raise ValueError(f"--resume-from {checkpoint}: {path}: {problem}; resume from another checkpoint")
    return state


STATE_KINDS = {"step": int, "epoch": int, "batches_in_epoch": int, "batches_per_epoch": int, "train_seconds": float,
               "built_with": dict, "engine": dict, "order": dict}  # fmt: skip


def state_problem(state: dict) -> str | None:
    """What is wrong with a checkpoint's record of where the run was: a field of another kind (an edited file)."""
    for key, kind in STATE_KINDS.items():
        value = state.get(key)
        if value is None:
            continue
        if kind is dict:
            if not isinstance(value, dict):
                return f"{key} is {value!r:.60}; expected an object"
        elif isinstance(value, bool) or not isinstance(value, int if kind is int else (int, float)) or value < 0:
            return f"{key} is {value!r:.60}; expected {'a whole number' if kind is int else 'a number'}, at least 0"
    return built_with_problem(state.get("built_with") or {})


def built_with_problem(record: dict) -> str | None:
    """What is wrong with a checkpoint's `built_with` record (resume_checks.py): a part of another kind."""
    for key in ("model", "tokenizer"):
        if record.get(key) is not None and not isinstance(record[key], dict):
            return f"built_with.{key} is {record[key]!r:.60}; expected an object"
    languages = record.get("languages")
    if languages is not None and not (
        isinstance(languages, list) and len(languages) == 2 and all(isinstance(code, str) for code in languages)
    ):
        return f"built_with.languages is {languages!r:.60}; expected [source, target], two language codes"
    return None


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
