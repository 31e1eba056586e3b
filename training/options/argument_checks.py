"""The checks of `vanilla-transformer train`'s flags that stay within the data, tokenizer and output groups: each
pair of flags that cannot go together, named (arguments.py's `resolve` runs them, and those that cross the groups)."""

from .argument_types import ArgumentsError


def check_sources(data, tokenizer) -> None:
    """The data and tokenizer flags (`DataArguments`, `TokenizerArguments`), each pair that cannot go together named."""
    if data.dataset_name and data.train_file:
        raise ArgumentsError("--dataset-name and --train-file are mutually exclusive: give one source of data")
    if (data.validation_file or data.test_file) and not data.train_file:
        raise ArgumentsError("--validation-file/--test-file need --train-file")
    if data.dataset_config and not data.dataset_name:
        raise ArgumentsError("--dataset-config needs --dataset-name")
    if tokenizer.tokenizer_name and tokenizer.vocab_size:
        raise ArgumentsError("--vocab-size trains a new tokenizer; it cannot be combined with --tokenizer-name")
    if tokenizer.tokenizer_name and tokenizer.lowercase:
        raise ArgumentsError(
            "--lowercase applies to a tokenizer trained here; it cannot be combined with --tokenizer-name"
        )
    if data.streaming and data.uses_embedded_task:
        raise ArgumentsError("--streaming reads --train-file or --dataset-name; the embedded task is in memory")
    if data.source_lang == data.target_lang:
        raise ArgumentsError(f"--source-lang and --target-lang are both {data.source_lang!r}")


def check_outputs(hub, evaluation, checkpoints, data) -> None:
    """The Hub, evaluation and checkpoint flags (`HubArguments`, `EvaluationArguments`, `CheckpointArguments`; and
    `DataArguments`), each pair that cannot go together named."""
    if hub.push_to_hub and not hub.hub_model_id:
        raise ArgumentsError("--push-to-hub needs --hub-model-id NAME (e.g. user/vanilla-transformer-en-de)")
    if hub.hub_model_id and not hub.push_to_hub:
        raise ArgumentsError("--hub-model-id is only used with --push-to-hub")
    if evaluation.tune_length_penalty and evaluation.num_beams == 1:
        raise ArgumentsError("--tune-length-penalty needs beam search (--num-beams > 1); greedy search ignores it")
    if evaluation.tune_length_penalty and data.train_file and not data.validation_file:
        raise ArgumentsError("--tune-length-penalty picks on the validation split: give --validation-file")
    if checkpoints.tune_averaging and checkpoints.average_checkpoints == 1:
        raise ArgumentsError("--tune-averaging compares the average with the last update: give --average-checkpoints N")
    if checkpoints.tune_averaging and data.train_file and not data.validation_file:
        raise ArgumentsError("--tune-averaging picks on the validation split: give --validation-file")
    check_trackers(checkpoints.report_to)
    if checkpoints.average_checkpoints > checkpoints.keep_checkpoints:
        raise ArgumentsError(
            f"--average-checkpoints {checkpoints.average_checkpoints} needs at least as many kept checkpoints "
            f"(--keep-checkpoints {checkpoints.keep_checkpoints})"
        )


def check_trackers(report_to: list[str]) -> None:
    """--report-to: 'none', or trackers that the installed Accelerate knows by name."""
    from accelerate.utils import LoggerType

    known = [tracker.value for tracker in LoggerType]
    unknown = [name for name in report_to if name not in ("none", *known)]
    if unknown:
        raise ArgumentsError(f"--report-to {' '.join(unknown)}: expected none or Accelerate's {', '.join(known)}")
    if report_to == ["tensorboard"]:  # the default: off where TensorBoard is not installed
        return
    import accelerate.utils

    missing = [name for name in report_to if not getattr(accelerate.utils, f"is_{name}_available", lambda: True)()]
    if missing:
        raise ArgumentsError(f"--report-to {' '.join(missing)}: not installed here; pip install {' '.join(missing)}")


def tensorboard_installed() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True
