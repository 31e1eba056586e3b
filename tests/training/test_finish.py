"""The end of a run (training/run/finish.py): the final model folder written whole, or left as it was."""

import os
import signal

import pytest
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from vanilla_transformer.training.run.finish import write_final_model

from tests.documents import EXAMPLE_MODEL

FINAL_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "eval_results.json",
               "README.md"}  # fmt: skip


@pytest.fixture(scope="module")
def model_and_tokenizer():
    import vanilla_transformer  # noqa: F401  registers the model type

    return AutoModelForSeq2SeqLM.from_pretrained(EXAMPLE_MODEL), AutoTokenizer.from_pretrained(EXAMPLE_MODEL)


def card(folder, model, results):
    with open(os.path.join(folder, "README.md"), "w") as handle:
        handle.write(f"# scores: {results}\n")


@pytest.fixture
def python_ctrl_c():
    """Python's own Ctrl-C handler (a KeyboardInterrupt), whatever handler an earlier test left."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_while_the_files_move_in_waits_for_the_folder_to_be_whole(
    tmp_path, model_and_tokenizer, python_ctrl_c
):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0, "nll_loss": 2.0, "lr": 0.1}\n')

    def interrupted_card(folder, model, results):  # the moves have begun: the Ctrl-C comes now
        os.kill(os.getpid(), signal.SIGINT)
        card(folder, model, results)

    with pytest.raises(KeyboardInterrupt):
        write_final_model(str(tmp_path), *model_and_tokenizer, {"test": {"bleu": 1.0}}, interrupted_card)
    assert FINAL_FILES <= set(os.listdir(tmp_path))
    assert (tmp_path / "README.md").read_text() == "# scores: {'test': {'bleu': 1.0}}\n"  # the run's card, written
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".final-")]
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert reloaded.num_parameters() == model_and_tokenizer[0].num_parameters()


def test_a_ctrl_c_while_the_files_are_written_leaves_the_folder_as_it_was(tmp_path, model_and_tokenizer, monkeypatch):
    model, tokenizer = model_and_tokenizer
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0, "nll_loss": 2.0, "lr": 0.1}\n')

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tokenizer, "save_pretrained", cut)
    with pytest.raises(KeyboardInterrupt):
        write_final_model(str(tmp_path), model, tokenizer, {}, card)
    assert os.listdir(tmp_path) == ["metrics.jsonl"]
