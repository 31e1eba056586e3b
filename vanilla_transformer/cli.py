"""The `vanilla-transformer` command: train, evaluate, translate, export, attention, plot."""

import argparse
import math
import os
import sys

from .errors import CommandError

# Model and schedule sizes. "numbers" trains the embedded task quickly on a CPU; "small" suits Multi30k-sized
# corpora; "tiny" is the Transformer-Tiny of Wu et al. (2021), the best text-only Multi30k model, with their learning
# rate and warm-up, and a schedule sized for a CPU run of the Multi30k recipe (two single-thread processes of 2048
# tokens; its duration is in training/recipes/RESULTS.md); "base" is the paper's base model and schedule (§5.3).
PRESETS = {
    # numbers: a 200-token BPE keeps the German pieces short ("▁zwei", "undvierzig"), so that a number held out of
    # training is composed of pieces seen in others, while "null" is still one piece
    "numbers": dict(
        d_model=128,
        num_heads=4,
        d_ff=512,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        bpe_dropout=0.0,
        vocab_size=200,
        max_tokens=4096,
        warmup_steps=200,
        cooldown_steps=0,
        lr=2e-3,
        max_steps=600,
        num_epochs=None,
        eval_steps=300,
        save_steps=300,
        max_source_length=32,
        max_target_length=32,
    ),
    "small": dict(
        d_model=256,
        num_heads=4,
        d_ff=1024,
        encoder_layers=3,
        decoder_layers=3,
        dropout=0.3,
        attention_dropout=0.0,
        activation_dropout=0.0,
        bpe_dropout=0.0,
        vocab_size=8000,
        max_tokens=4096,
        warmup_steps=500,
        cooldown_steps=0,
        lr=1e-3,
        max_steps=None,
        num_epochs=10,
        eval_steps=1000,
        save_steps=1000,
        max_source_length=128,
        max_target_length=128,
    ),
    # Transformer-Tiny for Multi30k: also dropout 0.1 on the attention weights and after the FFN's ReLU, which raised
    # validation and test BLEU (the comparison is in training/recipes/RESULTS.md)
    "tiny": dict(
        d_model=128,
        num_heads=4,
        d_ff=256,
        encoder_layers=4,
        decoder_layers=4,
        dropout=0.3,
        attention_dropout=0.1,
        activation_dropout=0.1,
        bpe_dropout=0.0,
        vocab_size=8000,
        max_tokens=4096,
        warmup_steps=2000,
        cooldown_steps=2000,
        lr=5e-3,
        max_steps=None,
        num_epochs=70,
        eval_steps=500,
        save_steps=120,
        max_source_length=128,
        max_target_length=128,
    ),
    "base": dict(
        d_model=512,
        num_heads=8,
        d_ff=2048,
        encoder_layers=6,
        decoder_layers=6,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        bpe_dropout=0.0,
        vocab_size=37000,
        max_tokens=25000,
        warmup_steps=4000,
        cooldown_steps=0,
        lr=None,
        max_steps=100_000,
        num_epochs=None,
        eval_steps=5000,
        save_steps=5000,
        max_source_length=256,
        max_target_length=256,
    ),
}


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a value in [0, 1), got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data (default: the embedded English->German number task)")
    group.add_argument("--dataset-name", help="a Hub dataset in the translation schema")
    group.add_argument("--dataset-config", help="configuration of --dataset-name, e.g. de-en")
    group.add_argument(
        "--train-file",
        help="JSON lines, CSV or Parquet, either with a 'translation' column of "
        "{source: ..., target: ...} pairs (in CSV a JSON object per cell) or with one text column per "
        "language, named as --source-lang and --target-lang",
    )
    group.add_argument("--validation-file")
    group.add_argument("--test-file")
    group.add_argument("--source-lang", default="en")
    group.add_argument("--target-lang", default="de")
    group.add_argument(
        "--max-source-length",
        type=positive_int,
        help="longest source in tokens (longer pairs are dropped from training)",
    )
    group.add_argument(
        "--max-target-length", type=positive_int, help="longest target in tokens; also the generation limit"
    )


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-beams", type=positive_int, default=5)
    parser.add_argument(
        "--length-penalty",
        type=float,
        help="beam score = log p / length^alpha (default: the model's generation config; 1.0 for a new model)",
    )
    parser.add_argument("--eval-batch-size", type=positive_int, default=64)


def add_run_arguments(train: argparse.ArgumentParser) -> None:
    train.add_argument("--output-dir", default=None, help="where the model folder is written (default: runs/<task>)")
    train.add_argument("--overwrite-output-dir", action="store_true")
    train.add_argument(
        "--preset", choices=sorted(PRESETS), help="size defaults; 'numbers' without data, 'small' with data"
    )
    train.add_argument(
        "--seed",
        type=int,
        default=42,
        help="fixes the tokenizer, data order, initialisation and "
        "dropout: on CPU the same seed, data and thread count give bit-identical weights; on GPU, "
        "kernels may sum in another order, so runs agree closely but not bit for bit",
    )


def add_model_arguments(train: argparse.ArgumentParser) -> None:
    model = train.add_argument_group("model")
    model.add_argument("--d-model", type=positive_int)
    model.add_argument("--num-heads", type=positive_int)
    model.add_argument("--d-ff", type=positive_int)
    model.add_argument("--encoder-layers", type=positive_int)
    model.add_argument("--decoder-layers", type=positive_int)
    model.add_argument("--dropout", type=probability)
    model.add_argument(
        "--attention-dropout",
        type=probability,
        help="dropout on the attention weights (default: the preset's; 0 in the paper)",
    )
    model.add_argument(
        "--activation-dropout",
        type=probability,
        help="dropout after the FFN's ReLU (default: the preset's; 0 in the paper)",
    )
    model.add_argument("--norm-position", choices=["post", "pre"], default="post")
    model.add_argument("--position-encoding", choices=["sinusoidal", "learned"], default="sinusoidal")
    model.add_argument("--no-share-embeddings", dest="share_embeddings", action="store_false")


def add_tokenizer_arguments(train: argparse.ArgumentParser) -> None:
    tok = train.add_argument_group("tokenizer")
    tok.add_argument("--vocab-size", type=positive_int, help="joint BPE vocabulary size")
    tok.add_argument("--tokenizer-name", help="use this tokenizer (folder or Hub name) instead of training one")
    tok.add_argument(
        "--bpe-dropout",
        type=probability,
        help="BPE-dropout (Provilkov et al. 2020): segment the "
        "training pairs anew every epoch, skipping each merge with this probability; evaluation and "
        "translation segment without it. The draws come from the tokenizers library's own generator, "
        "which --seed does not fix (default: the preset's; 0 in every preset)",
    )
    tok.add_argument(
        "--lowercase",
        action="store_true",
        help="the trained tokenizer lowercases all text (the usual Multi30k preprocessing); the model "
        "then writes lowercase, so compare it by lowercased BLEU. References are never changed.",
    )


def add_optimisation_arguments(train: argparse.ArgumentParser) -> None:
    opt = train.add_argument_group("optimisation")
    opt.add_argument("--max-tokens", type=positive_int, help="tokens per batch (per process)")
    opt.add_argument("--max-steps", type=positive_int, help="optimizer updates")
    opt.add_argument("--num-epochs", type=positive_int, help="used when --max-steps is not given")
    opt.add_argument("--label-smoothing", type=probability, default=0.1)
    opt.add_argument(
        "--rdrop-alpha",
        type=non_negative_float,
        default=0.0,
        help="R-Drop (Liang et al. 2021): every batch goes through the model twice, under two dropout "
        "masks, and the loss adds this weight times the symmetric KL divergence of the two predictions "
        "(fairseq's weighting; 5 in its translation examples). Each update then costs about twice as "
        "much. 0 turns it off",
    )
    opt.add_argument(
        "--word-dropout",
        type=probability,
        default=0.0,
        help="word dropout (Token Drop, Zhang et al. 2020): in training batches, replace each source "
        "token and each decoder input token with <unk> with this probability; the labels stay whole. "
        "0 turns it off",
    )
    opt.add_argument("--warmup-steps", type=positive_int)
    opt.add_argument(
        "--lr", type=positive_float, help="peak learning rate; without it the paper's d_model^-0.5 * warmup^-0.5"
    )
    opt.add_argument(
        "--cooldown-steps",
        type=non_negative_int,
        help="decay the learning rate linearly to 0 over the last N updates (0: the paper's schedule to the end)",
    )
    opt.add_argument("--weight-decay", type=float, default=0.0)
    opt.add_argument("--clip-norm", type=float, default=1.0, help="0 disables gradient clipping")
    opt.add_argument("--gradient-accumulation-steps", type=positive_int, default=1)
    opt.add_argument(
        "--mixed-precision",
        choices=["no", "fp16", "bf16"],
        default="no",
        help="autocast the training forward (weights, gradients and optimizer stay float32; bf16 is fast on "
        "CPUs with AVX512-BF16 or AMX too). Greedy validation during training runs under it too; the "
        "final length-penalty search, scores and saved model are float32",
    )
    opt.add_argument("--cpu", action="store_true", help="train on the CPU even if a GPU is present")


def add_checkpoint_and_logging_arguments(train: argparse.ArgumentParser) -> None:
    ckpt = train.add_argument_group("checkpoints and logging")
    ckpt.add_argument("--save-steps", type=non_negative_int, help="0 disables checkpoints")
    ckpt.add_argument("--keep-checkpoints", type=positive_int, default=5)
    ckpt.add_argument("--resume-from", help="a checkpoint folder, or a run folder to continue from its newest")
    ckpt.add_argument("--average-checkpoints", type=positive_int, default=1, help="average the last N checkpoints")
    ckpt.add_argument("--eval-steps", type=non_negative_int, help="greedy validation BLEU every N steps; 0 disables")
    ckpt.add_argument("--log-steps", type=positive_int, default=10)
    ckpt.add_argument(
        "--report-to",
        nargs="+",
        default=["tensorboard"],
        help="Accelerate trackers ('none' for none); tensorboard is used when installed",
    )
    ckpt.add_argument("--show-samples", type=non_negative_int, default=5)


def add_hub_arguments(train: argparse.ArgumentParser) -> None:
    hub = train.add_argument_group("Hugging Face Hub")
    hub.add_argument(
        "--push-to-hub",
        action="store_true",
        help="upload the finished model folder (not its checkpoints) to --hub-model-id",
    )
    hub.add_argument("--hub-model-id", help="repository name, e.g. user/vanilla-transformer-en-de")
    hub.add_argument("--hub-token", help="default: the token saved by `hf auth login`")
    hub.add_argument("--hub-private-repo", action="store_true", default=None)


def add_train_command(commands) -> None:
    train = commands.add_parser(
        "train",
        help="train a tokenizer and a model, evaluate it, save it",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_data_arguments(train)
    add_run_arguments(train)
    add_model_arguments(train)
    add_tokenizer_arguments(train)
    add_optimisation_arguments(train)
    add_checkpoint_and_logging_arguments(train)
    add_hub_arguments(train)
    train.add_argument(
        "--tune-length-penalty",
        type=float,
        nargs="+",
        metavar="ALPHA",
        help="at the end, decode the validation split with each length penalty and keep the one with "
        "the best BLEU (lowercased with --lowercase) for the test split and the saved generation config",
    )
    add_generation_arguments(train)


def add_evaluate_command(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="BLEU, chrF, exact match and cross-entropy of a model folder on a split"
    )
    evaluate.add_argument("--model", required=True, help="a model folder (or Hub name)")
    add_data_arguments(evaluate)
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--seed", type=int, default=42, help="seed of the embedded task")
    evaluate.add_argument("--output", help="write the results as JSON here")
    add_generation_arguments(evaluate)
    add_backend_arguments(evaluate)


def add_translate_command(commands) -> None:
    translate = commands.add_parser("translate", help="translate sentences from arguments, a file or stdin")
    translate.add_argument("--model", required=True)
    translate.add_argument("sentences", nargs="*", help="sentences to translate; none means read --input or stdin")
    translate.add_argument("--input", help="a text file, one sentence per line")
    translate.add_argument("--batch-size", type=positive_int, default=32)
    translate.add_argument("--num-beams", type=positive_int, default=5)
    translate.add_argument(
        "--length-penalty",
        type=float,
        help="beam score = log p / length^alpha (default: the model's generation config)",
    )
    translate.add_argument("--max-length", type=positive_int, default=256, help="most new tokens per sentence")
    translate.add_argument(
        "--n-best",
        type=positive_int,
        default=1,
        metavar="K",
        help="print the K best translations of each sentence, each with its score (K <= --num-beams), tab-separated",
    )
    add_backend_arguments(translate)


def add_backend_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--backend",
        choices=["auto", "pytorch", "ctranslate2"],
        default="auto",
        help="what runs the model: 'auto' uses CTranslate2 for a folder written by `export --to ctranslate2`, "
        "PyTorch for a model folder",
    )
    command.add_argument(
        "--threads", type=positive_int, help="CPU threads on each batch (default: the backend's own choice)"
    )
    command.add_argument(
        "--inter-threads",
        type=positive_int,
        default=1,
        metavar="K",
        help="CTranslate2 only: translate K batches at once, each on --threads threads; for many sentences on N "
        "cores, K=N with --threads 1 is the faster layout in BENCHMARKS.md for int8 and for larger models",
    )


def add_export_command(commands) -> None:
    export = commands.add_parser(
        "export", help="export a model folder to CTranslate2 for fast translation, or as a Space running the demo"
    )
    export.add_argument("--model", required=True, help="a model folder (or Hub name)")
    export.add_argument(
        "--to",
        required=True,
        choices=["ctranslate2", "space"],
        help="ctranslate2: a CTranslate2 model folder; space: a Hugging Face Space folder running `demo`",
    )
    export.add_argument("--out", required=True, help="the folder to write (new or empty)")
    export.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32"],
        help="ctranslate2 only: the weights' type (default: float32, as trained)",
    )
    export.add_argument("--overwrite", action="store_true", help="replace --out if it holds files")


def add_attention_command(commands) -> None:
    attention = commands.add_parser("attention", help="draw attention heatmaps of a model for one sentence")
    attention.add_argument("--model", required=True, help="a model folder (or Hub name)")
    attention.add_argument("--source", required=True, help="the sentence to translate")
    attention.add_argument("--target", help="force-decode this translation instead of generating one")
    attention.add_argument("--out", required=True, help="folder for the PNG files")
    attention.add_argument("--num-beams", type=positive_int, default=5)
    attention.add_argument("--max-length", type=positive_int, default=64, help="most new tokens")


def add_demo_command(commands) -> None:
    demo = commands.add_parser("demo", help="a Gradio app: translate and watch each stage of the Transformer")
    demo.add_argument("--model", required=True, help="a model folder (or Hub name)")
    demo.add_argument("--port", type=positive_int, help="the local port (default: Gradio's, 7860 or the next free)")
    demo.add_argument("--host", default="127.0.0.1", help="the address to serve on (0.0.0.0: every interface)")
    demo.add_argument("--share", action="store_true", help="also serve on a temporary public gradio.live link")


def add_plot_command(commands) -> None:
    plot = commands.add_parser("plot", help="draw the training curves of a run folder (also while it runs)")
    plot.add_argument("run_dir")
    plot.add_argument("--out", help="PNG path (default: RUN_DIR/training_curves.png)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vanilla-transformer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in (
        add_train_command,
        add_evaluate_command,
        add_translate_command,
        add_export_command,
        add_attention_command,
        add_demo_command,
        add_plot_command,
    ):
        add_command(commands)
    return parser


def resolve_train_arguments(parser, args) -> argparse.Namespace:
    """Fill unset sizes from the preset and reject incompatible flags, naming them."""
    if args.dataset_name and args.train_file:
        parser.error("--dataset-name and --train-file are mutually exclusive: give one source of data")
    if (args.validation_file or args.test_file) and not args.train_file:
        parser.error("--validation-file/--test-file need --train-file")
    if args.dataset_config and not args.dataset_name:
        parser.error("--dataset-config needs --dataset-name")
    if args.tokenizer_name and args.vocab_size:
        parser.error("--vocab-size trains a new tokenizer; it cannot be combined with --tokenizer-name")
    if args.tokenizer_name and args.lowercase:
        parser.error("--lowercase applies to a tokenizer trained here; it cannot be combined with --tokenizer-name")
    if args.push_to_hub and not args.hub_model_id:
        parser.error("--push-to-hub needs --hub-model-id NAME (e.g. user/vanilla-transformer-en-de)")
    if args.hub_model_id and not args.push_to_hub:
        parser.error("--hub-model-id is only used with --push-to-hub")
    if args.tune_length_penalty and args.num_beams == 1:
        parser.error("--tune-length-penalty needs beam search (--num-beams > 1); greedy search ignores it")
    if args.tune_length_penalty and args.train_file and not args.validation_file:
        parser.error("--tune-length-penalty picks on the validation split: give --validation-file")
    if args.source_lang == args.target_lang:
        parser.error(f"--source-lang and --target-lang are both {args.source_lang!r}")
    if args.length_penalty is None:
        args.length_penalty = 1.0
    uses_embedded = not (args.dataset_name or args.train_file)
    preset = args.preset or ("numbers" if uses_embedded else "small")
    from_preset = set()
    for key, value in PRESETS[preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
            from_preset.add(key)
    if args.max_steps is None and args.num_epochs is None:
        parser.error("give --max-steps or --num-epochs")
    if args.d_model % args.num_heads:
        parser.error(f"--d-model {args.d_model} must be divisible by --num-heads {args.num_heads}")
    if args.max_steps is not None and args.cooldown_steps > args.max_steps:
        origin = f" (set by --preset {preset})" if "cooldown_steps" in from_preset else ""
        parser.error(
            f"--cooldown-steps {args.cooldown_steps}{origin} is longer than the run (--max-steps "
            f"{args.max_steps}): give a shorter --cooldown-steps"
        )
    if args.average_checkpoints > args.keep_checkpoints:
        parser.error(
            f"--average-checkpoints {args.average_checkpoints} needs at least as many kept checkpoints "
            f"(--keep-checkpoints {args.keep_checkpoints})"
        )
    if args.average_checkpoints > 1 and not args.save_steps:
        parser.error("--average-checkpoints needs checkpoints: set --save-steps")
    if args.output_dir is None:
        task = "numbers-en-de" if uses_embedded else f"{args.source_lang}-{args.target_lang}"
        args.output_dir = os.path.join("runs", task)
    if args.report_to == ["tensorboard"]:  # the default: only when installed
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            args.report_to = ["none"]
    return args


def apply_cpu_process_settings(args) -> None:
    """The training command's own process-wide settings for the CPU (see `keep_freed_memory_mapped` and
    `flush_denormals`); the library itself changes no process setting on import or on `train()`."""
    import torch

    from .loop import flush_denormals, keep_freed_memory_mapped

    if args.cpu or not torch.cuda.is_available():  # the device Accelerator(cpu=args.cpu) trains on is the CPU
        keep_freed_memory_mapped()
        flush_denormals()


def run_command(args) -> int:
    """Run the parsed command; failures propagate as exceptions, which `main` reports."""
    if args.command == "train":
        from .loop import train

        apply_cpu_process_settings(args)
        train(args)
        return 0
    if args.command == "evaluate":
        from .commands import evaluate_command

        return evaluate_command(args)
    if args.command == "translate":
        from .commands import translate_command

        return translate_command(args)
    if args.command == "export":
        from .commands import export_command

        return export_command(args)
    if args.command == "attention":
        from .heatmaps import attention_command

        return attention_command(args)
    if args.command == "demo":
        from ..demo import launch

        launch(args.model, port=args.port, share=args.share, host=args.host)
        return 0
    if args.command == "plot":
        from .plots import plot_run

        print(plot_run(args.run_dir, args.out))
        return 0
    return 2


def exit_status(command: str, error: Exception) -> int | None:
    """The exit status for an expected failure of `command`, or None for anything else (a bug keeps its traceback).
    1: the command could not finish (a training run stopped on purpose, a model folder that does not load, a missing
    optional dependency); 2: bad input (flags, data, folders)."""
    if isinstance(error, CommandError):
        return error.exit_code
    if command == "train":
        from .loop import TrainingStopped

        if isinstance(error, TrainingStopped):
            return 1
    if isinstance(error, ValueError) and command in ("train", "plot"):
        return 2
    if command == "evaluate":
        from .data import DataError

        if isinstance(error, DataError):
            return 2
    return None


def main(argv: list[str] | None = None) -> int:
    """The command line: parse, run, and turn the library's exceptions into `error: ...` and an exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        args = resolve_train_arguments(parser, args)
    try:
        return run_command(args)
    except Exception as error:
        status = exit_status(args.command, error)
        if status is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
