"""The training loop: plain functions around `accelerator.prepare`, `backward`, `no_sync`, `gather_for_metrics` and
`save_state`/`load_state`, with fairseq's pieces: a criterion (criterion.py) and updates whose loss is normalised by
all their target tokens. `train` is the entry point: it builds the run from its `TrainArguments` (startup.py), runs
the updates, and finishes it (finish.py)."""

import contextlib
import dataclasses
import functools
import time

import torch
from tqdm.auto import tqdm

from ..data.tokenizing import BpeDropoutPairs
from ..options.arguments import TrainArguments
from ..report.card import RunDescription, write_run_card
from ..report.evaluation import evaluate_split, reference_cross_entropy, summary
from .checkpoints import CheckpointWriteError, list_checkpoints, save_checkpoint
from .engines import deepspeed_boundary, engine_record, full_weights
from .finish import end_process_group, finish, upload, write_final_model
from .output_folder import removed_if_unstarted
from .resume_checks import built_with, data_order
from .startup import setup_run
from .state import Run, TrainingStopped, log_metrics

# --------------------------------------------------------------------------------------------------------------------
# The updates
# --------------------------------------------------------------------------------------------------------------------


def epoch_updates(run: Run):
    """The rest of the current epoch's batches, in the micro-batch groups of one optimizer update each:
    --gradient-accumulation-steps batches, fewer in the epoch's last group. An update's batches are all fetched
    before it starts, so that its target tokens are known."""
    if run.data.streaming:  # a resumed stream starts where its checkpoint says (`resume`)
        loader = run.train_loader
    elif run.batches_done:
        loader = run.accelerator.skip_first_batches(run.train_loader, run.batches_done)
    else:
        loader = run.train_loader
    # the sampler's shuffle follows the epoch. accelerate's loaders hand the sampler their own count of passes,
    # which restarts at 0 in a resumed run, and a skipping loader does not pass it on: set both
    loader.set_epoch(run.epoch)
    run.sampler.set_epoch(run.epoch)
    if isinstance(run.train_data, BpeDropoutPairs) and run.train_data.epoch != run.epoch:
        run.train_data.resegment(run.epoch, run.accelerator)
        run.sampler.set_lengths(*run.train_data.lengths())
    group = []
    for batch in loader:
        if len(group) == run.optimisation.gradient_accumulation_steps:
            yield group
            group = []
        group.append(batch)
    if group:
        yield group


class NonFiniteLoss(ArithmeticError):
    """A micro-batch's loss is NaN or infinite; `value` is it."""

    def __init__(self, value: float):
        super().__init__(f"the loss became {value}")
        self.value = value


def accumulate_gradients(accelerator, model, criterion, group: list[dict]) -> torch.Tensor:
    """The gradients of one update over its micro-batches `group`, accumulated in the parameters' `.grad`; returns
    (loss sum, NLL sum, target tokens) over all micro-batches and processes. Raises `NonFiniteLoss`, naming the first
    micro-batch's loss that is not finite, before the last micro-batch's backward pass: the only one that can apply
    the update (DeepSpeed's engine steps inside it; otherwise the loop steps after it).

    fairseq's normalisation: the update's summed loss over its total target tokens, counted over all its micro-batches
    and processes before the first forward pass, so that a micro-batch weighs by its tokens. Gradients are
    synchronised across processes only on the last micro-batch (accelerate's `no_sync` before it, the way accelerate
    documents accumulation that a loop controls itself), and each micro-batch's summed loss is scaled so that DDP's
    average over the processes (and accelerate's division by its own accumulation steps, where an `Accelerator` is
    given them) is undone: with one process and one micro-batch it is exactly the batch's loss over its tokens.

    The totals stay on the device until that check, the update's one wait for it: on a GPU the host keeps queueing
    the micro-batches' work instead of waiting for each one's loss.
    """
    sample_size = accelerator.reduce(sum(criterion.sample_size(batch) for batch in group), reduction="sum")
    scale = accelerator.gradient_accumulation_steps * accelerator.num_processes
    rows = []  # each micro-batch's (loss, NLL, target tokens), summed over the processes
    for index, batch in enumerate(group):
        last = index == len(group) - 1
        with contextlib.nullcontext() if last else accelerator.no_sync(model), deepspeed_boundary(accelerator, last):
            loss, _, logging = criterion(model, batch)
            figures = torch.stack([logging["loss"], logging["nll_loss"], logging["target_tokens"].float()])
            rows.append(accelerator.reduce(figures, reduction="sum"))
            if last:
                totals = finite_totals(torch.stack(rows).cpu())
            accelerator.backward(loss / sample_size if scale == 1 else loss * scale / sample_size)
    return totals


def finite_totals(rows: torch.Tensor) -> torch.Tensor:
    """The sums over an update's micro-batches of their (loss, NLL, target tokens) `rows`; raises `NonFiniteLoss`
    with the first loss that is NaN or infinite."""
    losses = rows[:, 0]
    bad = ~torch.isfinite(losses)
    if bad.any():
        raise NonFiniteLoss(losses[bad][0].item())
    return rows.sum(dim=0)


def train_update(run: Run, group: list[dict]) -> tuple[torch.Tensor, dict]:
    """One optimizer update over its micro-batches: accumulate, clip, step; returns the update's totals (see
    `accumulate_gradients`) and what was measured of it: its seconds, and for the first --layer-gradients updates the
    gradient norms of the stacks' first and last layers before clipping. A non-finite loss stops the run before the
    update is applied, naming the last good checkpoint."""
    started = time.time()
    try:
        totals = accumulate_gradients(run.accelerator, run.model, run.criterion, group)
    except NonFiniteLoss as error:
        last = list_checkpoints(run.output_dir)
        raise TrainingStopped(
            f"{error} at step {run.step + 1}; training stopped. The last good "
            f"checkpoint is {last[-1] if last else 'none (no checkpoint was saved yet)'}; resume from it "
            "with a lower --lr or more --warmup-steps."
        ) from error
    measured = (
        layer_gradient_norms(run.accelerator.unwrap_model(run.model))
        if run.step < run.checkpoints.layer_gradients
        else {}
    )
    if run.optimisation.clip_norm > 0:
        run.accelerator.clip_grad_norm_(run.model.parameters(), run.optimisation.clip_norm)
    run.optimizer.step()
    run.optimizer.zero_grad()
    run.scheduler.step()
    run.step += 1
    return totals, {"update_seconds": round(time.time() - started, 4), **measured}


def layer_gradient_norms(model) -> dict[str, float]:
    """The L2 norm of the gradient of each stack's first and last layer (`grad_norm_encoder_first`, ...): whether
    the gradient reaches the early layers (§3.1's residual connections). Parameters without a gradient here (under
    DeepSpeed the engine keeps them) count as none."""
    norms = {}
    for stack in ("encoder", "decoder"):
        layers = getattr(model.model, stack).layers
        for position, layer in (("first", layers[0]), ("last", layers[-1])):
            squares = [p.grad.detach().float().pow(2).sum() for p in layer.parameters() if p.grad is not None]
            norms[f"grad_norm_{stack}_{position}"] = (
                round(torch.stack(squares).sum().sqrt().item(), 6) if squares else None
            )
    return norms


@dataclasses.dataclass
class Throughput:
    """Target tokens since the last logged rate, and when that window started."""

    tokens: float = 0.0
    start: float = dataclasses.field(default_factory=time.time)


def update_record(run: Run, totals: torch.Tensor, measured: dict, window: Throughput, progress) -> dict:
    """The metrics.jsonl record of the update just made (with what `train_update` `measured`), with the token rate
    every --log-steps updates."""
    loss_sum, nll_sum, tokens = totals.tolist()
    window.tokens += tokens
    record = {
        "step": run.step,
        "epoch": run.epoch,
        "loss": round(loss_sum / tokens, 4),
        "nll_loss": round(nll_sum / tokens, 4),
        "lr": run.scheduler.get_last_lr()[0],
        "target_tokens": int(tokens),
        **measured,
    }
    if run.step % run.checkpoints.log_steps == 0 or run.step == run.max_steps:
        elapsed = time.time() - window.start
        record["tokens_per_second"] = round(window.tokens / max(elapsed, 1e-9), 1)
        window.tokens, window.start = 0, time.time()
        progress.set_postfix(loss=record["loss"], lr=f"{record['lr']:.2e}", tok_s=record["tokens_per_second"])
    return record


def validate(run: Run, record: dict) -> None:
    """Greedy translation scores and the reference cross-entropy on the validation split, added to `record`."""
    raw, tokenized, accelerator, settings = (
        run.raw["validation"],
        run.tokenized["validation"],
        run.accelerator,
        run.split_settings(),
    )
    greedy = {"num_beams": 1, "max_new_tokens": run.data.max_target_length}
    model = run.evaluation_model()
    metrics, _ = evaluate_split(model, run.tokenizer, raw, tokenized, accelerator, **settings, **greedy)
    metrics.update(reference_cross_entropy(model, run.tokenizer, raw, tokenized, accelerator, **settings))
    record.update({f"validation_{k}": v for k, v in metrics.items() if not k.endswith("signature")})
    accelerator.print(f"step {run.step}: {summary('validation', metrics)}")


def save_run(run: Run) -> None:
    """Checkpoint the run after its current update, with where it is in the data (for a streamed run, its position in
    the stream), the seconds of training behind it (over resumed runs) and what its weights were built with
    (`built_with`); a failed write stops the run, naming the last whole checkpoint."""
    state = {
        "step": run.step,
        "epoch": run.epoch,
        "batches_in_epoch": run.batches_done,
        "batches_per_epoch": run.batches_per_epoch,
        "train_seconds": run.train_seconds(),  # unrounded: a short run's first updates may take under 0.05 s
        "built_with": built_with(run.model, run.tokenizer_identity, (run.data.source_lang, run.data.target_lang)),
        "engine": engine_record(run.accelerator),
        "order": data_order(run),
    }
    if run.data.streaming:
        state["stream"] = run.sampler.position(run.batches_done)
    # a sharded model's engine writes its own files; its whole weights go beside them, for averaging and resuming
    weights = full_weights(run.accelerator, run.model) if run.sharded else None
    try:
        save_checkpoint(run.accelerator, run.output_dir, run.step, state, run.checkpoints.keep_checkpoints, weights)
    except CheckpointWriteError as error:
        raise TrainingStopped(str(error)) from error


def run_updates(run: Run) -> None:
    """The updates, from the run's step (0, or its checkpoint's) to its last, with validation, the metrics record and
    checkpoints as the run's groups of arguments ask; the last updates are checkpointed too."""
    saved_at = run.step  # the step of the newest checkpoint on disk (or the start)
    progress = tqdm(
        total=run.max_steps, initial=run.step, disable=not run.accelerator.is_local_main_process, desc="Training"
    )
    run.started, window = time.time(), Throughput()
    run.model.train()
    eval_steps = run.checkpoints.eval_steps
    while run.step < run.max_steps:
        for group in epoch_updates(run):
            run.batches_done += len(group)
            totals, measured = train_update(run, group)
            progress.update(1)
            record = update_record(run, totals, measured, window, progress)
            if eval_steps and run.step % eval_steps == 0 and "validation" in run.tokenized:
                validate(run, record)
            log_metrics(run.output_dir, run.accelerator, record)
            if checkpoint_due(run):
                save_run(run)
                saved_at = run.step
            if run.step >= run.max_steps:
                break
        else:
            run.epoch, run.batches_done = run.epoch + 1, 0
    progress.close()
    if run.checkpoints.save_strategy == "steps" and run.checkpoints.save_steps and saved_at != run.step:
        save_run(run)  # the last updates are checkpointed too, so that averaging and resuming see the final state


def checkpoint_due(run: Run) -> bool:
    """Every --save-steps updates, or with --save-strategy epoch after an epoch's last batch."""
    if run.checkpoints.save_strategy == "epoch":
        return run.batches_done >= len(run.train_loader)
    return bool(run.checkpoints.save_steps) and run.step % run.checkpoints.save_steps == 0


def train(args: TrainArguments) -> dict:
    """Train a tokenizer and a model as `args` say, evaluate it, write the model folder and upload it if asked;
    returns the final evaluation results."""
    with removed_if_unstarted(args.run.output_dir):
        run = setup_run(args)
        run_updates(run)
    unwrapped, results = finish(run)
    accelerator = run.accelerator
    if accelerator.is_main_process:  # the card states the length penalty the model was evaluated and saved with
        evaluation = dataclasses.replace(args.evaluation, length_penalty=results["length_penalty"])
        described = RunDescription(
            args.data, args.tokenizer, args.model, args.optimisation, args.checkpoints, evaluation, args.run.seed
        )
        card = functools.partial(write_run_card, described=described, hub_model_id=args.hub.hub_model_id)
        write_final_model(run.output_dir, unwrapped, run.tokenizer, results, card)
    accelerator.wait_for_everyone()
    end_process_group(accelerator)
    accelerator.print(f"Model, tokenizer and results written to {run.output_dir}")
    if args.hub.push_to_hub and accelerator.is_main_process:
        upload(args.hub, run.output_dir, accelerator)
    return results


__all__ = ["train", "TrainingStopped"]
