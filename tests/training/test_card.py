"""The model card a training run writes: the template beside training/report/card.py filled in from the model's
configuration, the arguments the run was trained with (the optimiser among them) and its scores."""

import pytest
from huggingface_hub import ModelCard
from vanilla_transformer.training.options.arguments import TrainArguments
from vanilla_transformer.training.report import card

from ..conftest import tiny_model

# A run's arguments as `resolve` leaves them: TrainArguments' own defaults, and the sizes a preset fills in.
ARGS = dict(
    max_source_length=64,
    max_target_length=64,
    output_dir="runs/numbers-en-de",
    vocab_size=8000,
    bpe_dropout=0.0,
    max_tokens=4096,
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    warmup_steps=4000,
    cooldown_steps=0,
    max_steps=2000,
    length_penalty=0.6,
)
SCORES = {
    "bleu": 31.09,
    "bleu_lowercase": 31.16,
    "chrf": 54.75,
    "chrf_lowercase": 55.1,
    "perplexity": 4.2,
    "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3",
}
RESULTS = {"train_steps": 2000, "train_seconds": 123.4, "processes": 1, "validation": SCORES, "test": SCORES}


def run_args(**overrides) -> TrainArguments:
    return TrainArguments.from_options(**{**ARGS, **overrides})


def described(**overrides) -> card.RunDescription:
    """What the card describes of a run with these arguments: its groups and seed."""
    args = run_args(**overrides)
    groups = (args.data, args.tokenizer, args.model, args.optimisation, args.checkpoints, args.evaluation)
    return card.RunDescription(*groups, args.run.seed)


def test_the_procedure_of_a_run_with_the_default_arguments():
    assert card.procedure(described(), RESULTS) == (
        "- `vanilla-transformer train` (Accelerate): a joint source-target BPE vocabulary trained with `tokenizers` "
        "(8000 tokens);\n"
        "- batches of similar-length sentence pairs up to 4096 tokens per process;\n"
        "- dropout P_drop 0.1 on sub-layer outputs and embedding sums;\n"
        "- label-smoothed cross-entropy (epsilon 0.1) normalised by target tokens;\n"
        "- Adam (beta1 0.9, beta2 0.98, eps 1e-9), the paper's schedule d_model^-0.5 * min(step^-0.5, step * "
        "4000^-1.5);\n"
        "- gradient clipping at norm 1.0; 2000 updates (123.4 s of training); seed 42; mixed precision: no;\n"
        "- the final weights are those of the last update;\n"
        "- evaluation with beam search (beams 5, length penalty 0.6)."
    )


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({}, "Adam (beta1 0.9, beta2 0.98, eps 1e-9)"),
        (dict(adam_beta2=0.999, adam_epsilon=1e-8), "Adam (beta1 0.9, beta2 0.999, eps 1e-8)"),
        (dict(adam_beta1=0.8, adam_epsilon=2.5e-10), "Adam (beta1 0.8, beta2 0.98, eps 2.5e-10)"),
        (dict(weight_decay=0.01), "Adam (beta1 0.9, beta2 0.98, eps 1e-9, weight decay 0.01)"),
        (dict(weight_decay=1e-4), "Adam (beta1 0.9, beta2 0.98, eps 1e-9, weight decay 0.0001)"),
    ],
)
def test_the_card_states_the_optimiser_the_run_was_trained_with(settings, expected):
    assert card.optimiser(run_args(**settings).optimisation) == expected
    assert f"\n- {expected}, " in card.procedure(described(**settings), RESULTS)


def test_the_procedure_names_each_setting_that_is_on():
    args = described(
        lr=5e-4,
        cooldown_steps=300,
        max_steps=None,
        num_epochs=20,
        bpe_dropout=0.1,
        lowercase=True,
        gradient_accumulation_steps=4,
        attention_dropout=0.1,
        activation_dropout=0.2,
        word_dropout=0.1,
        rdrop_alpha=5.0,
        average_checkpoints=5,
        tune_length_penalty=[0.6, 1.0],
    )
    lines = card.procedure(args, {**RESULTS, "processes": 2}).split("\n")
    assert len(lines) == 10 and all(line.startswith("- ") for line in lines)
    assert "with BPE-dropout 0.1" in lines[0] and "(`--lowercase`)" in lines[1]
    assert "2 data-parallel processes, 4 accumulated per update" in lines[2]
    assert lines[3].endswith("0.1 on attention weights, 0.2 after the feed-forward ReLU;")
    assert lines[4].startswith("- word dropout 0.1") and "R-Drop" in lines[5]
    assert "peak learning rate 0.0005 reached after 4000 warm-up updates" in lines[6]
    assert lines[6].endswith("decaying linearly to 0 over the last 300 updates;")
    assert "20 epochs (2000 updates, 123.4 s of training);" in lines[7]
    assert "average of the last 5 checkpoints" in lines[8] and lines[9].endswith("among 0.6, 1.0).")


def test_a_runs_card_has_the_metadata_and_every_section(tmp_path):
    model = tiny_model()
    folder = str(tmp_path / "numbers-en-de")
    args = described(dataset_name="bentrevett/multi30k")
    (tmp_path / "numbers-en-de").mkdir()
    card.write_run_card(folder, model, RESULTS, args, hub_model_id=None)
    written = ModelCard.load(tmp_path / "numbers-en-de" / "README.md")
    data = written.data
    assert data.library_name == "transformers" and data.pipeline_tag == "translation"
    assert data.language == ["en", "de"] and data.datasets == ["bentrevett/multi30k"]
    assert data.model_name == "numbers-en-de"
    by_name = {(r.dataset_split, r.metric_name): r.metric_value for r in data.eval_results}
    assert by_name[("test", "BLEU")] == 31.09 and by_name[("validation", "chrF (lowercased)")] == 55.1
    text = written.text
    assert text.startswith("\n# numbers-en-de\n") and "It translates en -> de." in text
    c = model.config
    row = f"| {c.d_model} | {c.num_heads} | {c.d_model // c.num_heads} | {c.d_ff} | {c.encoder_layers} |"
    assert row in text and f"| {model.num_parameters():,} |" in text
    sections = ["Architecture", "Intended use and limits", "Training data", "Training procedure", "Evaluation"]
    places = [text.index(f"\n## {name}\n") for name in sections + ["How to use", "Citation"]]
    assert places == sorted(places)
    assert "Training data: bentrevett/multi30k, direction en -> de." in text
    assert card.procedure(args, RESULTS) in text and SCORES["bleu_signature"] in text
    assert f'pipeline("translation", model="{folder}")' in text and "A man is riding a bicycle." in text
    assert "title     = {Attention Is All You Need}," in text and "Kaiser, {\\L}ukasz" in text
    assert "{{" not in text and "{%" not in text  # every template variable filled in


def test_the_template_is_read_from_beside_the_card_module():
    from importlib import resources

    template = resources.files("vanilla_transformer.training.report").joinpath(card.CARD_TEMPLATE)
    assert template.is_file() and "{{ procedure }}" in template.read_text(encoding="utf-8")


def test_the_card_of_a_model_a_study_took_apart_says_it_is_not_the_papers():
    paper = str(card.model_card(tiny_model().config, 1000))
    assert "Not the paper's model" not in paper and "| 32 | 4 | 8 | 64 |" in paper
    taken_apart = str(card.model_card(tiny_model(residual=False, d_k=2).config, 1000))
    assert (
        "**Not the paper's model:** a study of the architecture (`vanilla-transformer ablate`) changed `d_k=2`, "
        "`residual=False`" in taken_apart
    )
    assert "| 32 | 4 | 2 | 64 |" in taken_apart  # d_k


@pytest.mark.parametrize(
    "settings, words",
    [
        ({}, ("plus sinusoidal positional encodings", "post-norm Add&Norm, LayerNorm(x + Dropout(Sublayer(x)))")),
        ({"position_encoding": "learned"}, ("plus learned positional encodings",)),
        ({"position_encoding": "none"}, ("token embeddings scaled by sqrt(d_model) without positional encodings",)),
        ({"norm_position": "pre"}, ("pre-norm, x + Dropout(Sublayer(LayerNorm(x))) and a final LayerNorm",)),
        ({"norm_position": "none"}, ("no LayerNorm (a study's), x + Dropout(Sublayer(x))",)),
    ],
)
def test_the_architecture_paragraph_names_the_positions_and_the_norm_the_model_has(settings, words):
    config = tiny_model(**settings).config
    text = str(card.model_card(config, 1000))
    assert all(phrase in text for phrase in words), text
