"""`vanilla-transformer evaluate`: BLEU, chrF, exact match and the reference cross-entropy of a model folder, or of
a folder exported to CTranslate2, on a split, printed (and written with --output) as JSON. Its data and beam-search
flags are `train`'s own groups (`DataArguments`, `GenerationArguments`), read by the same parser and handed to the
training stack's evaluation as those dataclasses."""

import argparse
import json
import os
from typing import TYPE_CHECKING

from ..corpus.output import check_output_file
from ..errors import CommandError, warn
from ..folders import write_atomically
from ..inference.devices import Placement
from ..inference.options import SearchOptions
from ..inference.translators import CTranslate2Translator
from ..model_folder import card_languages, recorded_seed
from ..processes import is_first_process
from ..training.options.arguments import DataArguments, GenerationArguments, RunArguments
from .corpus import add_read_window, check_outside_model, file_or_stdout
from .engine import add_engine_arguments, engine_for, placement_of, translator_for
from .failures import reported_as

if TYPE_CHECKING:
    import datasets

DEFAULT_SEED = RunArguments.seed  # train's


def evaluate_command_parser(subparsers) -> argparse.ArgumentParser:
    evaluate = subparsers.add_parser(
        "evaluate",
        dataclass_types=(DataArguments, GenerationArguments),
        help="BLEU, chrF, exact match and cross-entropy of a model folder on a split",
    )
    evaluate.add_argument("--model", required=True, help="a model folder (or Hub name)")
    evaluate.add_argument("--split", default="test", help="the split to score")
    evaluate.add_argument(
        "--seed", type=int, help="the seed that draws the embedded task's splits (default: the model's own, else 42)"
    )
    evaluate.add_argument(
        "--output", type=file_or_stdout, help="write the results as JSON here too (-: stdout only, the default)"
    )
    add_read_window(evaluate, "split", "pairs", " (the CTranslate2 engine; the torch engine reads it batch by batch)")
    add_engine_arguments(evaluate)
    evaluate.set_defaults(func=evaluate_command)
    return evaluate


def evaluate_command(args: argparse.Namespace) -> int:
    """The scores as JSON on stdout (and in --output); bad data ends with status 2."""
    from ..training.data.loading import DataError

    try:
        data, generation = DataArguments.from_namespace(args), GenerationArguments.from_namespace(args)
    except ValueError as error:  # a value the flags' types let through: an empty file name
        raise CommandError(str(error), exit_code=2) from error
    if data.source_lang == data.target_lang:  # as train refuses it: every pair would be scored against itself
        raise CommandError(f"--source-lang and --target-lang are both {data.source_lang!r}", exit_code=2)
    check_evaluated_data(data)
    if args.output is not None:
        check_results_file(args.output, data, args.model)
    warn_of_other_languages(args.model, data)
    with reported_as(2, DataError):
        if engine_for(args) == "torch":
            metrics = evaluate_pytorch(args.model, placement_of(args), (args.split, args.seed), data, generation)
        else:
            check_exported_data(data)
            translator = translator_for(args)
            split = split_of(data, args.split, task_seed(args.model, data, args.seed))
            metrics = evaluate_exported(translator, split, data, generation, args.read_window)
    if metrics is not None:  # None on the processes other than the main one
        print(json.dumps(metrics, indent=2))
        if args.output is not None:
            write_results(args.output, json.dumps(metrics, indent=2))
    return 0


def check_evaluated_data(data: DataArguments) -> None:
    """train's data flags that say nothing to evaluate, or that go together with another source of data, named."""
    if data.streaming:  # train's flag for its training split: evaluate reads one split whole
        raise CommandError("--streaming streams train's training split; evaluate reads --split whole", exit_code=2)
    if data.max_source_length is not None:
        raise CommandError(
            "--max-source-length drops train's longer training pairs; evaluate scores every pair of "
            "--split (a source past a model's learned positions is cut, with a warning)",
            exit_code=2,
        )
    if data.dataset_name and (data.train_file or data.validation_file or data.test_file):
        raise CommandError("--dataset-name and --train-file/--validation-file/--test-file are mutually exclusive: "
                           "give one source of data", exit_code=2)  # fmt: skip
    if data.dataset_config and not data.dataset_name:
        raise CommandError("--dataset-config needs --dataset-name", exit_code=2)


def check_exported_data(data: DataArguments) -> None:
    """The data flags that only the torch engine's evaluation reads, named under the CTranslate2 engine."""
    if data.preprocessing_num_workers is not None:
        raise CommandError(
            f"--preprocessing-num-workers {data.preprocessing_num_workers}: the torch engine's processes that "
            "tokenise --split; the CTranslate2 engine reads it --read-window pairs at a time, in this process",
            exit_code=2,
        )


def task_seed(model: str, data: DataArguments, given: int | None) -> int:
    """The seed that draws the embedded task's splits: `given` (--seed), else the one the model was trained with
    (its eval_results.json records it), else 42, train's default. Another seed than the model's draws test numbers
    that the model may have trained on: a warning says so."""
    from ..training.data.loading import draws_embedded_task

    if not draws_embedded_task(data, require_train=False):  # files or a Hub dataset: the seed draws nothing
        return DEFAULT_SEED if given is None else given
    recorded = recorded_seed(model)
    if given is None and recorded is None:
        warn_once(f"--model {model} records no seed; the embedded task's splits are drawn with --seed {DEFAULT_SEED}, "
                  "and hold numbers it trained on if it was trained with another")  # fmt: skip
    elif given is not None and recorded is not None and given != recorded:
        warn_once(f"--model {model} was trained with --seed {recorded}: the splits of --seed {given} hold numbers "
                  "it trained on (its own test split holds none)")  # fmt: skip
    return given if given is not None else DEFAULT_SEED if recorded is None else recorded


def warn_of_other_languages(model: str, data: DataArguments) -> None:
    """A warning where the model card names another pair than the data's: the scores would be of a pair the model
    was not trained on (a model can be scored so; the flags may be the mistake)."""
    card = card_languages(model) if os.path.isdir(model) else None
    if card and tuple(card) != (data.source_lang, data.target_lang):
        warn_once(f"--model {model} translates {card[0]} to {card[1]} (its card); evaluating {data.source_lang} "
                  f"to {data.target_lang} (--source-lang, --target-lang)")  # fmt: skip


def warn_once(message: str) -> None:
    """A warning said once: under a launcher of several processes (`accelerate launch`, `torchrun`), by the first
    alone, as the scores are printed by it alone."""
    if is_first_process():
        warn(message)


def is_stream(path: str) -> bool:
    """A device or a pipe (/dev/stdout, a named pipe): written as it is, not replaced. /dev/stdout redirected to a
    file is a link to it, written as it is too."""
    if path.startswith(("/dev/", "/proc/self/fd/")) and os.path.exists(path):
        return not os.path.isdir(path)
    return os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path)


def check_results_file(output: str, data: DataArguments, model: str) -> None:
    """--output, before anything is evaluated: a file that can be written (or a stream), none of the data's, and
    not in the --model folder."""
    if is_stream(output):
        return
    for flag, path in (("--train-file", data.train_file), ("--validation-file", data.validation_file),
                       ("--test-file", data.test_file)):  # fmt: skip
        if output and path and os.path.realpath(path) == os.path.realpath(output):
            raise CommandError(f"--output {output} is {flag}: write the results to another file", exit_code=2)
    check_output_file("--output", output)
    check_outside_model(output, model)


def write_results(output: str, text: str) -> None:
    """The results in --output: a file is replaced whole (written beside it and renamed), a stream written to."""
    try:
        if is_stream(output):
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        else:
            write_atomically(output, text)
    except OSError as error:  # a full disk or device, a folder that went away
        raise CommandError(f"--output {output}: {error.strerror}", exit_code=1) from error


def split_of(data: DataArguments, split: str, seed: int) -> "datasets.Dataset":
    """The split `--split` of the data (`seed` draws the embedded task's numbers); a `DataError` for bad data."""
    from ..training.data.loading import load_raw_datasets

    return evaluation_split(load_raw_datasets(data, seed, require_train=False), split)


def evaluation_split(raw: "datasets.DatasetDict", split: str) -> "datasets.Dataset":
    """The split `--split` names, or a `CommandError` listing the data's splits."""
    if split not in raw:
        raise CommandError(f"--split {split}: the data has splits {sorted(raw)}", exit_code=2)
    return raw[split]


def evaluate_pytorch(
    model_name: str,
    placement: Placement,
    where: tuple[str, int | None],
    data: DataArguments,
    generation: GenerationArguments,
) -> dict | None:
    """Scores of a model folder on a split (`where`: its name and --seed, see `task_seed`) through `generate()`,
    data-parallel over the processes Accelerate starts, on the placement's device and in its precision (several
    processes: each on its own device, as Accelerate places them)."""
    import torch
    from accelerate import Accelerator

    from ..configuration import position_limit
    from ..model_folder import load_model_folder
    from ..training.data.tokenizing import tokenize_pairs
    from ..training.report.evaluation import reference_cross_entropy, split_scores

    model, tokenizer = load_model_folder(model_name, f"--model {model_name}")
    if placement.threads:
        torch.set_num_threads(placement.threads)
    split = split_of(data, where[0], task_seed(model_name, data, where[1]))  # once the model has loaded
    max_new_tokens = data.max_target_length or model.generation_config.max_new_tokens or 256
    limit = position_limit(model.config)
    tokenized = tokenize_pairs(split, tokenizer, data, max_length=limit, num_proc=data.preprocessing_num_workers)
    device = placement.torch_device()
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    accelerator = Accelerator(cpu=device.type == "cpu")
    model = accelerator.prepare(model.to(placement.torch_dtype(device)))
    applies = generation.length_penalty is not None and generation.num_beams > 1
    beam = {"length_penalty": generation.length_penalty} if applies else {}
    settings = {"batch_size": generation.eval_batch_size, "target_lang": data.target_lang}
    search = {"num_beams": generation.num_beams, "max_new_tokens": max_new_tokens, **beam}
    metrics = split_scores(model, tokenizer, split, tokenized, accelerator, **settings, **search)
    metrics.update(reference_cross_entropy(model, tokenizer, split, tokenized, accelerator, **settings))
    return metrics if accelerator.is_main_process else None


def evaluate_exported(
    translator: CTranslate2Translator,
    split: "datasets.Dataset",
    data: DataArguments,
    generation: GenerationArguments,
    window: int,
) -> dict:
    """The same scores from a folder exported to CTranslate2 (its `translator_for`), with the same arguments: the
    split read `window` pairs at a time, each window translated and scored as it comes."""
    from ..training.report.evaluation import cross_entropy_figures, word_count
    from ..training.report.metrics import MetricSums

    max_length = data.max_target_length or translator.generation_config.max_new_tokens or 256
    search = SearchOptions(num_beams=generation.num_beams, length_penalty=generation.length_penalty,
                           max_length=max_length, batch_size=generation.eval_batch_size)  # fmt: skip
    sums, total, tokens, words = MetricSums(data.target_lang), 0.0, 0, 0
    for rows in split.iter(batch_size=window):
        sources = [pair[data.source_lang] for pair in rows["translation"]]
        references = [pair[data.target_lang] for pair in rows["translation"]]
        translations = translator.translate(sources, search)
        sums.add([best.text for best, *_ in translations], references, rows.get("digits"))
        log_probs = translator.reference_log_probs(sources, references, batch_size=generation.eval_batch_size)
        total -= sum(sum(row) for row in log_probs)
        tokens += sum(len(row) for row in log_probs)
        words += word_count(references)
    return {**sums.result(), **cross_entropy_figures(total, tokens, words)}
