"""Setting a run up: the output folder, accelerate, the data and tokenizer, the model, optimizer and schedule, all
prepared by accelerate and restored from a checkpoint when resuming. `setup_run` is the one place that reads the whole
`TrainArguments`; it hands each piece the group it needs, and the `Run` the groups the loop and the finish read."""

import math
import os
import pickle

import accelerate.utils
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from torch.utils.data import DataLoader

from ...errors import one_line
from ...folders import holds
from ..data.batching import TokenBatchSampler
from ..data.bpe import bpe_corpus, build_tokenizer
from ..data.loading import load_pairs
from ..data.memory import release_file_pages, trim_freed_memory
from ..data.streaming import StreamingBatches, train_stream_source
from ..data.tokenizing import BpeDropoutPairs, TrainingRows, make_collator, tokenize_datasets
from ..optim.criterion import TranslationCriterion
from ..optim.schedule import lr_lambda
from ..options.arguments import DataArguments, OptimisationArguments, RunArguments, TokenizerArguments, TrainArguments
from .checkpoints import read_state, resolve_resume
from .engines import (
    check_engine,
    check_resume_engine,
    create_optimizer_state,
    fit_deepspeed_config,
    process_group_kwargs,
    shard_tied_weights,
    shards_model,
    skip_deepspeeds_inference_op,
)
from .model import build_model
from .output_folder import earlier_files, earlier_once_set_up, prepare_output_dir, remove_earlier, set_aside
from .resume_checks import check_resume_matches, data_order, differing_order, tokenizer_identity
from .state import Run, forget_metrics_after


def start_accelerator(run: RunArguments, optimisation: OptimisationArguments, report_to: list[str]) -> Accelerator:
    """accelerate's `Accelerator` for the run's device, precision and trackers, the random generators seeded."""
    trackers = [t for t in report_to if t != "none"]
    skip_deepspeeds_inference_op()
    # gradient accumulation is the loop's own (`train_update`, with `no_sync`): accelerate's counter stays at 1
    accelerator = Accelerator(
        mixed_precision=optimisation.mixed_precision,
        log_with=trackers or None,
        project_dir=run.output_dir,
        cpu=optimisation.cpu,
        # batches are copied to the GPU without waiting (from page-locked memory: see setup_run)
        dataloader_config=DataLoaderConfiguration(non_blocking=True),
        kwargs_handlers=process_group_kwargs(optimisation.cpu),
    )
    check_engine(accelerator, optimisation.cpu)
    if accelerator.device.type == "cuda":  # float32 matmuls on the tensor cores (TF32), as GPU training expects
        torch.set_float32_matmul_precision("high")
    set_seed(run.seed)
    count = accelerator.num_processes
    accelerator.print(f"Training with {count} process{'es' if count > 1 else ''} on {accelerator.device.type}")
    return accelerator


def training_loader(
    raw,
    tokenized,
    rows: TrainingRows | None,
    tokenizer,
    model,
    accelerator,
    *,
    data: DataArguments,
    bpe_dropout: float,
    max_tokens: int,
    seed: int,
) -> tuple:
    """The training pairs (re-segmented every epoch with BPE dropout), their token-budget sampler and loader; when
    streamed, no pairs held, and the stream's batches as both sampler and loader."""
    if data.streaming:
        collate = make_collator(tokenizer, model)
        batches = StreamingBatches(*train_stream_source(data), tokenizer, collate, data, max_tokens, seed, accelerator)
        return None, batches, batches
    indices = None
    if bpe_dropout:
        # segmented anew every epoch; the first draw also sizes the epochs that --num-epochs counts
        train_data = BpeDropoutPairs(raw["train"], tokenizer, data, bpe_dropout)
        train_data.resegment(0, accelerator)
        lengths = train_data.lengths()
    else:
        train_data, lengths, indices = tokenized["train"], (rows.source_lengths, rows.target_lengths), rows.indices
        if len(indices) >= 1_000_000:  # a few seconds per million pairs
            accelerator.print(f"Batching {len(indices):,} training pairs by length, {max_tokens} tokens a batch")
    sampler = TokenBatchSampler(
        *lengths, max_tokens, seed=seed, num_replicas=accelerator.num_processes, indices=indices
    )
    # a private generator: starting a data iterator must not draw from the global RNG that dropout uses,
    # or a resumed run would see different dropout masks from an uninterrupted one
    train_loader = DataLoader(
        train_data,
        batch_sampler=sampler,
        collate_fn=make_collator(tokenizer, model),
        generator=torch.Generator().manual_seed(seed),
    )
    return train_data, sampler, train_loader


def prepare_data(
    data: DataArguments,
    options: TokenizerArguments,
    run: RunArguments,
    learned_positions: bool,
    resume_checkpoint: str | None,
    accelerator,
    earlier: list[str] = (),
) -> tuple:
    """The pairs, the tokenizer and the tokenised splits; and the pairs dropped, by reason and split. A streamed
    training split is not loaded here: the splits are the others, and the training rows None. The `earlier` run's
    files (--overwrite-output-dir) are set aside once the data is read and checked, not before (and removed once
    the run is set up)."""
    raw, empty = load_pairs(data, run.seed)
    set_aside(earlier, run.output_dir, accelerator)
    # the BPE's corpus is dropped with the call, and with it the last reference to the splits as first mapped
    stream = train_stream_source(data) if data.streaming else None
    corpus = bpe_corpus(data, options, run.seed, raw, stream)
    tokenizer = build_tokenizer(options, run.output_dir, bool(resume_checkpoint), corpus, accelerator)
    del corpus
    release_file_pages(raw)  # the pages that the checks and the BPE's sample read no longer count here
    with accelerator.main_process_first():
        tokenized, rows = tokenize_datasets(raw, tokenizer, data, learned_positions)
    # again after tokenising, which opened the text's files anew, and the pairs' lengths, read from every record batch
    release_file_pages(raw)
    release_file_pages(tokenized)
    dropped = {"empty_side": {split: count for split, count in empty.items() if count}}
    dropped["too_long"] = {"train": rows.dropped} if rows and rows.dropped else {}
    return raw, tokenizer, tokenized, rows, {reason: counts for reason, counts in dropped.items() if counts}


def prepare_training(
    model,
    train_loader,
    accelerator,
    optimisation: OptimisationArguments,
    *,
    d_model: int,
    streaming: bool,
    bpe_dropout: float,
    resume_state: dict | None,
) -> tuple:
    """Adam with the run's settings, the model, optimizer and (unless streamed) loader prepared by accelerate, and
    the learning-rate schedule of §5.3 over the run's updates (a resumed BPE-dropout run keeps the epoch size of its
    first draw, `resume_state`'s). Returns (model, optimizer, schedule, loader, batches per epoch, updates)."""
    shard_tied_weights(accelerator, model)  # FSDP2: before the optimizer takes the parameters
    # fused: one kernel updates every parameter (CPU and CUDA), instead of a handful of small ops per tensor
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1.0,
        betas=(optimisation.adam_beta1, optimisation.adam_beta2),
        eps=optimisation.adam_epsilon,
        weight_decay=optimisation.weight_decay,
        fused=accelerator.device.type in ("cpu", "cuda"),
    )
    fit_deepspeed_config(accelerator, optimisation.clip_norm)
    schedule_optimizer = optimizer  # the schedule drives the parameter groups, shared with the prepared wrapper
    if streaming:  # every process reads the stream and takes its share of the batches (streaming.py)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    batches_per_epoch = 0 if streaming else len(train_loader)  # a stream's is unknown: --max-steps is given
    if resume_state and bpe_dropout:
        # each draw batches a little differently: a resumed run keeps the epoch size, so the length and the schedule,
        # of its first draw
        batches_per_epoch = resume_state.get("batches_per_epoch", batches_per_epoch)
    max_steps = updates_in_run(optimisation, batches_per_epoch)
    # the schedule counts optimizer updates (§5.3): it is stepped by hand, once per update, not prepared
    schedule = lr_lambda(
        d_model,
        optimisation.warmup_steps,
        optimisation.lr,
        total_steps=max_steps,
        cooldown_steps=optimisation.cooldown_steps,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(schedule_optimizer, schedule)
    accelerator.register_for_checkpointing(scheduler)
    return model, optimizer, scheduler, train_loader, batches_per_epoch, max_steps


def updates_in_run(optimisation: OptimisationArguments, batches_per_epoch: int) -> int:
    """--max-steps, or --num-epochs of `batches_per_epoch` batches, --gradient-accumulation-steps an update."""
    steps = optimisation.max_steps or optimisation.num_epochs * math.ceil(
        batches_per_epoch / optimisation.gradient_accumulation_steps
    )
    if optimisation.cooldown_steps > steps:
        raise ValueError(f"--cooldown-steps {optimisation.cooldown_steps} is longer than the run ({steps} updates)")
    return steps


def init_trackers(accelerator, report_to: list[str], options: dict) -> None:
    """Start the trackers (--report-to) with the run's options as their configuration."""
    if any(t != "none" for t in report_to):
        accelerator.init_trackers(
            "vanilla-transformer", config={k: v for k, v in options.items() if isinstance(v, (int, float, str, bool))}
        )


def setup_run(args: TrainArguments) -> Run:
    """Data, tokenizer, model, optimizer and schedule, prepared by accelerate and restored from a checkpoint."""
    checkpoints, optimisation, data, output_dir = args.checkpoints, args.optimisation, args.data, args.run.output_dir
    inputs = {"--train-file": data.train_file, "--validation-file": data.validation_file, "--test-file": data.test_file,
              "--tokenizer-name": args.tokenizer.tokenizer_name, "--init-from": args.model.init_from}  # fmt: skip
    prepare_output_dir(output_dir, args.run.overwrite_output_dir, checkpoints.resume_from, inputs)
    accelerator = start_accelerator(args.run, optimisation, checkpoints.report_to)
    resume_checkpoint = resolve_resume(checkpoints.resume_from) if checkpoints.resume_from else None
    resume_state = read_state(resume_checkpoint) if resume_checkpoint else None
    learned = args.model.position_encoding == "learned"
    earlier = earlier_files(output_dir, args.run.overwrite_output_dir, resume_checkpoint)
    # a new run's earlier files go once its data is read; a resume's once the checkpoint is checked and restored
    prepared = prepare_data(data, args.tokenizer, args.run, learned, resume_checkpoint, accelerator,
                            [] if resume_checkpoint else earlier)  # fmt: skip
    raw, tokenizer, tokenized, rows, dropped = prepared
    trim_freed_memory()
    model = build_model(args.model, data, args.evaluation, tokenizer, args.switches.changed())
    identity = tokenizer_identity(tokenizer, args.tokenizer)
    if resume_checkpoint:  # refused before any engine wraps the model: its sizes, tokenizer, engine
        check_resume_matches(resume_checkpoint, resume_state, model, identity, data)
        check_resume_engine(resume_checkpoint, resume_state.get("engine"), accelerator)
    bpe_dropout = args.tokenizer.bpe_dropout
    batching = {"data": data, "bpe_dropout": bpe_dropout, "max_tokens": optimisation.max_tokens, "seed": args.run.seed}
    train_data, sampler, train_loader = training_loader(raw, tokenized, rows, tokenizer, model, accelerator, **batching)
    train_loader.pin_memory = accelerator.device.type == "cuda"  # page-locked batches, for non-blocking copies
    sizing = {"streaming": data.streaming, "bpe_dropout": bpe_dropout, "resume_state": resume_state}
    model, optimizer, scheduler, train_loader, batches_per_epoch, max_steps = prepare_training(
        model, train_loader, accelerator, optimisation, d_model=args.model.d_model, **sizing
    )
    init_trackers(accelerator, checkpoints.report_to, args.options())
    run = Run(
        output_dir=output_dir,
        data=data,
        optimisation=optimisation,
        checkpoints=checkpoints,
        evaluation=args.evaluation,
        validation_score="bleu_lowercase" if args.tokenizer.lowercase else "bleu",  # a lowercasing model writes so
        accelerator=accelerator,
        tokenizer=tokenizer,
        tokenizer_identity=identity,
        raw=raw,
        tokenized=tokenized,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        criterion=TranslationCriterion.from_arguments(optimisation, tokenizer),
        train_data=train_data,
        sampler=sampler,
        train_loader=train_loader,
        batches_per_epoch=batches_per_epoch,
        max_steps=max_steps,
        dropped=dropped,
        resume_checkpoint=resume_checkpoint,
        sharded=shards_model(accelerator),
    )
    if resume_checkpoint:
        check_updates_left(run, resume_state["step"])
        resume(run, resume_state)
    remove_earlier(earlier_once_set_up(output_dir, earlier, bool(resume_checkpoint)), accelerator)
    return run


def check_updates_left(run: Run, step: int) -> None:
    """A resume must have updates left to train, or, in its own folder, its last ones to finish (evaluate and save,
    after a failure at the end): a checkpoint past the run's end, or at it from another folder, is refused."""
    if step > run.max_steps or (step == run.max_steps and not holds(run.output_dir, run.resume_checkpoint)):
        raise ValueError(f"--resume-from: the checkpoint is at update {step}, and the run ends at update "
                         f"{run.max_steps}: give a longer run to continue it")  # fmt: skip


def resume(run: Run, state: dict) -> None:
    """Load the checkpoint's weights, optimizer, schedule and RNG states (accelerate's `load_state`, whatever the
    engine wrote), and go on from its update. (A model, tokenizer or engine that differs from the checkpoint's has
    been refused already, in `setup_run`.)"""
    if run.data.streaming != ("stream" in state):
        written = "with" if "stream" in state else "without"
        raise ValueError(
            f"--resume-from {run.resume_checkpoint}: the checkpoint was written by a run {written} --streaming, "
            f"which orders the data differently; resume it {written} --streaming"
        )
    order = differing_order(state.get("order"), data_order(run))
    if order:
        raise ValueError(f"--resume-from {run.resume_checkpoint}: {order}")
    states = os.path.join(run.resume_checkpoint, f"random_states_{run.accelerator.process_index}.pkl")
    if not os.path.isfile(states):  # accelerate would go on without them: dropout would draw other masks
        raise ValueError(f"--resume-from {run.resume_checkpoint}: no {os.path.basename(states)}, the random "
                         "generators' states; resume from another checkpoint")  # fmt: skip
    try:  # accelerate's own reader, which would only log a file it cannot read, at level info, and go on
        accelerate.utils.load(states)
    except Exception as error:
        raise ValueError(
            f"--resume-from {run.resume_checkpoint}: {os.path.basename(states)}, the random generators' "
            f"states, cannot be read ({type(error).__name__}); resume from another checkpoint"
        ) from error
    create_optimizer_state(run.accelerator, run.optimizer)
    try:
        run.accelerator.load_state(run.resume_checkpoint)
    except torch.OutOfMemoryError:  # the device's, not the checkpoint's
        raise
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as error:  # a file cut short or missing
        raise ValueError(
            f"--resume-from {run.resume_checkpoint}: its optimizer, schedule or random states cannot be restored "
            f"({type(error).__name__}: {one_line(error)}); resume from another checkpoint"
        ) from error
    run.step, run.epoch, run.batches_done = (state[key] for key in ("step", "epoch", "batches_in_epoch"))
    run.seconds_before = state.get("train_seconds", 0.0)  # absent from checkpoints written before it was recorded
    if run.data.streaming:
        run.sampler.resume(state["stream"])
    if run.accelerator.is_main_process:
        forget_metrics_after(run.output_dir, run.step)
    run.accelerator.print(f"Resumed from {run.resume_checkpoint} at step {run.step}.")
