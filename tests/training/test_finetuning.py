"""`train --init-from FOLDER` fine-tunes a model folder, an imported one included: the run starts from the folder's
weights, architecture and tokenizer, trains on the target side's ids (an import with separate source and target
dictionaries encodes `text_target` with the target one), and writes a model folder of the same architecture."""

import json
import re

import pytest
import torch
from accelerate.state import AcceleratorState
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from vanilla_transformer.training.options.arguments import ArgumentsError, TrainArguments, resolve

from tests import importing_sources as sources
from vanilla_transformer import import_checkpoint
from vanilla_transformer.cli import main

GERMAN = list(reversed(sources.TARGET_WORDS))  # the target dictionary's order: no id is the source dictionary's


@pytest.fixture(scope="module")
def imported_fairseq(tmp_path_factory):
    """A fairseq checkpoint (English to German) whose target dictionary orders its words otherwise than the source
    dictionary, imported into a model folder, and the pairs to fine-tune it on."""
    root = tmp_path_factory.mktemp("finetune")
    folder, _, _ = sources.fairseq_folder(root / "fairseq")
    (folder / "dict.de.txt").write_text("".join(f"{word} {100 - i}\n" for i, word in enumerate(GERMAN)))
    import_checkpoint(folder / "checkpoint_best.pt", "fairseq", out=root / "imported", trust_pickle=True)
    english, german = sources.sentences(16, seed=20), sources.sentences(16, sources.TARGET_WORDS, seed=21)
    data = root / "pairs.jsonl"
    data.write_text("".join(json.dumps({"translation": {"en": e, "de": g}}) + "\n" for e, g in zip(english, german)))
    return root / "imported", data, english, german


def target_ids(sentence: str) -> list[int]:
    """fairseq's ids of a target sentence: each word's line in dict.de.txt after the four special symbols, then </s>."""
    return [4 + GERMAN.index(word) for word in sentence.split()] + [2]


def test_the_imported_tokenizer_encodes_targets_with_the_target_dictionary(imported_fairseq):
    folder, _, english, german = imported_fairseq
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer(text_target=german)["input_ids"] == [target_ids(sentence) for sentence in german]
    assert tokenizer(english)["input_ids"] != tokenizer(text_target=english)["input_ids"]  # two dictionaries


def target_loss(folder, english: list[str], german: list[str]) -> float:
    """The model's mean cross-entropy of the German sentences as fairseq's target ids."""
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = AutoTokenizer.from_pretrained(folder)(english, padding=True, return_tensors="pt")
    rows = [target_ids(sentence) for sentence in german]
    labels = torch.tensor([row + [-100] * (max(map(len, rows)) - len(row)) for row in rows])
    with torch.no_grad():
        return model(**batch, labels=labels).loss.item()


def train(*flags: str) -> int:
    AcceleratorState._reset_state(True)
    try:
        return main(["train", "--cpu", "--report-to", "none", *flags])
    finally:
        AcceleratorState._reset_state(True)


def test_fine_tuning_an_import_with_separate_dictionaries_lowers_the_loss_on_the_target_ids(imported_fairseq, tmp_path):
    folder, data, english, german = imported_fairseq
    before = target_loss(folder, english, german)
    out = tmp_path / "run"
    flags = ["--train-file", str(data), "--source-lang", "en", "--target-lang", "de", "--init-from", str(folder)]
    flags += ["--output-dir", str(out), "--max-steps", "8", "--warmup-steps", "2", "--lr", "3e-3"]
    flags += ["--max-tokens", "512", "--eval-steps", "0", "--save-steps", "0", "--num-beams", "1", "--dropout", "0"]
    assert train(*flags) == 0
    # by more than a fifth in 8 updates (labels of source-dictionary ids, as FSMTTokenizer gives, lower it by less)
    assert target_loss(out, english, german) < 0.8 * before
    tuned, original = (AutoModelForSeq2SeqLM.from_pretrained(path).config for path in (out, folder))
    keys = ("d_model", "num_heads", "d_ff", "vocab_size", "target_vocab_size", "position_layout", "norm_position")
    assert {key: getattr(tuned, key) for key in keys} == {key: getattr(original, key) for key in keys}
    assert type(AutoTokenizer.from_pretrained(out)).__name__ == "FairseqTokenizer"


def test_a_size_flag_that_disagrees_with_the_folder_is_named(imported_fairseq):
    folder = imported_fairseq[0]
    args = TrainArguments.from_options(init_from=str(folder), d_model=512, max_steps=1)
    with pytest.raises(ArgumentsError, match=r"--d-model 512: the model of --init-from .* has 16"):
        resolve(args)
    resolved = resolve(TrainArguments.from_options(init_from=str(folder), max_steps=1))
    assert resolved.model.d_model == 16 and resolved.tokenizer.tokenizer_name == str(folder)
    for option, flag in (({"vocab_size": 999}, "--vocab-size 999"), ({"lowercase": True}, "--lowercase")):
        args = TrainArguments.from_options(init_from=str(folder), max_steps=1, **option)
        with pytest.raises(ArgumentsError, match=f"^{flag}: a run with --init-from uses the folder's tokenizer"):
            resolve(args)  # the flag was dropped, unsaid


def test_a_choice_given_at_its_default_is_checked_against_the_folder(imported_fairseq):
    folder = imported_fairseq[0]  # separate dictionaries: three embedding matrices, where the paper shares one
    assert resolve(TrainArguments.from_options(init_from=str(folder), max_steps=1)).model.share_embeddings is False
    args = TrainArguments.from_options(init_from=str(folder), share_embeddings=True, max_steps=1)
    with pytest.raises(ArgumentsError, match=r"^--share-embeddings: the model of --init-from .* has --no-share-emb"):
        resolve(args)  # the paper's value, which the folder's replaced unsaid
    assert resolve(args.replace(share_embeddings=False)).model.share_embeddings is False


@pytest.mark.parametrize("damage", ["no weights", "cut weights", "other shapes", "fewer weights"])
def test_a_folder_whose_weights_cannot_be_read_is_named_by_init_from(imported_fairseq, tmp_path, capsys, damage):
    import shutil

    folder, data = tmp_path / "damaged", imported_fairseq[1]
    shutil.copytree(imported_fairseq[0], folder)
    weights, config = folder / "model.safetensors", json.loads((folder / "config.json").read_text())
    if damage == "no weights":
        weights.unlink()
    elif damage == "cut weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    else:  # a config.json that is not the weights': d_ff changed, or a layer more (its weights made at random)
        config.update({"d_ff": config["d_ff"] * 2} if damage == "other shapes" else {"decoder_layers": 3})
        (folder / "config.json").write_text(json.dumps(config))
    flags = ["--train-file", str(data), "--source-lang", "en", "--target-lang", "de", "--init-from", str(folder)]
    assert train(*flags, "--output-dir", str(tmp_path / "run"), "--max-steps", "1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    expected = {"other shapes": "could not load a model folder: .* has shape", "fewer weights": "its weights lack "}
    assert re.match(f"error: --init-from {re.escape(str(folder))}: {expected.get(damage, 'could not load')}", err[-1])


def test_a_folder_without_its_tokenizer_is_named_by_init_from(imported_fairseq, tmp_path):
    import shutil

    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(imported_fairseq[0] / "config.json", folder / "config.json")
    with pytest.raises(ArgumentsError, match=r"--init-from .*config-only: no tokenizer \(tokenizer.json or "):
        resolve(TrainArguments.from_options(init_from=str(folder), max_steps=1))
