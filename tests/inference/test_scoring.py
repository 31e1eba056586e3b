"""Scoring given translations (forced decoding): each target token's log-probability in one teacher-forced pass,
the same as the model's own step-by-step decoding, batched or not, and the same through CTranslate2's score_batch."""

import json

import pytest
import torch
from vanilla_transformer.training.tasks.numbers import english, german

from tests.conftest import greedy_steps
from vanilla_transformer.cli import main
from vanilla_transformer.inference.translators import load_translator

SOURCES = [english(n) for n in (101, 152, 203, 254, 305, 42)]
TARGETS = [german(n) for n in (101, 152, 203, 254, 305, 42)]
TARGETS[-1] = "dreihundert"  # a wrong translation scores too


def test_a_score_is_the_log_probability_of_each_target_token_as_decoding_step_by_step_gives_it(trained_folder):
    translator = load_translator(str(trained_folder))
    model, tokenizer = translator.model, translator.tokenizer
    for source, target in zip(SOURCES, TARGETS):
        [score] = translator.score([source], [target])
        ids = tokenizer(text_target=[target])["input_ids"][0]
        assert score.tokens == tokenizer.convert_ids_to_tokens(ids) and score.tokens[-1] == "</s>"
        batch = tokenizer([source], return_tensors="pt")
        expected = []
        for position, target_id in enumerate(ids):  # the decoder run on each prefix of the target, a step each
            decoder_input = torch.tensor([[model.config.decoder_start_token_id, *ids[:position]]])
            logits = greedy_steps(model, batch, decoder_input, 1)[0][0, -1]
            expected.append(logits.log_softmax(-1)[target_id].item())
        assert score.token_log_probs == pytest.approx(expected, abs=1e-5)
        assert score.log_prob == pytest.approx(sum(expected), abs=1e-4)
        assert score.log_prob_without_eos == pytest.approx(sum(expected[:-1]), abs=1e-4)
        assert score.normalized == pytest.approx(sum(expected) / len(ids), abs=1e-5)


def test_scores_do_not_depend_on_the_batch(trained_folder):
    translator = load_translator(str(trained_folder))
    together = translator.score(SOURCES, TARGETS, batch_size=len(SOURCES))
    alone = [translator.score([s], [t])[0] for s, t in zip(SOURCES, TARGETS)]
    for a, b in zip(together, alone):
        assert a.tokens == b.tokens and a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-5)


def test_ctranslate2s_score_batch_gives_the_same_scores_token_for_token(trained_folder, exported_folder):
    ours = load_translator(str(trained_folder)).score(SOURCES, TARGETS)
    theirs = load_translator(str(exported_folder)).score(SOURCES, TARGETS)
    for a, b in zip(ours, theirs):
        assert a.tokens == b.tokens
        assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-4)


def test_the_score_command_writes_a_json_line_per_pair(trained_folder, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    files = ["--source-file", str(tmp_path / "src.txt"), "--target-file", str(tmp_path / "tgt.txt")]
    assert main(["score", "--model", str(trained_folder), *files]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = load_translator(str(trained_folder)).score(SOURCES, TARGETS)
    assert [line["log_prob"] for line in lines] == pytest.approx([s.log_prob for s in expected], abs=1e-5)
    assert set(lines[0]) == {"log_prob", "normalized", "log_prob_without_eos", "tokens", "token_log_probs"}
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"translation": {"en": s, "de": t}} for s, t in zip(SOURCES, TARGETS)]
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    flags = ["--pairs", str(pairs), "--source-lang", "en", "--target-lang", "de"]
    assert main(["score", "--model", str(trained_folder), *flags]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == lines


def test_the_score_command_names_what_is_wrong_with_its_input(trained_folder, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("eins\n", encoding="utf-8")
    files = ["--source-file", str(tmp_path / "src.txt"), "--target-file", str(tmp_path / "tgt.txt")]
    assert main(["score", "--model", str(trained_folder), *files]) == 2
    assert "src.txt has 2, --target-file" in capsys.readouterr().err
    (tmp_path / "pairs.jsonl").write_text('{"translation": {"en": "one", "de": "eins"}}\n{"en": "two"}\n')
    flags = ["--pairs", str(tmp_path / "pairs.jsonl"), "--source-lang", "en", "--target-lang", "de"]
    assert main(["score", "--model", str(trained_folder), *flags]) == 2
    assert "pairs.jsonl, line 2: expected" in capsys.readouterr().err
    assert main(["score", "--model", str(trained_folder), *files, "--source-lang", "en"]) == 2
    assert "--source-lang and --target-lang name the keys of --pairs: give --pairs" in capsys.readouterr().err
