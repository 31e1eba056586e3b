"""The training loop: plain functions around `accelerator.prepare`, `accumulate`, `gather_for_metrics` and
`save_state`/`load_state`."""

import contextlib
import ctypes
import json
import math
import os
import shutil
import tempfile
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import GenerationConfig

from ..configuration import VanillaTransformerConfig
from ..modeling import VanillaTransformerForConditionalGeneration
from ..modeling.kernels_vanilla_transformer import token_cross_entropy
from ..modeling.hub_vanilla_transformer import upload_folder
from .card import write_run_card
from .checkpoints import (
    CheckpointWriteError,
    average_checkpoints,
    list_checkpoints,
    read_state,
    resolve_resume,
    save_checkpoint,
)
from .criterion import label_smoothed_nll_loss, rdrop_kl_sum
from .data import (BpeDropoutPairs, TokenBatchSampler, drop_words, load_raw_datasets, make_collator,
                   tokenize_datasets, trained_positions)
from .metrics import exact_match_by_group, translation_metrics
from .schedule import lr_lambda
from .tokenizer import load_tokenizer, train_bpe_tokenizer, training_texts

METRICS_FILE = "metrics.jsonl"
RUN_MARKERS = ("config.json", "model.safetensors", METRICS_FILE, "checkpoints")


class TrainingStopped(RuntimeError):
    """The run stopped on purpose (a non-finite loss); the last good checkpoint is kept."""


# --------------------------------------------------------------------------------------------------------------------
# Setting up
# --------------------------------------------------------------------------------------------------------------------


def keep_freed_memory_mapped() -> bool:
    """Ask glibc to keep freed memory instead of returning it to the kernel; returns whether it could.

    On the CPU every training step allocates and frees the same large tensors (the (tokens, vocab) logits and their
    gradient are 128 MiB at 4096 tokens and 8000 types). glibc serves blocks that large with fresh mmap calls and
    unmaps them when freed, so each step pays a page fault per 4 KiB page touched: about 15% of a Multi30k tiny
    step. Served from the heap and never trimmed, the pages stay mapped from one step to the next. This is the
    training command's own process setting (the same as MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...); importing
    the package changes nothing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: leave the allocator alone
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # from <malloc.h>
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


def flush_denormals() -> bool:
    """Make the CPU treat float32 denormals (magnitudes below 1.2e-38) as zero; returns whether it could.

    A trained model's attention weights hold denormals: the softmax of well-separated scores underflows into them
    (about 1% of the weights of the Multi30k tiny model after training, none at initialisation). x86 CPUs handle
    denormal operands in microcode: the batched product of such weights with the values takes about 3x as long. So
    float32 training slows down as the model learns, by about 9% over a Multi30k run. Flushed to zero, they cost
    nothing, and they change no sum of the sizes a model works with. This is the command's own process setting,
    like the allocator's: importing the package changes nothing.
    """
    return torch.set_flush_denormal(True)


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


def build_tokenizer(args, raw, accelerator):
    if args.tokenizer_name:
        return load_tokenizer(args.tokenizer_name)
    if args.resume_from and os.path.isfile(os.path.join(args.output_dir, "tokenizer", "tokenizer.json")):
        return load_tokenizer(os.path.join(args.output_dir, "tokenizer"))
    folder = os.path.join(args.output_dir, "tokenizer")
    if accelerator.is_main_process:
        tokenizer = train_bpe_tokenizer(
            training_texts(raw, args.source_lang, args.target_lang), args.vocab_size, lowercase=args.lowercase)
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()
    return load_tokenizer(folder)


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
        max_position_embeddings=trained_positions(args),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config = generation_config(args, config)
    return model


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
# Evaluation
# --------------------------------------------------------------------------------------------------------------------


def split_loader(tokenized, columns: tuple[str, ...], tokenizer, accelerator, batch_size: int):
    """Padded batches of the given columns of a tokenised split, sharded over the processes."""
    loader = DataLoader(
        tokenized.remove_columns([c for c in tokenized.column_names if c not in columns]),
        batch_size=batch_size,
        collate_fn=make_collator(tokenizer),
    )
    return accelerator.prepare_data_loader(loader)


@contextlib.contextmanager
def eval_mode(model):
    """Dropout off for the block; the model's training mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.no_grad()
def translate_dataset(model, tokenizer, tokenized, accelerator, batch_size: int, **generate_kwargs) -> list[str]:
    """Beam-search translations of a tokenised split, generated on every process and gathered in order."""
    hypotheses = []
    with eval_mode(accelerator.unwrap_model(model)) as unwrapped:
        for batch in split_loader(tokenized, ("input_ids",), tokenizer, accelerator, batch_size):
            generated = unwrapped.generate(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **generate_kwargs
            )
            generated = accelerator.pad_across_processes(generated, dim=1, pad_index=tokenizer.pad_token_id)
            generated = accelerator.gather_for_metrics(generated)
            hypotheses += tokenizer.batch_decode(generated, skip_special_tokens=True)
    return [h.strip() for h in hypotheses]


def evaluate_split(model, tokenizer, raw_split, tokenized_split, args, accelerator, **generate_kwargs):
    hypotheses = translate_dataset(model, tokenizer, tokenized_split, accelerator, args.eval_batch_size,
                                   **generate_kwargs)
    references = [pair[args.target_lang] for pair in raw_split["translation"]]
    metrics = translation_metrics(hypotheses, references)
    if "digits" in raw_split.column_names:  # the embedded task: exact match first, and per magnitude
        by_digits = exact_match_by_group(hypotheses, references, raw_split["digits"])
        metrics = {"exact_match": metrics.pop("exact_match"), "exact_match_by_digits": by_digits, **metrics}
    return metrics, hypotheses


def summary(split: str, metrics: dict) -> str:
    """One line of scores. Where exact match is the figure to read (the embedded task, whose one-word outputs leave
    BLEU's 2- to 4-gram precisions empty), it comes first, with its figure per digit count."""
    scores = (f"BLEU {metrics['bleu']} (lowercased {metrics['bleu_lowercase']}), chrF {metrics['chrf']} "
              f"(lowercased {metrics['chrf_lowercase']})")
    if "cross_entropy" in metrics:
        scores += f", cross-entropy {metrics['cross_entropy']} per token"
    if "exact_match_by_digits" in metrics:
        by_digits = ", ".join(f"{d} digits {v}%" for d, v in metrics["exact_match_by_digits"].items())
        return f"{split}: exact match {metrics['exact_match']}% ({by_digits}); {scores}"
    return f"{split}: {scores}, exact match {metrics['exact_match']}%"


@torch.no_grad()
def reference_cross_entropy(model, tokenizer, raw_split, tokenized_split, args, accelerator) -> dict[str, float]:
    """How well the model predicts the reference translations, with dropout off and without label smoothing: the
    cross-entropy in nats per target token (end-of-sentence included) and its perplexity, and in nats per reference
    word (whitespace-separated), which stays comparable between runs whose BPE vocabularies differ."""
    nll, tokens = [], []
    with eval_mode(accelerator.unwrap_model(model)) as unwrapped:
        for batch in split_loader(tokenized_split, ("input_ids", "labels"), tokenizer, accelerator,
                                  args.eval_batch_size):
            labels = batch["labels"]  # (batch, tgt_len), -100 at padding
            logits = unwrapped(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               decoder_input_ids=unwrapped.prepare_decoder_input_ids_from_labels(labels)).logits
            per_token, _ = token_cross_entropy(logits, labels)  # (batch * tgt_len,), 0 at padding
            nll.append(accelerator.gather_for_metrics(per_token.view(labels.shape).sum(dim=1).double()))
            tokens.append(accelerator.gather_for_metrics((labels != -100).sum(dim=1)))
    total = torch.cat(nll).sum().item()
    words = sum(len(pair[args.target_lang].split()) for pair in raw_split["translation"])
    per_token = total / torch.cat(tokens).sum().item()
    return {"cross_entropy": round(per_token, 4), "perplexity": round(math.exp(per_token), 3),
            "cross_entropy_per_word": round(total / max(words, 1), 4)}


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


def save_training_state(accelerator, args, step: int, epoch: int, batches_done: int, batches_per_epoch: int) -> None:
    """Checkpoint the run after update `step`; a failed write stops the run, naming the last whole checkpoint."""
    state = {"step": step, "epoch": epoch, "batches_in_epoch": batches_done, "batches_per_epoch": batches_per_epoch}
    try:
        save_checkpoint(accelerator, args.output_dir, step, state, args.keep_checkpoints)
    except CheckpointWriteError as error:
        raise TrainingStopped(str(error)) from error


def log_metrics(args, accelerator, record: dict) -> None:
    if accelerator.is_main_process:
        with open(os.path.join(args.output_dir, METRICS_FILE), "a") as handle:
            handle.write(json.dumps(record) + "\n")
    accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=record["step"])


def train(args) -> dict:
    """Train a tokenizer and a model as `args` say; returns the final evaluation results."""
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
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with=trackers or None,
        project_dir=args.output_dir,
        cpu=args.cpu,
    )
    set_seed(args.seed)
    if accelerator.device.type == "cpu":
        keep_freed_memory_mapped()
        flush_denormals()

    raw = load_raw_datasets(args)
    tokenizer = build_tokenizer(args, raw, accelerator)
    with accelerator.main_process_first():
        tokenized = tokenize_datasets(raw, tokenizer, args)
    model = build_model(args, tokenizer)

    if args.bpe_dropout:
        # segmented anew every epoch; the first draw also sizes the epochs that --num-epochs counts
        train_data = BpeDropoutPairs(raw["train"], tokenizer, args, args.bpe_dropout)
        train_data.resegment(0, accelerator)
        lengths = train_data.lengths()
    else:
        train_data = tokenized["train"]
        lengths = [len(x) for x in train_data["input_ids"]], [len(x) for x in train_data["labels"]]
    sampler = TokenBatchSampler(*lengths, args.max_tokens, seed=args.seed, num_replicas=accelerator.num_processes)
    # a private generator: starting a data iterator must not draw from the global RNG that dropout uses,
    # or a resumed run would see different dropout masks from an uninterrupted one
    train_loader = DataLoader(train_data, batch_sampler=sampler, collate_fn=make_collator(tokenizer, model),
                              generator=torch.Generator().manual_seed(args.seed))
    # fused: one kernel updates every parameter (CPU and CUDA), instead of a handful of small ops per tensor
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,
                                 weight_decay=args.weight_decay, fused=accelerator.device.type in ("cpu", "cuda"))
    schedule_optimizer = optimizer  # the schedule drives the parameter groups, shared with the prepared wrapper
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    batches_per_epoch = len(train_loader)
    if resume_state and args.bpe_dropout:
        # each draw batches a little differently: a resumed run keeps the epoch size, so the length and the schedule,
        # of its first draw
        batches_per_epoch = resume_state.get("batches_per_epoch", batches_per_epoch)
    max_steps = args.max_steps or args.num_epochs * math.ceil(batches_per_epoch / args.gradient_accumulation_steps)
    if args.cooldown_steps > max_steps:
        raise ValueError(f"--cooldown-steps {args.cooldown_steps} is longer than the run ({max_steps} updates)")
    # the schedule counts optimizer updates (§5.3): it is stepped by hand, once per update, not prepared
    scheduler = torch.optim.lr_scheduler.LambdaLR(schedule_optimizer, lr_lambda(
        args.d_model, args.warmup_steps, args.lr, total_steps=max_steps, cooldown_steps=args.cooldown_steps))
    accelerator.register_for_checkpointing(scheduler)
    if trackers:
        accelerator.init_trackers("vanilla-transformer", config={k: v for k, v in vars(args).items()
                                                                 if isinstance(v, (int, float, str, bool))})

    step, epoch, batches_done = 0, 0, 0
    if resume_checkpoint:
        accelerator.load_state(resume_checkpoint)
        step, epoch, batches_done = (resume_state[key] for key in ("step", "epoch", "batches_in_epoch"))
        if accelerator.is_main_process:
            forget_metrics_after(args.output_dir, step)
        accelerator.print(f"Resumed from {resume_checkpoint} at step {step}.")

    saved_at = step  # the step of the newest checkpoint on disk (or the start)
    progress = tqdm(total=max_steps, initial=step, disable=not accelerator.is_local_main_process, desc="Training")
    started, window_tokens, window_start = time.time(), 0, time.time()
    update_totals = torch.zeros(3)  # loss sum, NLL sum, target tokens over the micro-batches of one update
    special_ids = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)  # word dropout keeps them
    model.train()
    while step < max_steps:
        loader = accelerator.skip_first_batches(train_loader, batches_done) if batches_done else train_loader
        # the sampler's shuffle follows the epoch. accelerate's loaders hand the sampler their own count of passes,
        # which restarts at 0 in a resumed run, and a skipping loader does not pass it on: set both
        loader.set_epoch(epoch)
        sampler.set_epoch(epoch)
        if args.bpe_dropout and train_data.epoch != epoch:
            train_data.resegment(epoch, accelerator)
            sampler.set_lengths(*train_data.lengths())
        for batch in loader:
            batches_done += 1
            with accelerator.accumulate(model):
                inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "decoder_input_ids", "labels")}
                if args.word_dropout:
                    for key in ("input_ids", "decoder_input_ids"):
                        inputs[key] = drop_words(inputs[key], args.word_dropout, tokenizer.unk_token_id, special_ids)
                if args.rdrop_alpha:  # R-Drop: the batch twice, through two dropout masks
                    inputs = {key: torch.cat([value, value]) for key, value in inputs.items()}
                labels = inputs.pop("labels")
                logits = model(**inputs, use_cache=False).logits
                loss_sum, nll_sum, tokens = label_smoothed_nll_loss(logits, labels, args.label_smoothing)
                if args.rdrop_alpha:
                    # fairseq's weighting: both passes' cross-entropy plus alpha times the symmetric KL, normalised
                    # by the target tokens of both passes; logged per distinct target token, like the plain loss
                    loss = (loss_sum + args.rdrop_alpha * rdrop_kl_sum(logits, labels)) / tokens
                    loss_sum, nll_sum, tokens = loss_sum / 2, nll_sum / 2, tokens // 2
                else:
                    loss = loss_sum / tokens  # normalised by the non-pad target tokens
                totals = accelerator.reduce(torch.stack([loss_sum.detach(), nll_sum.detach(), tokens.float()]),
                                            reduction="sum")
                if not torch.isfinite(totals[0]):
                    last = list_checkpoints(args.output_dir)
                    raise TrainingStopped(
                        f"the loss became {totals[0].item()} at step {step + 1}; training stopped. The last good "
                        f"checkpoint is {last[-1] if last else 'none (no checkpoint was saved yet)'}; resume from it "
                        "with a lower --lr or more --warmup-steps."
                    )
                accelerator.backward(loss)
                if accelerator.sync_gradients and args.clip_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), args.clip_norm)
                optimizer.step()
                optimizer.zero_grad()
            update_totals += totals.cpu()
            if not accelerator.sync_gradients:
                continue
            scheduler.step()
            step += 1
            progress.update(1)
            loss_sum, nll_sum, tokens = update_totals.tolist()
            update_totals.zero_()
            window_tokens += tokens
            record = {
                "step": step, "epoch": epoch,
                "loss": round(loss_sum / tokens, 4), "nll_loss": round(nll_sum / tokens, 4),
                "lr": scheduler.get_last_lr()[0], "target_tokens": int(tokens),
            }
            if step % args.log_steps == 0 or step == max_steps:
                elapsed = time.time() - window_start
                record["tokens_per_second"] = round(window_tokens / max(elapsed, 1e-9), 1)
                window_tokens, window_start = 0, time.time()
                progress.set_postfix(loss=record["loss"], lr=f"{record['lr']:.2e}",
                                     tok_s=record["tokens_per_second"])
            if args.eval_steps and step % args.eval_steps == 0 and "validation" in tokenized:
                metrics, _ = evaluate_split(model, tokenizer, raw["validation"], tokenized["validation"], args,
                                            accelerator, num_beams=1, max_new_tokens=args.max_target_length)
                metrics.update(reference_cross_entropy(model, tokenizer, raw["validation"], tokenized["validation"],
                                                       args, accelerator))
                record.update({f"validation_{k}": v for k, v in metrics.items() if not k.endswith("signature")})
                accelerator.print(f"step {step}: {summary('validation', metrics)}")
            log_metrics(args, accelerator, record)
            if args.save_steps and step % args.save_steps == 0:
                save_training_state(accelerator, args, step, epoch, batches_done, batches_per_epoch)
                saved_at = step
            if step >= max_steps:
                break
        else:
            epoch, batches_done = epoch + 1, 0
    progress.close()
    if args.save_steps and saved_at != step:
        # the last updates are checkpointed too, so that averaging and resuming see the final state
        save_training_state(accelerator, args, step, epoch, batches_done, batches_per_epoch)
    train_seconds = time.time() - started
    return finish(args, accelerator, model, tokenizer, raw, tokenized, step, train_seconds)


def tune_length_penalty(model, tokenizer, raw, tokenized, args, accelerator):
    """Beam-decode the validation split with each `--tune-length-penalty` value and keep the best BLEU (lowercased
    with `--lowercase`) in `args.length_penalty` (ties go to the earlier value). Returns {alpha: BLEU} and the best
    (metrics, hypotheses)."""
    score = "bleu_lowercase" if args.lowercase else "bleu"  # a lowercasing model writes lowercase
    search, best = {}, None
    for alpha in args.tune_length_penalty:
        metrics, hypotheses = evaluate_split(model, tokenizer, raw["validation"], tokenized["validation"], args,
                                             accelerator, length_penalty=alpha)
        search[str(alpha)] = metrics[score]
        accelerator.print(f"length penalty {alpha}: validation {score} {metrics[score]}")
        if best is None or metrics[score] > best[1][0][score]:
            best = (alpha, (metrics, hypotheses))
    args.length_penalty = best[0]
    accelerator.print(f"Chose length penalty {best[0]} on the validation split.")
    return search, best[1]


def finish(args, accelerator, model, tokenizer, raw, tokenized, step, train_seconds) -> dict:
    """Average checkpoints if asked, evaluate with beam search, and write the model folder."""
    accelerator.wait_for_everyone()
    # training is over: drop accelerate's autocast wrapper, so that with --mixed-precision the length-penalty search,
    # the final scores and the saved model all use the float32 weights in float32
    unwrapped = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    if args.average_checkpoints > 1:
        paths = list_checkpoints(args.output_dir)[-args.average_checkpoints:]
        averaged = average_checkpoints(paths)
        missing, unexpected = unwrapped.load_state_dict(averaged, strict=False)
        if unexpected or set(missing) - set(unwrapped.all_tied_weights_keys):
            raise ValueError(f"--average-checkpoints: weights do not match the model ({missing}, {unexpected}).")
        unwrapped.tie_weights()
        accelerator.print(f"Averaged the last {len(paths)} checkpoints.")

    results = {"train_steps": step, "train_seconds": round(train_seconds, 1), "processes": accelerator.num_processes}
    validation = None
    if args.tune_length_penalty and "validation" in tokenized:
        results["length_penalty_search"], validation = tune_length_penalty(
            model, tokenizer, raw, tokenized, args, accelerator)
        unwrapped.generation_config.length_penalty = args.length_penalty  # the test split and the saved model use it
    results["length_penalty"] = args.length_penalty
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
            samples = [(pair[args.source_lang], pair[args.target_lang], hyp)
                       for pair, hyp in zip(raw[split]["translation"][: args.show_samples], hypotheses)]
    for source, reference, hypothesis in samples:
        accelerator.print(f"  {source}\n    -> {hypothesis}\n    (reference: {reference})")

    if accelerator.is_main_process:
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
    accelerator.wait_for_everyone()
    accelerator.end_training()
    accelerator.print(f"Model, tokenizer and results written to {args.output_dir}")
    if args.push_to_hub and accelerator.is_main_process:
        commit = upload_folder(args.output_dir, args.hub_model_id, token=args.hub_token,
                               private=args.hub_private_repo,
                               commit_message="Upload model trained with vanilla-transformer")
        accelerator.print(f"Uploaded to the Hub: {getattr(commit, 'commit_url', args.hub_model_id)}")
    return results


__all__ = ["train", "finish", "translate_dataset", "TrainingStopped"]
