"""The training loop: plain functions around `accelerator.prepare`, `backward`, `no_sync`, `gather_for_metrics` and
`save_state`/`load_state`, with fairseq's pieces: a criterion (criterion.py) and updates whose loss is normalised by
all their target tokens. It reads the run's `TrainArguments` (arguments.py) and never writes into them."""

import contextlib
import ctypes
import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable

import datasets
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import GenerationConfig, PreTrainedTokenizerBase

from ..configuration import VanillaTransformerConfig
from ..modeling import VanillaTransformerForConditionalGeneration
from ..modeling.hub_vanilla_transformer import upload_folder
from .arguments import TrainArguments
from .card import write_run_card
from .checkpoints import (
    CheckpointWriteError,
    average_checkpoints,
    built_with,
    check_resume_matches,
    list_checkpoints,
    read_state,
    resolve_resume,
    save_checkpoint,
)
from .criterion import TranslationCriterion
from .data import (
    BpeDropoutPairs,
    TokenBatchSampler,
    TrainingRows,
    load_pairs,
    make_collator,
    release_file_pages,
    tokenize_datasets,
    trained_positions,
)
from .evaluation import evaluate_split, reference_cross_entropy, summary, tune_length_penalty
from .schedule import lr_lambda
from .streaming import StreamingBatches, stream_bpe_texts, stream_identity, train_stream_source
from .tokenizer import (
    bpe_cache_folder,
    bpe_cache_path,
    load_tokenizer,
    save_whole,
    train_bpe_tokenizer,
    training_texts,
)

METRICS_FILE = "metrics.jsonl"
RUN_MARKERS = ("config.json", "model.safetensors", METRICS_FILE, "checkpoints")


class TrainingStopped(RuntimeError):
    """The run stopped on purpose (a non-finite loss); the last good checkpoint is kept."""


# --------------------------------------------------------------------------------------------------------------------
# Setting up
# --------------------------------------------------------------------------------------------------------------------


def trim_freed_memory() -> bool:
    """Give the kernel back the heap memory that preparing the data used and freed (the BPE's sample and its
    training, the checks' arrays); returns whether glibc did. Once `keep_freed_memory_mapped` has turned glibc's own
    trimming off, that memory would stay with the process beside the training steps' own, which do not reuse most of
    it. Elsewhere than glibc, nothing is done."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def prepare_output_dir(args) -> None:
    """Refuse to write into a folder that holds another run, unless asked to overwrite or resuming inside it."""
    existing = [m for m in RUN_MARKERS if os.path.exists(os.path.join(args.output_dir, m))]
    resuming_here = args.resume_from and os.path.abspath(args.resume_from).startswith(os.path.abspath(args.output_dir))
    if existing and not (args.overwrite_output_dir or resuming_here):
        raise ValueError(
            f"--output-dir {args.output_dir} already holds a run ({', '.join(existing)}); pass "
            "--overwrite-output-dir to replace it, --resume-from to continue it, or choose another folder."
        )
    try:
        os.makedirs(args.output_dir, exist_ok=True)
        # a uniquely named file that removes itself: the processes of a distributed run check the folder at once
        with tempfile.TemporaryFile(dir=args.output_dir):
            pass
    except OSError as error:
        raise ValueError(f"--output-dir {args.output_dir}: cannot write there ({error.strerror or error}).") from error


@dataclasses.dataclass(frozen=True)
class BpeCorpus:
    """What the joint BPE is trained on: `texts()` gives the (sampled) texts and their count; `cache` is the folder
    where a BPE trained on them with the run's settings is kept (None: not kept)."""

    texts: Callable[[], tuple[Iterable[str], int]]
    cache: str | None


def bpe_corpus(args, raw, stream: tuple | None = None) -> BpeCorpus:
    """The BPE's corpus: a sample of the training split, or with `stream` (`train_stream_source`'s opener and name)
    a sample drawn from the stream, its BPE kept in the datasets cache under the file's or Hub dataset's identity."""
    if stream is not None:
        settings = bpe_settings(args, args.bpe_sample_size + 1)  # an unknown count: a sample, the seed counts
        cache = bpe_cache_path(datasets.config.HF_DATASETS_CACHE, stream_identity(args), settings)
        return BpeCorpus(lambda: stream_bpe_texts(*stream, args), cache)
    pairs = len(raw["train"])
    return BpeCorpus(
        lambda: (
            training_texts(raw, args.source_lang, args.target_lang, args.bpe_sample_size, args.seed),
            2 * min(pairs, args.bpe_sample_size),
        ),
        bpe_cache_folder(raw["train"], bpe_settings(args, pairs)),
    )


def build_tokenizer(args, corpus: BpeCorpus, accelerator):
    """--tokenizer-name's tokenizer, or the joint BPE: the run folder's when resuming, else one trained here, or
    reused from beside the datasets cache when the same data and settings trained it before."""
    if args.tokenizer_name:
        return load_tokenizer(args.tokenizer_name)
    folder = os.path.join(args.output_dir, "tokenizer")
    cached = corpus.cache
    resuming = args.resume_from and os.path.isfile(os.path.join(folder, "tokenizer.json"))
    if accelerator.is_main_process and not resuming:
        tokenizer = cached_tokenizer(cached)
        if tokenizer is None:
            texts, length = corpus.texts()
            tokenizer = train_bpe_tokenizer(texts, args.vocab_size, lowercase=args.lowercase, length=length)
            if cached is not None:
                save_whole(tokenizer, cached)
        else:
            accelerator.print(f"Reusing the BPE trained on the same data with the same settings: {cached}")
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()
    # from the cache where this process sees it (a resume too: the checkpoint's record guards the vocabulary): the
    # same tokenizer at the same place lets datasets reuse the tokenised corpus of an earlier run
    here = cached is not None and os.path.isfile(os.path.join(cached, "tokenizer.json"))
    return load_tokenizer(cached if here else folder, "the run's tokenizer")


def cached_tokenizer(cached: str | None):
    """The BPE kept in `cached`, or None when there is none or it cannot be read (it is then trained again)."""
    if cached is None or not os.path.isfile(os.path.join(cached, "tokenizer.json")):
        return None
    try:
        return load_tokenizer(cached)
    except ValueError:
        return None


def bpe_settings(args, pairs: int) -> dict:
    """What a trained BPE depends on, besides the training pairs (the seed only when it draws a sample of them)."""
    names = ("source_lang", "target_lang", "vocab_size", "lowercase", "bpe_sample_size")
    settings = {name: getattr(args, name) for name in names}
    return {**settings, "seed": args.seed} if pairs > args.bpe_sample_size else settings


def build_model(args, tokenizer) -> VanillaTransformerForConditionalGeneration:
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=args.d_model,
        num_heads=args.num_heads,
        d_ff=args.d_ff,
        encoder_layers=args.encoder_layers,
        decoder_layers=args.decoder_layers,
        dropout=args.dropout,
        attention_dropout=args.attention_dropout,
        activation_dropout=args.activation_dropout,
        norm_position=args.norm_position,
        position_encoding=args.position_encoding,
        share_embeddings=args.share_embeddings,
        max_position_embeddings=position_table_size(args),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config = generation_config(args, config)
    return model


def position_table_size(args: TrainArguments) -> int:
    """`max_position_embeddings` of a new model. Learned positions end where training ends (`trained_positions`).
    The sinusoids of §3.5 read any length, and the ecosystem reads this field as the model's limit (transformers'
    translation example refuses a source length above it): they state the configuration's own default, 1024, or
    the trained length if longer."""
    if args.position_encoding == "learned":
        return trained_positions(args)
    return max(VanillaTransformerConfig().max_position_embeddings, trained_positions(args))


def generation_config(args, config) -> GenerationConfig:
    # early_stopping=False (the library's default): beam search ends when no running beam can still beat the finished
    # ones. With True it ends as soon as num_beams hypotheses have finished, and a confident model's beams finish a
    # short wrong translation (a dropped word) before the right, longer one ends.
    beam = {"length_penalty": args.length_penalty, "early_stopping": False} if args.num_beams > 1 else {}
    return GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        num_beams=args.num_beams,
        max_new_tokens=args.max_target_length,
        **beam,
    )


# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


def forget_metrics_after(output_dir: str, step: int) -> None:
    """A resumed run repeats the steps after its checkpoint: drop their records from the killed run so that
    metrics.jsonl holds each step once. The file is rewritten under a temporary name and renamed into place."""
    path = os.path.join(output_dir, METRICS_FILE)
    if not os.path.isfile(path):
        return
    with open(path) as handle:
        kept = []
        for line in handle:
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line if line.endswith("\n") else line + "\n")
            except (ValueError, KeyError):  # a line cut short by the kill
                continue
    with open(path + ".tmp", "w") as handle:
        handle.writelines(kept)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)


def log_metrics(args, accelerator, record: dict) -> None:
    if accelerator.is_main_process:
        with open(os.path.join(args.output_dir, METRICS_FILE), "a") as handle:
            handle.write(json.dumps(record) + "\n")
    accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=record["step"])


@dataclasses.dataclass
class Run:
    """What the training loop works with, set up by `setup_run`; `step`, `epoch` and `batches_done` advance."""

    args: TrainArguments
    accelerator: Accelerator
    tokenizer: PreTrainedTokenizerBase
    raw: datasets.DatasetDict
    tokenized: datasets.DatasetDict
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    criterion: TranslationCriterion
    train_data: datasets.Dataset | BpeDropoutPairs | None  # None when streamed
    sampler: TokenBatchSampler | StreamingBatches
    train_loader: DataLoader | StreamingBatches
    batches_per_epoch: int
    max_steps: int
    dropped: dict[str, dict[str, int]]  # pairs left out of the data: {reason: {split: count}}
    resume_checkpoint: str | None = None
    step: int = 0
    epoch: int = 0
    batches_done: int = 0  # of the current epoch
    seconds_before: float = 0.0  # training seconds of the runs this one resumed, up to its checkpoint
    started: float = dataclasses.field(default_factory=time.time)  # when this process's updates began

    def train_seconds(self) -> float:
        """Seconds of training behind the current weights, over every resumed run: each run's time up to the
        checkpoint the next one resumed from, and this run's so far."""
        return self.seconds_before + time.time() - self.started


def start_accelerator(args):
    """Check and clear the output folder, and start accelerate; returns (accelerator, resume checkpoint, its state)."""
    prepare_output_dir(args)
    if args.overwrite_output_dir and not args.resume_from and os.path.isdir(args.output_dir):
        for marker in RUN_MARKERS + ("tokenizer",):
            path = os.path.join(args.output_dir, marker)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    resume_checkpoint = resolve_resume(args.resume_from) if args.resume_from else None
    resume_state = read_state(resume_checkpoint) if resume_checkpoint else None
    trackers = [t for t in args.report_to if t != "none"]
    # gradient accumulation is the loop's own (`train_update`, with `no_sync`): accelerate's counter stays at 1
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        log_with=trackers or None,
        project_dir=args.output_dir,
        cpu=args.cpu,
        # batches are copied to the GPU without waiting (from page-locked memory: see setup_run)
        dataloader_config=DataLoaderConfiguration(non_blocking=True),
    )
    if accelerator.device.type == "cuda":  # float32 matmuls on the tensor cores (TF32), as GPU training expects
        torch.set_float32_matmul_precision("high")
    set_seed(args.seed)
    return accelerator, resume_checkpoint, resume_state


def training_loader(args, raw, tokenized, rows: TrainingRows | None, tokenizer, model, accelerator):
    """The training pairs (re-segmented every epoch with BPE dropout), their token-budget sampler and loader; when
    streamed, no pairs held, and the stream's batches as both sampler and loader."""
    if args.streaming:
        collate = make_collator(tokenizer, model)
        batches = StreamingBatches(*train_stream_source(args), tokenizer, collate, args, accelerator)
        return None, batches, batches
    indices = None
    if args.bpe_dropout:
        # segmented anew every epoch; the first draw also sizes the epochs that --num-epochs counts
        train_data = BpeDropoutPairs(raw["train"], tokenizer, args, args.bpe_dropout)
        train_data.resegment(0, accelerator)
        lengths = train_data.lengths()
    else:
        train_data, lengths, indices = tokenized["train"], (rows.source_lengths, rows.target_lengths), rows.indices
        if len(indices) >= 1_000_000:  # a few seconds per million pairs
            accelerator.print(f"Batching {len(indices):,} training pairs by length, {args.max_tokens} tokens a batch")
    sampler = TokenBatchSampler(
        *lengths, args.max_tokens, seed=args.seed, num_replicas=accelerator.num_processes, indices=indices
    )
    # a private generator: starting a data iterator must not draw from the global RNG that dropout uses,
    # or a resumed run would see different dropout masks from an uninterrupted one
    train_loader = DataLoader(
        train_data,
        batch_sampler=sampler,
        collate_fn=make_collator(tokenizer, model),
        generator=torch.Generator().manual_seed(args.seed),
    )
    return train_data, sampler, train_loader


def prepare_data(args, accelerator) -> tuple:
    """The pairs, the tokenizer and the tokenised splits; and the pairs dropped, by reason and split. A streamed
    training split is not loaded here: the splits are the others, and the training rows None."""
    raw, empty = load_pairs(args)
    # the BPE's corpus is dropped with the call, and with it the last reference to the splits as first mapped
    tokenizer = build_tokenizer(
        args, bpe_corpus(args, raw, train_stream_source(args) if args.streaming else None), accelerator
    )
    release_file_pages(raw)  # the pages that the checks and the BPE's sample read no longer count here
    with accelerator.main_process_first():
        tokenized, rows = tokenize_datasets(raw, tokenizer, args)
    # again after tokenising, which opened the text's files anew, and the pairs' lengths, read from every record batch
    release_file_pages(raw)
    release_file_pages(tokenized)
    dropped = {"empty_side": {split: count for split, count in empty.items() if count}}
    dropped["too_long"] = {"train": rows.dropped} if rows and rows.dropped else {}
    return raw, tokenizer, tokenized, rows, {reason: counts for reason, counts in dropped.items() if counts}


def setup_run(args) -> Run:
    """Data, tokenizer, model, optimizer and schedule, prepared by accelerate and restored from a checkpoint."""
    accelerator, resume_checkpoint, resume_state = start_accelerator(args)
    raw, tokenizer, tokenized, rows, dropped = prepare_data(args, accelerator)
    trim_freed_memory()
    model = build_model(args, tokenizer)
    train_data, sampler, train_loader = training_loader(args, raw, tokenized, rows, tokenizer, model, accelerator)
    train_loader.pin_memory = accelerator.device.type == "cuda"  # page-locked batches, for non-blocking copies
    # fused: one kernel updates every parameter (CPU and CUDA), instead of a handful of small ops per tensor
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1.0,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        weight_decay=args.weight_decay,
        fused=accelerator.device.type in ("cpu", "cuda"),
    )
    schedule_optimizer = optimizer  # the schedule drives the parameter groups, shared with the prepared wrapper
    if args.streaming:  # every process reads the stream and takes its share of the batches (streaming.py)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    batches_per_epoch = 0 if args.streaming else len(train_loader)  # a stream's is unknown: --max-steps is given
    if resume_state and args.bpe_dropout:
        # each draw batches a little differently: a resumed run keeps the epoch size, so the length and the schedule,
        # of its first draw
        batches_per_epoch = resume_state.get("batches_per_epoch", batches_per_epoch)
    max_steps = args.max_steps or args.num_epochs * math.ceil(batches_per_epoch / args.gradient_accumulation_steps)
    if args.cooldown_steps > max_steps:
        raise ValueError(f"--cooldown-steps {args.cooldown_steps} is longer than the run ({max_steps} updates)")
    # the schedule counts optimizer updates (§5.3): it is stepped by hand, once per update, not prepared
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        schedule_optimizer,
        lr_lambda(args.d_model, args.warmup_steps, args.lr, total_steps=max_steps, cooldown_steps=args.cooldown_steps),
    )
    accelerator.register_for_checkpointing(scheduler)
    init_trackers(args, accelerator)
    run = Run(
        args,
        accelerator,
        tokenizer,
        raw,
        tokenized,
        model,
        optimizer,
        scheduler,
        TranslationCriterion.from_args(args, tokenizer),
        train_data,
        sampler,
        train_loader,
        batches_per_epoch,
        max_steps,
        dropped,
        resume_checkpoint,
    )
    if resume_checkpoint:
        resume(run, resume_state)
    return run


def init_trackers(args, accelerator) -> None:
    if any(t != "none" for t in args.report_to):
        accelerator.init_trackers(
            "vanilla-transformer",
            config={k: v for k, v in dataclasses.asdict(args).items() if isinstance(v, (int, float, str, bool))},
        )


def resume(run: Run, state: dict) -> None:
    """Load the checkpoint's weights, optimizer, schedule and RNG states, and go on from its update. A model or
    tokenizer that differs from the checkpoint's is refused first, in one line naming the setting."""
    check_resume_matches(run.resume_checkpoint, state, run.model, run.tokenizer, run.args)
    if run.args.streaming != ("stream" in state):
        written = "with" if "stream" in state else "without"
        raise ValueError(
            f"--resume-from {run.resume_checkpoint}: the checkpoint was written by a run {written} --streaming, "
            f"which orders the data differently; resume it {written} --streaming"
        )
    run.accelerator.load_state(run.resume_checkpoint)
    run.step, run.epoch, run.batches_done = (state[key] for key in ("step", "epoch", "batches_in_epoch"))
    run.seconds_before = state.get("train_seconds", 0.0)  # absent from checkpoints written before it was recorded
    if run.args.streaming:
        run.sampler.resume(state["stream"])
    if run.accelerator.is_main_process:
        forget_metrics_after(run.args.output_dir, run.step)
    run.accelerator.print(f"Resumed from {run.resume_checkpoint} at step {run.step}.")


def epoch_updates(run: Run):
    """The rest of the current epoch's batches, in the micro-batch groups of one optimizer update each:
    --gradient-accumulation-steps batches, fewer in the epoch's last group. An update's batches are all fetched
    before it starts, so that its target tokens are known."""
    args = run.args
    if args.streaming:  # a resumed stream starts where its checkpoint says (`resume`)
        loader = run.train_loader
    elif run.batches_done:
        loader = run.accelerator.skip_first_batches(run.train_loader, run.batches_done)
    else:
        loader = run.train_loader
    # the sampler's shuffle follows the epoch. accelerate's loaders hand the sampler their own count of passes,
    # which restarts at 0 in a resumed run, and a skipping loader does not pass it on: set both
    loader.set_epoch(run.epoch)
    run.sampler.set_epoch(run.epoch)
    if args.bpe_dropout and run.train_data.epoch != run.epoch:
        run.train_data.resegment(run.epoch, run.accelerator)
        run.sampler.set_lengths(*run.train_data.lengths())
    group = []
    for batch in loader:
        if len(group) == args.gradient_accumulation_steps:
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
    (loss sum, NLL sum, target tokens) over all micro-batches and processes. Raises `NonFiniteLoss` before any
    backward pass of a micro-batch whose loss is not finite.

    fairseq's normalisation: the update's summed loss over its total target tokens, counted over all its micro-batches
    and processes before the first forward pass, so that a micro-batch weighs by its tokens. Gradients are
    synchronised across processes only on the last micro-batch (accelerate's `no_sync` before it, the way accelerate
    documents accumulation that a loop controls itself), and each micro-batch's summed loss is scaled so that DDP's
    average over the processes (and accelerate's division by its own accumulation steps, where an `Accelerator` is
    given them) is undone: with one process and one micro-batch it is exactly the batch's loss over its tokens.
    """
    sample_size = accelerator.reduce(sum(criterion.sample_size(batch) for batch in group), reduction="sum")
    scale = accelerator.gradient_accumulation_steps * accelerator.num_processes
    totals = torch.zeros(3)
    for index, batch in enumerate(group):
        last = index == len(group) - 1
        with contextlib.nullcontext() if last else accelerator.no_sync(model):
            loss, _, logging = criterion(model, batch)
            micro = accelerator.reduce(
                torch.stack([logging["loss"], logging["nll_loss"], logging["target_tokens"].float()]), reduction="sum"
            )
            if not torch.isfinite(micro[0]):
                raise NonFiniteLoss(micro[0].item())
            accelerator.backward(loss / sample_size if scale == 1 else loss * scale / sample_size)
        totals += micro.cpu()
    return totals


def train_update(run: Run, group: list[dict]) -> torch.Tensor:
    """One optimizer update over its micro-batches: accumulate, clip, step; returns the update's totals (see
    `accumulate_gradients`). A non-finite loss stops the run before the update is applied, naming the last good
    checkpoint."""
    try:
        totals = accumulate_gradients(run.accelerator, run.model, run.criterion, group)
    except NonFiniteLoss as error:
        last = list_checkpoints(run.args.output_dir)
        raise TrainingStopped(
            f"{error} at step {run.step + 1}; training stopped. The last good "
            f"checkpoint is {last[-1] if last else 'none (no checkpoint was saved yet)'}; resume from it "
            "with a lower --lr or more --warmup-steps."
        ) from error
    if run.args.clip_norm > 0:
        run.accelerator.clip_grad_norm_(run.model.parameters(), run.args.clip_norm)
    run.optimizer.step()
    run.optimizer.zero_grad()
    run.scheduler.step()
    run.step += 1
    return totals


@dataclasses.dataclass
class Throughput:
    """Target tokens since the last logged rate, and when that window started."""

    tokens: float = 0.0
    start: float = dataclasses.field(default_factory=time.time)


def update_record(run: Run, totals: torch.Tensor, window: Throughput, progress) -> dict:
    """The metrics.jsonl record of the update just made, with the token rate every --log-steps updates."""
    loss_sum, nll_sum, tokens = totals.tolist()
    window.tokens += tokens
    record = {
        "step": run.step,
        "epoch": run.epoch,
        "loss": round(loss_sum / tokens, 4),
        "nll_loss": round(nll_sum / tokens, 4),
        "lr": run.scheduler.get_last_lr()[0],
        "target_tokens": int(tokens),
    }
    if run.step % run.args.log_steps == 0 or run.step == run.max_steps:
        elapsed = time.time() - window.start
        record["tokens_per_second"] = round(window.tokens / max(elapsed, 1e-9), 1)
        window.tokens, window.start = 0, time.time()
        progress.set_postfix(loss=record["loss"], lr=f"{record['lr']:.2e}", tok_s=record["tokens_per_second"])
    return record


def validate(run: Run, record: dict) -> None:
    """Greedy translation scores and the reference cross-entropy on the validation split, added to `record`."""
    args, accelerator, raw, tokenized = run.args, run.accelerator, run.raw, run.tokenized
    metrics, _ = evaluate_split(
        run.model,
        run.tokenizer,
        raw["validation"],
        tokenized["validation"],
        args,
        accelerator,
        num_beams=1,
        max_new_tokens=args.max_target_length,
    )
    metrics.update(
        reference_cross_entropy(run.model, run.tokenizer, raw["validation"], tokenized["validation"], args, accelerator)
    )
    record.update({f"validation_{k}": v for k, v in metrics.items() if not k.endswith("signature")})
    accelerator.print(f"step {run.step}: {summary('validation', metrics)}")


def save_run(run: Run) -> None:
    """Checkpoint the run after its current update, with where it is in the data (for a streamed run, its position in
    the stream), the seconds of training behind it (over resumed runs) and what its weights were built with
    (`built_with`); a failed write stops the run, naming the last whole checkpoint."""
    args = run.args
    state = {
        "step": run.step,
        "epoch": run.epoch,
        "batches_in_epoch": run.batches_done,
        "batches_per_epoch": run.batches_per_epoch,
        "train_seconds": run.train_seconds(),  # unrounded: a short run's first updates may take under 0.05 s
        "built_with": built_with(run.model, run.tokenizer, args),
    }
    if args.streaming:
        state["stream"] = run.sampler.position(run.batches_done)
    try:
        save_checkpoint(run.accelerator, args.output_dir, run.step, state, args.keep_checkpoints)
    except CheckpointWriteError as error:
        raise TrainingStopped(str(error)) from error


def train(args) -> dict:
    """Train a tokenizer and a model as `args` say; returns the final evaluation results."""
    run = setup_run(args)
    saved_at = run.step  # the step of the newest checkpoint on disk (or the start)
    progress = tqdm(
        total=run.max_steps, initial=run.step, disable=not run.accelerator.is_local_main_process, desc="Training"
    )
    run.started, window = time.time(), Throughput()
    run.model.train()
    while run.step < run.max_steps:
        for group in epoch_updates(run):
            run.batches_done += len(group)
            totals = train_update(run, group)
            progress.update(1)
            record = update_record(run, totals, window, progress)
            if args.eval_steps and run.step % args.eval_steps == 0 and "validation" in run.tokenized:
                validate(run, record)
            log_metrics(args, run.accelerator, record)
            if checkpoint_due(run):
                save_run(run)
                saved_at = run.step
            if run.step >= run.max_steps:
                break
        else:
            run.epoch, run.batches_done = run.epoch + 1, 0
    progress.close()
    if args.save_strategy == "steps" and args.save_steps and saved_at != run.step:
        save_run(run)  # the last updates are checkpointed too, so that averaging and resuming see the final state
    return finish(run, run.train_seconds())


def checkpoint_due(run: Run) -> bool:
    """Every --save-steps updates, or with --save-strategy epoch after an epoch's last batch."""
    if run.args.save_strategy == "epoch":
        return run.batches_done >= len(run.train_loader)
    return bool(run.args.save_steps) and run.step % run.args.save_steps == 0


def finish(run: Run, train_seconds: float) -> dict:
    """Average checkpoints if asked, evaluate with beam search, write the model folder and upload it if asked."""
    args, accelerator, model, tokenizer, raw, tokenized = (
        run.args,
        run.accelerator,
        run.model,
        run.tokenizer,
        run.raw,
        run.tokenized,
    )
    accelerator.wait_for_everyone()
    # training is over: drop accelerate's autocast wrapper, so that with --mixed-precision the length-penalty search,
    # the final scores and the saved model all use the float32 weights in float32
    unwrapped = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    results = {
        "train_steps": run.step,
        "train_seconds": round(train_seconds, 3),  # to the millisecond: a tiny run's updates take less than 0.1 s
        "processes": accelerator.num_processes,
    }
    dropped = {**run.dropped, **run.sampler.dropped_pairs()} if run.args.streaming else run.dropped
    if dropped:
        results["dropped_pairs"] = dropped
    tuned = None  # the validation search of the weights kept, when --tune-averaging has run it
    if args.average_checkpoints > 1 and args.tune_averaging and "validation" in tokenized:
        results["averaging_search"], tuned = choose_averaging(args, accelerator, model, unwrapped, run)
    elif args.average_checkpoints > 1:
        average_last_checkpoints(args, accelerator, unwrapped)
    results.update(final_scores(args, accelerator, model, unwrapped, tokenizer, raw, tokenized, tuned))
    if accelerator.is_main_process:  # the card states the length penalty the model was evaluated and saved with
        write_final_model(
            dataclasses.replace(args, length_penalty=results["length_penalty"]), unwrapped, tokenizer, results
        )
    accelerator.wait_for_everyone()
    end_process_group(accelerator)
    accelerator.print(f"Model, tokenizer and results written to {args.output_dir}")
    if args.push_to_hub and accelerator.is_main_process:
        commit = upload_folder(
            args.output_dir,
            args.hub_model_id,
            token=args.hub_token,
            private=args.hub_private_repo,
            commit_message="Upload model trained with vanilla-transformer",
        )
        accelerator.print(f"Uploaded to the Hub: {getattr(commit, 'commit_url', args.hub_model_id)}")
    return results


def end_process_group(accelerator) -> None:
    """End the trackers and the process group after the last collective (`accelerator.end_training`).

    The gloo backend releases each finished collective on its own worker thread, which takes the GIL to free the
    work's tensors. The group itself is freed later, when the last Python object holding it (the wrapped model's
    Reducer) goes, and its destructor joins that thread while holding the GIL: if the thread is still freeing the
    last barrier's work at that moment, neither ever returns (a finished run that never exits, its main thread in
    ~ProcessGroupGloo and the worker in gil_scoped_acquire). A short sleep, which lets go of the GIL, lets the worker
    finish first."""
    if accelerator.num_processes > 1:
        time.sleep(0.1)
    accelerator.end_training()


def average_last_checkpoints(args, accelerator, unwrapped) -> None:
    """Load the mean of the last --average-checkpoints checkpoints' weights into the model."""
    paths = list_checkpoints(args.output_dir)[-args.average_checkpoints :]
    averaged = average_checkpoints(paths)
    missing, unexpected = unwrapped.load_state_dict(averaged, strict=False)
    if unexpected or set(missing) - set(unwrapped.all_tied_weights_keys):
        raise ValueError(f"--average-checkpoints: weights do not match the model ({missing}, {unexpected}).")
    unwrapped.tie_weights()
    accelerator.print(f"Averaged the last {len(paths)} checkpoints.")


def validation_search(args, accelerator, model, tokenizer, raw, tokenized) -> tuple:
    """The validation split decoded with beam search: with --tune-length-penalty for each value, the best chosen.
    Returns (length penalty, {alpha: BLEU} or None, (metrics, hypotheses))."""
    if args.tune_length_penalty:
        return tune_length_penalty(model, tokenizer, raw, tokenized, args, accelerator)
    validation = evaluate_split(model, tokenizer, raw["validation"], tokenized["validation"], args, accelerator)
    return args.length_penalty, None, validation


def choose_averaging(args, accelerator, model, unwrapped, run) -> tuple[dict, tuple]:
    """--tune-averaging: the last update's weights and the mean of the last --average-checkpoints checkpoints, each
    scored on the validation split (BLEU, lowercased with --lowercase); the better stays loaded (a tie keeps the
    average). Returns the comparison and the kept weights' `validation_search`."""
    score = "bleu_lowercase" if args.lowercase else "bleu"
    last_update = {name: value.clone() for name, value in unwrapped.state_dict().items()}
    searches = {}
    for name in ("last_update", "average"):
        if name == "average":
            average_last_checkpoints(args, accelerator, unwrapped)
        searches[name] = validation_search(args, accelerator, model, run.tokenizer, run.raw, run.tokenized)
        accelerator.print(f"{name.replace('_', ' ')}: validation {score} {searches[name][2][0][score]}")
    chosen = max(("average", "last_update"), key=lambda name: searches[name][2][0][score])
    if chosen == "last_update":
        unwrapped.load_state_dict(last_update)
    accelerator.print(f"Kept the {chosen.replace('_', ' ')}'s weights, chosen on the validation split.")
    comparison = {
        name: {f"validation_{score}": search[2][0][score], "length_penalty": search[0]}
        for name, search in searches.items()
    }
    return {**comparison, "checkpoints_averaged": args.average_checkpoints, "chosen": chosen}, searches[chosen]


def final_scores(args, accelerator, model, unwrapped, tokenizer, raw, tokenized, tuned: tuple | None = None) -> dict:
    """Choose the length penalty on validation if asked (or take `tuned`, a `validation_search` already run), then
    score validation and test with beam search and print the scores and a few translations."""
    results, validation, length_penalty = {}, None, args.length_penalty
    if tuned is None and args.tune_length_penalty and "validation" in tokenized:
        tuned = validation_search(args, accelerator, model, tokenizer, raw, tokenized)
    if tuned is not None:
        length_penalty, search, validation = tuned
        if search is not None:
            results["length_penalty_search"] = search
            unwrapped.generation_config.length_penalty = length_penalty  # the test split and the saved model use it
    results["length_penalty"] = length_penalty
    samples = []
    for split in ("validation", "test"):
        if split not in tokenized:
            continue
        if split == "validation" and validation is not None:
            metrics, hypotheses = validation
        else:
            metrics, hypotheses = evaluate_split(model, tokenizer, raw[split], tokenized[split], args, accelerator)
        metrics.update(reference_cross_entropy(model, tokenizer, raw[split], tokenized[split], args, accelerator))
        results[split] = metrics
        accelerator.print(f"{summary(split, metrics)}  [{metrics['bleu_signature']}]")
        if not samples:
            samples = [
                (pair[args.source_lang], pair[args.target_lang], hyp)
                for pair, hyp in zip(raw[split]["translation"][: args.show_samples], hypotheses)
            ]
    for source, reference, hypothesis in samples:
        accelerator.print(f"  {source}\n    -> {hypothesis}\n    (reference: {reference})")
    return results


def write_final_model(args, unwrapped, tokenizer, results: dict) -> None:
    """Write the model, tokenizer, scores, card and curves into the output folder (main process only)."""
    try:
        unwrapped.save_pretrained(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
        with open(os.path.join(args.output_dir, "eval_results.json"), "w") as handle:
            json.dump(results, handle, indent=2)
        write_run_card(args, unwrapped, results)
    except OSError as error:
        last = list_checkpoints(args.output_dir)
        raise TrainingStopped(
            f"could not write the final model to {args.output_dir}: {error.strerror or error}. The checkpoints "
            f"are untouched (last: {last[-1] if last else 'none'}); free space, then run again with --resume-from "
            "to evaluate and save."
        ) from error
    from .plots import plot_run

    plot_run(args.output_dir, quiet=True)


__all__ = ["train", "finish", "TrainingStopped"]
