"""The end of a run: averaging checkpoints (and choosing between the average and the last update on validation),
the length-penalty search, the final scores with beam search, and writing the model folder."""

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from ...folders import signals_held
from ...inference.devices import describe
from ...modeling.hub_vanilla_transformer import upload_folder
from ..options.arguments import HubArguments
from ..report.evaluation import evaluate_split, reference_cross_entropy, summary, tune_length_penalty
from .checkpoints import average_checkpoints, list_checkpoints, load_saved_weights
from .engines import describe_engine, engine_record
from .state import Run, TrainingStopped


def finish(run: Run) -> tuple:
    """Average checkpoints if asked, choose the length penalty, and evaluate with beam search; returns the model
    without accelerate's wrappers and the results (eval_results.json)."""
    accelerator = run.accelerator
    accelerator.wait_for_everyone()
    if run.sharded:
        # FSDP, DeepSpeed: training is over, and the rest works on a whole copy of the weights on each process
        run.model = run.evaluation_model()
    # training is over: drop accelerate's autocast wrapper, so that with --mixed-precision the length-penalty search,
    # the final scores and the saved model all use the float32 weights in float32
    unwrapped = accelerator.unwrap_model(run.model, keep_fp32_wrapper=False)
    results = {
        "train_steps": run.step,
        "train_seconds": round(run.train_seconds(), 3),  # to the millisecond: a tiny run's updates take under 0.1 s
        "processes": accelerator.num_processes,
        "seed": run.sampler.seed,  # also what drew the embedded task's splits: evaluate draws its test split alike
        "engine": describe_engine(engine_record(accelerator)),
        "evaluated_on": describe(unwrapped.device, unwrapped.dtype),  # the training device, the float32 weights
    }
    dropped = {**run.dropped, **run.sampler.dropped_pairs()} if run.data.streaming else run.dropped
    if dropped:
        results["dropped_pairs"] = dropped
    tuned = None  # the validation search of the weights kept, when --tune-averaging has run it
    averaging = run.checkpoints.average_checkpoints
    if averaging > 1 and not list_checkpoints(run.output_dir):  # the run ended before its first save: keep its work
        accelerator.print(f"warning: --average-checkpoints {averaging}: the run saved no checkpoint to average (it "
                          "ended before its first save); the model keeps the last update's weights")  # fmt: skip
        results["checkpoints_averaged"] = 0
    elif averaging > 1 and run.checkpoints.tune_averaging and "validation" in run.tokenized:
        results["averaging_search"], tuned = choose_averaging(run, unwrapped)
    elif averaging > 1:  # fewer where the run saved fewer (a short run): the card says how many
        results["checkpoints_averaged"] = average_last_checkpoints(run.output_dir, averaging, accelerator, unwrapped)
    results.update(final_scores(run, unwrapped, tuned))
    return unwrapped, results


def end_process_group(accelerator) -> None:
    """End the trackers and the process group after the last collective (`accelerator.end_training`), after the
    short sleep that `vanilla_transformer.processes.end_processes` explains."""
    if accelerator.num_processes > 1:
        time.sleep(0.1)
    accelerator.end_training()


def average_last_checkpoints(output_dir: str, count: int, accelerator, unwrapped) -> int:
    """Load the mean of the last `count` (--average-checkpoints) checkpoints' weights into the model; returns how
    many there were (fewer than `count` where the run saved fewer)."""
    paths = list_checkpoints(output_dir)[-count:]
    averaged = average_checkpoints(paths)
    misfit = load_saved_weights(unwrapped, averaged)
    if misfit:
        raise ValueError(f"--average-checkpoints: weights do not match the model {misfit}.")
    unwrapped.tie_weights()
    accelerator.print(f"Averaged the last {len(paths)} checkpoints.")
    return len(paths)


def validation_search(run: Run) -> tuple:
    """The validation split decoded with beam search: with --tune-length-penalty for each value, the best chosen.
    Returns (length penalty, {alpha: BLEU} or None, (metrics, hypotheses))."""
    evaluation, raw, tokenized = run.evaluation, run.raw, run.tokenized
    if evaluation.tune_length_penalty:
        return tune_length_penalty(
            run.model,
            run.tokenizer,
            raw,
            tokenized,
            run.accelerator,
            evaluation.tune_length_penalty,
            run.validation_score,
            **run.split_settings(),
        )
    validation = evaluate_split(
        run.model, run.tokenizer, raw["validation"], tokenized["validation"], run.accelerator, **run.split_settings()
    )
    return evaluation.length_penalty, None, validation


def choose_averaging(run: Run, unwrapped) -> tuple[dict, tuple]:
    """--tune-averaging: the last update's weights and the mean of the last --average-checkpoints checkpoints, each
    scored on the validation split (BLEU, lowercased with --lowercase); the better stays loaded (a tie keeps the
    average). Returns the comparison and the kept weights' `validation_search`."""
    score, accelerator, count = run.validation_score, run.accelerator, run.checkpoints.average_checkpoints
    last_update = {name: value.clone() for name, value in unwrapped.state_dict().items()}
    searches = {}
    for name in ("last_update", "average"):
        if name == "average":
            count = average_last_checkpoints(run.output_dir, count, accelerator, unwrapped)
        searches[name] = validation_search(run)
        accelerator.print(f"{name.replace('_', ' ')}: validation {score} {searches[name][2][0][score]}")
    chosen = max(("average", "last_update"), key=lambda name: searches[name][2][0][score])
    if chosen == "last_update":
        unwrapped.load_state_dict(last_update)
    accelerator.print(f"Kept the {chosen.replace('_', ' ')}'s weights, chosen on the validation split.")
    comparison = {
        name: {f"validation_{score}": search[2][0][score], "length_penalty": search[0]}
        for name, search in searches.items()
    }
    return {**comparison, "checkpoints_averaged": count, "chosen": chosen}, searches[chosen]


def final_scores(run: Run, unwrapped, tuned: tuple | None = None) -> dict:
    """Choose the length penalty on validation if asked (or take `tuned`, a `validation_search` already run), then
    score validation and test with beam search and print the scores and a few translations."""
    results, validation, length_penalty = {}, None, run.evaluation.length_penalty
    if tuned is None and run.evaluation.tune_length_penalty and "validation" in run.tokenized:
        tuned = validation_search(run)
    if tuned is not None:
        length_penalty, search, validation = tuned
        if search is not None:
            results["length_penalty_search"] = search
            unwrapped.generation_config.length_penalty = length_penalty  # the test split and the saved model use it
    results["length_penalty"] = length_penalty
    samples = []
    for split in ("validation", "test"):
        if split not in run.tokenized:
            continue
        if split == "validation" and validation is not None:
            metrics, hypotheses = validation
        else:
            metrics, hypotheses = score_split(run, split)
        metrics.update(score_references(run, split))
        results[split] = metrics
        run.accelerator.print(f"{summary(split, metrics)}  [{metrics['bleu_signature']}]")
        samples = samples or translation_samples(run, split, hypotheses)
    for source, reference, hypothesis in samples:
        run.accelerator.print(f"  {source}\n    -> {hypothesis}\n    (reference: {reference})")
    return results


def score_split(run: Run, split: str) -> tuple:
    """The scores and translations of a split with the model's beam search."""
    raw, tokenized = run.raw[split], run.tokenized[split]
    return evaluate_split(run.model, run.tokenizer, raw, tokenized, run.accelerator, **run.split_settings())


def score_references(run: Run, split: str) -> dict:
    """The reference cross-entropy of a split."""
    raw, tokenized = run.raw[split], run.tokenized[split]
    return reference_cross_entropy(run.model, run.tokenizer, raw, tokenized, run.accelerator, **run.split_settings())


def translation_samples(run: Run, split: str, hypotheses: list[str]) -> list[tuple]:
    """The first --show-samples pairs of a split with their translations: (source, reference, translation)."""
    pairs = run.raw[split]["translation"][: run.checkpoints.show_samples]
    return [(pair[run.data.source_lang], pair[run.data.target_lang], hyp) for pair, hyp in zip(pairs, hypotheses)]


def write_final_model(output_dir: str, unwrapped, tokenizer, results: dict, write_card: Callable) -> None:
    """Write the model, tokenizer, scores, card (`write_card(output_dir, model, results)`) and curves into the output
    folder (main process only): written beside it first, then moved in at once, so that a Ctrl-C or a full disk
    leaves the folder as it was or whole."""
    staging = None
    try:
        staging = tempfile.mkdtemp(prefix=".final-", dir=output_dir)
        unwrapped.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        with open(os.path.join(staging, "eval_results.json"), "w") as handle:
            json.dump(results, handle, indent=2)
        with signals_held():  # a signal held is raised again as the block ends: nothing may be left to do then
            for name in sorted(os.listdir(staging), key=lambda name: name == "config.json"):  # the config last
                os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
            write_card(output_dir, unwrapped, results)
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as error:
        last = list_checkpoints(output_dir)
        raise TrainingStopped(
            f"could not write the final model to {output_dir}: {error.strerror or error}. The checkpoints "
            f"are untouched (last: {last[-1] if last else 'none'}); free space, then run again with --resume-from "
            "to evaluate and save."
        ) from error
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    from ..report.plots import plot_run

    plot_run(output_dir, quiet=True)


def upload(hub: HubArguments, output_dir: str, accelerator) -> None:
    """--push-to-hub: upload the model folder (not its checkpoints) to --hub-model-id."""
    commit = upload_folder(
        output_dir,
        hub.hub_model_id,
        token=hub.hub_token,
        private=hub.hub_private_repo,
        commit_message="Upload model trained with vanilla-transformer",
    )
    accelerator.print(f"Uploaded to the Hub: {getattr(commit, 'commit_url', hub.hub_model_id)}")
