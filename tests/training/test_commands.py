"""`vanilla-transformer evaluate` on a trained model folder: its scores, and the reference cross-entropy checked
against the model's own loss."""

import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer
from vanilla_transformer.training.options.arguments import DataArguments
from vanilla_transformer.training.tasks.numbers import german

from tests.conftest import long_sentence
from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.cli import main
from vanilla_transformer.commands.evaluate import task_seed

from .conftest import TINY_MODEL_FLAGS, pairs, train_cli, write_jsonl


def read_pairs(path):
    return [json.loads(line)["translation"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_evaluate_needs_only_the_scored_split_and_its_cross_entropy_is_the_models_own_loss(trained_folder, tmp_path):
    test_file = trained_folder.parent / "test.jsonl"
    out = tmp_path / "scores.json"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(trained_folder),
                "--test-file",
                str(test_file),
                "--split",
                "test",
                "--num-beams",
                "1",
                "--output",
                str(out),
            ]
        )
        == 0
    )  # no --train-file
    scores = json.loads(out.read_text())
    assert {"bleu", "chrf", "exact_match", "cross_entropy", "perplexity", "cross_entropy_per_word"} <= scores.keys()

    # the same quantity through another path: the model's own loss (mean token cross-entropy) on one padded batch
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(trained_folder)
    pairs = read_pairs(test_file)
    batch = tokenizer([p["en"] for p in pairs], text_target=[p["de"] for p in pairs], padding=True, return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    with torch.no_grad():
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.item()
    assert scores["cross_entropy"] == pytest.approx(loss, abs=1e-3)
    assert scores["perplexity"] == pytest.approx(math.exp(loss), rel=1e-3)
    tokens, words = (labels != -100).sum().item(), sum(len(p["de"].split()) for p in pairs)
    assert scores["cross_entropy_per_word"] == pytest.approx(loss * tokens / words, abs=1e-3)
    assert 0 < scores["cross_entropy"] < math.log(model.config.vocab_size)  # trained: better than uniform

    # the training command's final scores computed it the same way, for the same weights
    results = json.loads((trained_folder / "eval_results.json").read_text())
    assert results["test"]["cross_entropy"] == pytest.approx(scores["cross_entropy"], abs=1e-3)
    assert "perplexity" in (trained_folder / "README.md").read_text()


def test_validation_cross_entropy_is_logged_at_every_evaluation(tmp_path, data_files):
    out = tmp_path / "run"
    assert (
        train_cli(data_files, out, "--max-steps 4 --eval-steps 2 --save-steps 0 --dropout 0.5", *TINY_MODEL_FLAGS) == 0
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if "validation_cross_entropy" in r]
    assert [r["step"] for r in evaluated] == [2, 4]
    # dropout is off for it: the value at the last update is the final weights' validation cross-entropy
    results = json.loads((out / "eval_results.json").read_text())
    assert evaluated[-1]["validation_cross_entropy"] == pytest.approx(results["validation"]["cross_entropy"], abs=1e-4)


def test_a_trained_folder_states_the_length_the_ecosystem_reads(trained_folder):
    """transformers' translation example (examples/pytorch/translation/run_translation.py) refuses to run when its
    --max_source_length, 1024 by default, is above config.max_position_embeddings ("the model only has N position
    encodings"), as other tools read the field as the model's limit. Sinusoidal positions have none: a trained
    folder states at least 1024, the configuration's default (MarianMT states 512)."""
    config = AutoConfig.from_pretrained(trained_folder)
    translation_example_default = 1024
    assert config.position_encoding == "sinusoidal"
    assert config.max_position_embeddings >= translation_example_default
    assert config.max_position_embeddings == VanillaTransformerConfig().max_position_embeddings


def test_evaluate_names_a_split_the_data_does_not_have(trained_folder, capsys):
    test_file = trained_folder.parent / "test.jsonl"
    assert (
        main(["evaluate", "--model", str(trained_folder), "--test-file", str(test_file), "--split", "validation"]) == 2
    )
    assert "--split validation" in capsys.readouterr().err
    same = ["--source-lang", "de", "--target-lang", "de"]
    assert main(["evaluate", "--model", str(trained_folder), "--test-file", str(test_file), *same]) == 2
    assert "error: --source-lang and --target-lang are both 'de'" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(trained_folder), "--test-file", str(test_file), "--streaming"]) == 2
    assert "error: --streaming streams train's training split; evaluate reads --split whole" in capsys.readouterr().err
    for flags, message in (
        (["--dataset-name", "wmt14", "--test-file", str(test_file)], "--dataset-name and --train-file/--validation-"
         "file/--test-file are mutually exclusive: give one source of data"),
        (["--dataset-config", "de-en"], "--dataset-config needs --dataset-name"),
        (["--test-file", str(test_file), "--max-source-length", "4"], "--max-source-length drops train's longer "
         "training pairs; evaluate scores every pair of --split"),
    ):  # fmt: skip
        assert main(["evaluate", "--model", str(trained_folder), *flags]) == 2
        assert f"error: {message}" in capsys.readouterr().err
    reversed_pair = ["--source-lang", "de", "--target-lang", "en"]  # scored, with a word: the flags may be wrong
    assert main(["evaluate", "--model", str(trained_folder), "--test-file", str(test_file), *reversed_pair]) == 0
    warning = f"warning: --model {trained_folder} translates en to de (its card); evaluating de to en (--source-lang"
    assert warning in capsys.readouterr().err


def test_evaluate_draws_the_embedded_tasks_splits_with_the_seed_the_model_was_trained_with(
    trained_folder, exported_folder, tmp_path, capsys
):
    """Another seed's test numbers are partly training numbers of the model's: its score there is not a test's."""
    assert json.loads((trained_folder / "eval_results.json").read_text())["seed"] == 42  # train records its --seed
    model = tmp_path / "model"
    shutil.copytree(trained_folder, model)
    results = json.loads((model / "eval_results.json").read_text())
    (model / "eval_results.json").write_text(json.dumps({**results, "seed": 7}))
    embedded = DataArguments()
    assert task_seed(str(model), embedded, None) == 7 and capsys.readouterr().err == ""
    assert task_seed(str(model), embedded, 42) == 42
    assert f"--model {model} was trained with --seed 7: the splits of --seed 42 hold numbers it trained on" in (
        capsys.readouterr().err
    )
    assert task_seed(str(tmp_path), embedded, None) == 42  # no record: train's default, with a word
    assert f"--model {tmp_path} records no seed; the embedded task's splits are drawn with --seed 42" in (
        capsys.readouterr().err
    )
    assert task_seed(str(model), DataArguments(test_file="test.jsonl"), None) == 42  # files: the seed draws nothing
    assert capsys.readouterr().err == ""
    exported = json.loads((exported_folder / "vanilla_transformer_export.json").read_text())
    assert exported["trained_with_seed"] == 42 and task_seed(str(exported_folder), embedded, None) == 42
    assert capsys.readouterr().err == ""  # an export of the folder: the seed it was trained with, recorded


def test_evaluates_warnings_are_said_once_under_a_launcher_of_several_processes(tmp_path, monkeypatch, capsys):
    """Each process of `accelerate launch evaluate` reads the flags; the first alone says what is wrong with them."""
    monkeypatch.setenv("RANK", "1")
    assert task_seed(str(tmp_path), DataArguments(), None) == 42 and capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    assert task_seed(str(tmp_path), DataArguments(), None) == 42
    assert capsys.readouterr().err.startswith(f"warning: --model {tmp_path} records no seed")


@pytest.mark.parametrize(
    "output, message",
    [
        ("{test}", "--output {test} is --test-file: write the results to another file"),
        ("{tmp}/no-folder/r.json", "--output {tmp}/no-folder/r.json: its folder {tmp}/no-folder does not exist"),
        ("{tmp}", "--output {tmp}: is a folder; expected a file name"),
        ("{model}/model.safetensors", "--output {model}/model.safetensors is a file of the --model folder {model}: "
         "write it elsewhere"),
    ],
    ids=["the test file", "a missing folder", "a folder", "in the model folder"],
)  # fmt: skip
def test_evaluate_refuses_an_output_it_cannot_write_before_evaluating(
    trained_folder, tmp_path, capsys, output, message
):
    test_file = tmp_path / "test.jsonl"
    test_file.write_bytes((trained_folder.parent / "test.jsonl").read_bytes())
    before = test_file.read_bytes()
    model = tmp_path / "model"
    shutil.copytree(trained_folder, model)
    weights = (model / "model.safetensors").read_bytes()
    names = {"test": test_file, "tmp": tmp_path, "model": model}
    argv = [
        "evaluate",
        "--model",
        str(model),
        "--test-file",
        str(test_file),
        "--output",
        output.format(**names),
    ]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.strip() == f"error: {message.format(**names)}" and out == ""  # refused before any translation
    assert test_file.read_bytes() == before and (model / "model.safetensors").read_bytes() == weights


@pytest.mark.parametrize("command", ["translate", "score"])
def test_translate_and_score_refuse_an_output_in_the_model_folder(trained_folder, tmp_path, capsys, command):
    model = tmp_path / "model"
    shutil.copytree(trained_folder, model)
    tokenizer = (model / "tokenizer.json").read_bytes()
    (tmp_path / "en.txt").write_text("six\n")
    (tmp_path / "de.txt").write_text("sechs\n")
    sides = ["--source-file", str(tmp_path / "en.txt"), "--target-file", str(tmp_path / "de.txt")]
    inputs = ["--input", str(tmp_path / "en.txt")] if command == "translate" else sides
    argv = [command, "--model", str(model), *inputs, "--output", str(model / "tokenizer.json")]
    assert main(argv) == 2
    assert f"is a file of the --model folder {model}: write it elsewhere" in capsys.readouterr().err
    assert (model / "tokenizer.json").read_bytes() == tokenizer and not (model / "tokenizer.json.partial").exists()


def test_evaluate_refuses_a_link_to_the_test_file_and_writes_to_a_stream(trained_folder, tmp_path, capsys):
    import os

    test_file = tmp_path / "test.jsonl"
    test_file.write_bytes((trained_folder.parent / "test.jsonl").read_bytes())
    link = tmp_path / "results.json"
    link.symlink_to(test_file)
    evaluate = ["evaluate", "--model", str(trained_folder), "--test-file", str(test_file), "--num-beams", "1"]
    assert main([*evaluate, "--output", str(link)]) == 2
    assert f"--output {link} is --test-file" in capsys.readouterr().err
    reading, writing = os.pipe()  # a stream, as /dev/stdout is: written to, not replaced
    with os.fdopen(reading) as pipe:
        assert main([*evaluate, "--output", f"/proc/self/fd/{writing}"]) == 0
        os.close(writing)
        assert json.loads(pipe.read()) == json.loads(capsys.readouterr().out)
    with open(tmp_path / "redirected.json", "w") as redirected:  # /dev/stdout redirected to a file: a link to it
        assert main([*evaluate, "--output", f"/proc/self/fd/{redirected.fileno()}"]) == 0
    assert json.loads((tmp_path / "redirected.json").read_text()) == json.loads(capsys.readouterr().out)
    assert main([*evaluate, "--output", ""]) == 2 and "--output: an empty name" in capsys.readouterr().err


def test_translate_reads_a_sentence_far_longer_than_any_it_was_trained_on(trained_folder, capsys):
    sentence = long_sentence()
    assert len(AutoTokenizer.from_pretrained(trained_folder)(sentence)["input_ids"]) >= 200
    # the sinusoids are defined for every position: the config states the ecosystem's 1024, not a limit
    assert AutoModelForSeq2SeqLM.from_pretrained(trained_folder).config.max_position_embeddings == 1024
    assert (
        main(
            [
                "translate",
                "--model",
                str(trained_folder),
                "--num-beams",
                "2",
                "--max-length",
                "40",
                sentence,
                "forty-two",
            ]
        )
        == 0
    )  # sinusoidal positions (§3.5): no limit
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert "warning" not in captured.err


def test_translate_truncates_a_sentence_longer_than_the_learned_positions_and_names_it(learned_folder, capsys):
    sentence = long_sentence()
    tokenizer = AutoTokenizer.from_pretrained(learned_folder)
    length = len(tokenizer(sentence)["input_ids"])
    assert main(["translate", "--model", str(learned_folder), "--num-beams", "2", sentence, "forty-two"]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning")]
    assert [line for line in warnings if "truncated" in line] == [
        f"warning: '{sentence[:57]}...' has {length} tokens, more than the model's "
        f"max_position_embeddings=18 learned positions; truncated to 18 tokens."
    ]
    # the untrained model writes until its positions run out: each translation stopped there, and says so
    assert all("the translation stopped at its length limit" in line for line in warnings if "truncated" not in line)
    # what it translated: the sentence's first 18 tokens, the last of them end-of-sentence
    model = AutoModelForSeq2SeqLM.from_pretrained(learned_folder).eval()
    truncated = tokenizer([sentence], truncation=True, max_length=18, return_tensors="pt")
    assert truncated["input_ids"][0, -1] == tokenizer.eos_token_id
    generated = model.generate(**truncated, num_beams=2, max_new_tokens=18)  # as far as its positions go
    expected = tokenizer.decode(generated[0], skip_special_tokens=True).strip()
    assert captured.out.splitlines()[0] == expected and len(captured.out.splitlines()) == 2


def test_evaluate_truncates_pairs_longer_than_the_learned_positions_and_names_them(learned_folder, tmp_path, capsys):
    reference = " ".join(german(100 + (i * 37) % 300) for i in range(66))
    test_file = write_jsonl(
        tmp_path / "test.jsonl", pairs(range(40, 44)) + [{"translation": {"en": long_sentence(), "de": reference}}]
    )
    out = tmp_path / "scores.json"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(learned_folder),
                "--test-file",
                str(test_file),
                "--split",
                "test",
                "--num-beams",
                "2",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
    assert [w.split(":")[1] for w in warnings] == [" pair 5, source", " pair 5, reference"]
    assert all("max_position_embeddings=18 learned positions; truncated to 18 tokens" in w for w in warnings)
    assert math.isfinite(json.loads(out.read_text())["cross_entropy"])


def test_learned_positions_evaluate_a_validation_pair_longer_than_training_allows(tmp_path, data_files, capsys):
    # validation and test pairs are not length-filtered: with learned positions, a longer one is truncated, not fatal
    long_pair = {"translation": {"en": long_sentence(60), "de": " ".join(german(100 + i) for i in range(20))}}
    write_jsonl(data_files["validation"], pairs(range(20, 24)) + [long_pair])
    out = tmp_path / "run"
    assert (
        train_cli(
            data_files,
            out,
            "--max-steps 2 --eval-steps 2 --save-steps 0 --position-encoding learned",
            *TINY_MODEL_FLAGS,
        )
        == 0
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: pair 5")]
    assert [w.split(":")[1] for w in warnings] == [" pair 5, source", " pair 5, reference"]
    assert "max_position_embeddings=18 learned positions" in warnings[0]
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == 18  # the table ends there
    assert math.isfinite(json.loads((out / "eval_results.json").read_text())["validation"]["cross_entropy"])


# `export --to ctranslate2`, and `translate` / `evaluate` on the exported folder


@pytest.fixture(scope="module")
def exported_folder(trained_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "ct2"
    assert main(["export", "--model", str(trained_folder), "--to", "ctranslate2", "--out", str(out)]) == 0
    return out


def test_translate_prints_the_same_text_through_either_engine(trained_folder, exported_folder, capsys):
    sentences = ["forty-two", "three hundred one", "two hundred twenty-two"]
    outputs = []
    for model in (trained_folder, exported_folder):
        assert main(["translate", "--model", str(model), *sentences]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 3
    assert main(["translate", "--model", str(exported_folder), "--engine", "torch", "seven"]) == 2
    assert "--engine torch: " in capsys.readouterr().err


def test_decoding_commands_keep_their_freed_memory_where_the_torch_engine_runs_on_the_cpu(
    trained_folder, exported_folder, tmp_path, monkeypatch, capsys
):
    """The allocator's setting (`keep_freed_memory_mapped`, checked in fresh processes in test_train.py) is applied
    before the model loads, for the torch engine on the CPU only; recorded here, since it is process-wide."""
    applied = []
    monkeypatch.setattr(
        "vanilla_transformer.commands.process_settings.keep_freed_memory_mapped", lambda: applied.append(True)
    )
    assert main(["translate", "--model", str(exported_folder), "seven"]) == 0
    assert applied == []  # CTranslate2's own allocator
    assert main(["translate", "--model", str(trained_folder), "--device", "cpu", "seven"]) == 0
    assert applied == [True]
    test_file, out = trained_folder.parent / "test.jsonl", tmp_path / "scores.json"
    evaluate = ["evaluate", "--model", str(trained_folder), "--test-file", str(test_file), "--split", "test"]
    assert main([*evaluate, "--num-beams", "1", "--output", str(out)]) == 0
    assert applied == [True, True]
    capsys.readouterr()


def test_translate_n_best_prints_each_candidate_with_its_score_for_either_engine(
    trained_folder, exported_folder, capsys
):
    outputs = []
    for model in (trained_folder, exported_folder):
        flags = ["--model", str(model), "--n-best", "3", "--num-beams", "4", "--threads", "1"]
        assert main(["translate", *flags, "forty-two", "seven"]) == 0
        lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
        assert [number for number, _, _ in lines] == ["0", "0", "0", "1", "1", "1"]
        scores = [float(score) for _, score, _ in lines]
        assert scores[0] >= scores[1] >= scores[2] and scores[3] >= scores[4] >= scores[5]
        outputs.append(lines)
    # the best of each sentence is the same translation; further down, where the two searches stop differs
    assert [outputs[0][i][2] for i in (0, 3)] == [outputs[1][i][2] for i in (0, 3)]
    assert main(["translate", "--model", str(exported_folder), "--n-best", "3", "--num-beams", "2", "x"]) == 2
    assert "--n-best" in capsys.readouterr().err


def test_translate_with_batches_in_parallel_prints_the_same_lines_and_torch_names_the_flag(
    trained_folder, exported_folder, capsys
):
    sentences = ["forty-two", "three hundred one", "two hundred twenty-two", "seven", "nineteen"]
    outputs = []
    for flags in ([], ["--threads", "1", "--inter-threads", "2", "--batch-size", "2"]):
        assert main(["translate", "--model", str(exported_folder), *flags, *sentences]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 5
    for command in (["translate", "seven"], ["evaluate", "--test-file", str(trained_folder.parent / "test.jsonl")]):
        assert main([command[0], "--model", str(trained_folder), "--inter-threads", "2", *command[1:]]) == 2
        err = capsys.readouterr().err
        assert "--inter-threads 2: batches in parallel need the CTranslate2 engine" in err, err


def test_evaluate_an_exported_folder_gives_the_same_scores(trained_folder, exported_folder, tmp_path):
    test_file = trained_folder.parent / "test.jsonl"
    scores = []
    for model in (trained_folder, exported_folder):
        out = tmp_path / f"{model.name}.json"
        flags = ["--model", str(model), "--test-file", str(test_file), "--num-beams", "2", "--output", str(out)]
        assert main(["evaluate", *flags]) == 0
        scores.append(json.loads(out.read_text()))
    pytorch, fast = scores
    for name in ("bleu", "bleu_lowercase", "chrf", "exact_match"):
        assert fast[name] == pytorch[name], name
    for name in ("cross_entropy", "cross_entropy_per_word"):
        assert fast[name] == pytest.approx(pytorch[name], abs=2e-3), name


def test_evaluate_reads_an_exported_folder_window_by_window_to_the_same_scores(
    trained_folder, exported_folder, tmp_path
):
    test_file = trained_folder.parent / "test.jsonl"  # 8 pairs: windows of 3, 3 and 2, or one window
    scores = []
    for window in ("3", "2000"):
        out = tmp_path / f"window-{window}.json"
        flags = ["--model", str(exported_folder), "--test-file", str(test_file), "--read-window", window]
        assert main(["evaluate", *flags, "--output", str(out)]) == 0
        scores.append(json.loads(out.read_text()))
    windowed, whole = scores
    for name in ("cross_entropy", "perplexity", "cross_entropy_per_word"):
        assert windowed.pop(name) == pytest.approx(whole.pop(name), abs=1e-3), name
    assert windowed == whole


def test_evaluate_names_the_torch_engines_tokenising_processes_under_the_ctranslate2_engine(
    trained_folder, exported_folder, tmp_path, capsys
):
    test_file, out = trained_folder.parent / "test.jsonl", tmp_path / "scores.json"
    flags = ["--test-file", str(test_file), "--preprocessing-num-workers", "2", "--output", str(out)]
    assert main(["evaluate", "--model", str(exported_folder), *flags]) == 2
    assert "error: --preprocessing-num-workers 2: the torch engine's processes that tokenise --split; the " in (
        capsys.readouterr().err
    )
    assert not out.exists()
    assert main(["evaluate", "--model", str(trained_folder), *flags, "--num-beams", "1"]) == 0
    assert json.loads(out.read_text())["exact_match"] >= 0


def test_translate_on_an_exported_model_with_learned_positions_truncates_and_names_the_sentence(
    learned_folder, tmp_path, capsys
):
    out = tmp_path / "ct2"
    assert main(["export", "--model", str(learned_folder), "--to", "ctranslate2", "--out", str(out)]) == 0
    capsys.readouterr()
    sentence = long_sentence()
    outputs = []
    for model in (learned_folder, out):
        assert main(["translate", "--model", str(model), "--num-beams", "2", sentence, "forty-two"]) == 0
        captured = capsys.readouterr()
        assert "more than the model's max_position_embeddings=18" in captured.err
        outputs.append(captured.out)
    assert outputs[0] == outputs[1]


def test_export_keeps_a_folder_that_holds_files_and_names_the_problem(trained_folder, tmp_path, capsys):
    out = tmp_path / "ct2"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    flags = ["export", "--model", str(trained_folder), "--to", "ctranslate2", "--out", str(out)]
    assert main([*flags, "--quantization", "int8"]) == 2
    assert "not empty" in capsys.readouterr().err and (out / "keep.txt").read_text() == "mine"
    assert main([*flags, "--quantization", "int8", "--overwrite"]) == 0
    assert "(int8)" in capsys.readouterr().out
    assert main(["export", "--model", str(tmp_path / "nowhere"), "--to", "ctranslate2", "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err  # --out first: before a model loads
    new = str(tmp_path / "new")
    assert main(["export", "--model", str(tmp_path / "nowhere"), "--to", "ctranslate2", "--out", new]) == 1
    assert f"error: --model {tmp_path / 'nowhere'}: " in capsys.readouterr().err


def test_export_without_ctranslate2_says_what_to_install(trained_folder, tmp_path):
    script = (
        "import sys\n"
        "class NoCTranslate2:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'ctranslate2':\n"
        "            raise ImportError('no ctranslate2')\n"
        "sys.meta_path.insert(0, NoCTranslate2())\n"
        "from vanilla_transformer.cli import main\n"
        f"sys.exit(main(['export', '--model', {str(trained_folder)!r}, '--to', 'ctranslate2', '--out', 'ct2']))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 1
    assert 'pip install "vanilla-transformer[fast]"' in result.stderr
    assert not (tmp_path / "ct2").exists()
