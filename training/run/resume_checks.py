"""The checks of a resume against its checkpoint: each checkpoint records what its weights were built with
(`built_with` in its trainer_state.json: the model's configuration and the tokenizer's identity), so that a resume
with other sizes or another tokenizer is refused before loading, in one line naming the setting
(`check_resume_matches`); a checkpoint written without the record is checked by its weights' shapes."""

import hashlib
import json
import os
import re

from accelerate.utils import extract_model_from_parallel
from safetensors import SafetensorError, safe_open

from ...configuration.configuration_vanilla_transformer import STUDY_SWITCHES, fold_switches
from ..options.argument_types import option_flag
from ..options.arguments import TokenizerArguments
from .checkpoints import WEIGHTS_FILE

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


def built_with(model, identity: dict, languages: tuple[str, str]) -> dict:
    """The record a checkpoint keeps of what its weights were built with (see `check_resume_matches`): the model's
    settings, the tokenizer's `identity` (`tokenizer_identity`) and the (source, target) `languages` it translates."""
    config = extract_model_from_parallel(model).config.to_dict()
    return {
        "model": {key: config[key] for key in RECORDED_CONFIG if key in config},
        "tokenizer": identity,
        "languages": list(languages),
    }


def differing_languages(old: list[str] | None, languages: tuple[str, str]) -> str | None:
    """Where the checkpoint's (source, target) `old` (None: not recorded) differ from this run's, one sentence."""
    if old is None or tuple(old) == tuple(languages):
        return None
    return (f"the checkpoint was trained from {old[0]} to {old[1]}, this run asks for --source-lang {languages[0]} "
            f"--target-lang {languages[1]}; {ADVICE}")  # fmt: skip


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
    if old.get("size") != new["size"] and describe_tokenizer(old) == describe_tokenizer(new):
        return (
            f"this run's tokenizer ({describe_tokenizer(new)}) has {new['size']} tokens, the one the checkpoint was "
            f"trained with {old.get('size')}: the same flags, but it was trained again or changed since; "
            f"{tokenizer_advice(old, checkpoint)}"
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


def norm_position_from(shapes: dict[str, list[int]]) -> str:
    """Pre-norm ends each stack in a LayerNorm; a study without LayerNorm has none at all."""
    if any(n.endswith("final_norm.weight") for n in shapes):
        return "pre"
    return "post" if any(n.endswith("layer_norm.weight") for n in shapes) else "none"


def settings_from_shapes(shapes: dict[str, list[int]]) -> dict:
    """The model settings a checkpoint's weight shapes show (for checkpoints written without `built_with`)."""
    found = {
        "share_embeddings": "model.shared.weight" in shapes,
        "position_encoding": "learned" if any(n.endswith("embed_positions.weight") for n in shapes) else "sinusoidal",
        "norm_position": norm_position_from(shapes),
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


def check_resume_matches(checkpoint: str, state: dict, model, identity: dict, data) -> None:
    """Refuse, before loading, a resume whose model, tokenizer (`identity`: `tokenizer_identity`) or languages (of
    `data`, the run's `DataArguments`) differ from the checkpoint's: a ValueError of one line naming the setting, the
    checkpoint's value and this run's. The checkpoint's record (`built_with`) is compared first; the weight shapes in
    its file then, the only evidence in checkpoints written without a record."""
    unwrapped = extract_model_from_parallel(model)
    recorded, longest = state.get("built_with"), max(data.max_source_length, data.max_target_length)
    reason = None
    if recorded:
        reason = differing_languages(recorded.get("languages"), (data.source_lang, data.target_lang))
        reason = reason or differing_model_setting(recorded.get("model", {}), unwrapped.config, longest)
        if reason is None and "tokenizer" in recorded:
            reason = differing_tokenizer(recorded["tokenizer"], identity, checkpoint)
    reason = reason or differing_weights(checkpoint, unwrapped, identity, longest)
    if reason:
        raise ValueError(f"--resume-from {checkpoint}: {reason}")


def data_order(run) -> dict:
    """What orders the `Run`'s batches, as its checkpoints record it (`order`): a resume must read the rest alike."""
    streamed = run.data.stream_pool_pairs if run.data.streaming else None
    return {"seed": run.sampler.seed, "max_tokens": run.sampler.max_tokens, "stream_pool_pairs": streamed}


def differing_order(old: dict | None, new: dict) -> str | None:
    """How this run's `data_order` differs from the checkpoint's `old` (None: not recorded), as one sentence."""
    for key, was in (old or {}).items():
        if was is not None and new.get(key) is not None and new[key] != was:  # None: not streamed (told apart first)
            return (f"the checkpoint's run ordered its batches with {option_flag(key, was)}, this run asks for "
                    f"{option_flag(key, new[key])}: it would read the rest of the data in another order; "
                    f"{ADVICE}")  # fmt: skip
    return None
