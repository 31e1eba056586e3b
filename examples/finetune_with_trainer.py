"""Fine-tune a trained vanilla-transformer model with the transformers `Seq2SeqTrainer`, as any seq2seq model.

The model of `vanilla-transformer train` (the embedded task: American-style English number words -> German) is
fine-tuned on a small new dataset, British-style number words with "and" after hundreds ("one hundred and five" ->
"einhundertfünf"), with evaluation during training by generation and BLEU, safetensors checkpoints, resumption and
the best checkpoint loaded at the end:

    vanilla-transformer train --output-dir runs/numbers-en-de
    python examples/finetune_with_trainer.py --model runs/numbers-en-de --output-dir runs/numbers-british
    python examples/finetune_with_trainer.py --model runs/numbers-en-de --output-dir runs/numbers-british \
        --resume-from-checkpoint runs/numbers-british/checkpoint-200
"""

import argparse
import random
import re
from dataclasses import dataclass, field

import datasets
import sacrebleu
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)
from vanilla_transformer.configuration import position_limit
from vanilla_transformer.training.tasks.numbers import english, german

import vanilla_transformer  # noqa: F401  (registers the model type with the Auto classes)


def british(n: int) -> str:
    """'one hundred and twenty-three thousand four hundred and five': "and" after every hundred followed by more."""
    return re.sub(r"hundred (?!thousand)(?=\w)", "hundred and ", english(n))


def british_numbers(train_size: int, eval_size: int, seed: int) -> datasets.DatasetDict:
    candidates = random.Random(seed).sample(range(101, 1_000_000), 3 * (train_size + eval_size))
    numbers = [n for n in candidates if " and " in british(n)][: train_size + eval_size]

    def rows(chosen):
        return datasets.Dataset.from_dict({"translation": [{"en": british(n), "de": german(n)} for n in chosen]})

    return datasets.DatasetDict({"train": rows(numbers[:train_size]), "validation": rows(numbers[train_size:])})


@dataclass
class FinetuneArguments:
    """The example's flags, read by `HfArgumentParser` as `run_translation` reads its own."""

    model: str = field(metadata={"help": "a model folder written by `vanilla-transformer train`"})
    output_dir: str = field(metadata={"help": "where checkpoints and the fine-tuned model go"})
    train_size: int = 2000
    eval_size: int = 200
    max_steps: int = 300
    eval_steps: int = 100
    learning_rate: float = 3e-4
    batch_size: int = 64
    num_beams: int = 1
    seed: int = 42
    metric_for_best_model: str = field(
        default="chrf",
        metadata={
            "choices": ["chrf", "bleu", "exact_match"],
            "help": "chrF by default: each output here is one word, so BLEU's 2- to 4-grams are empty",
        },
    )
    resume_from_checkpoint: str | None = None


def parse_args(argv=None) -> FinetuneArguments:
    parser = HfArgumentParser(
        FinetuneArguments, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    return args


def tokenized_numbers(args: FinetuneArguments, tokenizer, max_length: int) -> datasets.DatasetDict:
    def tokenize(batch):
        sources = [pair["en"] for pair in batch["translation"]]
        targets = [pair["de"] for pair in batch["translation"]]
        return tokenizer(sources, text_target=targets, truncation=True, max_length=max_length)

    raw = british_numbers(args.train_size, args.eval_size, args.seed)
    return raw.map(tokenize, batched=True, remove_columns=["translation"])


def metrics_for(tokenizer):
    """`compute_metrics` for the Trainer: BLEU, chrF and exact match of the generated outputs."""

    def compute_metrics(prediction):
        predictions, labels = prediction
        labels = [[t for t in row if t != -100] for row in labels]
        hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)
        exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
        return {
            "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
            "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
            "exact_match": 100 * exact,
        }

    return compute_metrics


def training_arguments(args: FinetuneArguments, max_length: int) -> Seq2SeqTrainingArguments:
    return Seq2SeqTrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        lr_scheduler_type="inverse_sqrt",
        warmup_steps=min(50, args.max_steps // 4),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        label_smoothing_factor=0.1,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        save_strategy="steps",
        save_steps=args.eval_steps,
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model=args.metric_for_best_model,
        predict_with_generate=True,
        generation_num_beams=args.num_beams,
        generation_max_length=max_length,
        logging_steps=max(1, args.eval_steps // 4),
        report_to="none",
        seed=args.seed,
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model)
    max_length = min(48, position_limit(model.config) or 48)  # learned positions bound both sides; sinusoids do not
    tokenized = tokenized_numbers(args, tokenizer, max_length)
    trainer = Seq2SeqTrainer(
        model=model,
        args=training_arguments(args, max_length),
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        compute_metrics=metrics_for(tokenizer),
    )
    before = trainer.evaluate()
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    after = trainer.evaluate()
    trainer.save_model()  # the best checkpoint's weights, as a self-contained folder with the tokenizer
    print(
        f"British-style numbers, validation: chrF {before['eval_chrf']:.2f} -> {after['eval_chrf']:.2f}, "
        f"exact match {before['eval_exact_match']:.1f}% -> {after['eval_exact_match']:.1f}%"
    )
    return {"before": before, "after": after, "best_checkpoint": trainer.state.best_model_checkpoint}


if __name__ == "__main__":
    main()
