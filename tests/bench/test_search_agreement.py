"""The search-agreement suite scores a translation exactly as beam search ranks it, and its count adds up; run once
on the tests' trained model so that the suite cannot rot."""

import json
import os
import subprocess
import sys

from bench.search_agreement import suite as search_agreement
from vanilla_transformer import export_ctranslate2
from vanilla_transformer.inference.translators import load_translator

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

SOURCES = ["three hundred twelve", "two hundred five", "forty-one", "three hundred ninety-nine"]


def test_the_ranking_score_is_the_one_beam_search_reports(trained_folder):
    translator = load_translator(str(trained_folder), "torch")
    for length_penalty in (0.6, 1.0, 1.6):
        best = translator.translate(SOURCES, num_beams=3, n_best=2, length_penalty=length_penalty)
        for source, translations in zip(SOURCES, best):
            for translation in translations:
                score = search_agreement.ranking_score(
                    translator.model, translator.tokenizer, source, translation.text, length_penalty
                )
                assert abs(score - translation.score) < 1e-4, (source, translation)


def test_the_suite_compares_both_backends_on_a_data_file(trained_folder, tmp_path):
    exported = export_ctranslate2(str(trained_folder), str(tmp_path / "ct2"))
    data = tmp_path / "test.jsonl"
    references = [t[0].text for t in load_translator(str(trained_folder)).translate(SOURCES)]
    data.write_text(
        "".join(json.dumps({"translation": {"en": s, "de": r}}) + "\n" for s, r in zip(SOURCES, references))
    )
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "bench", "search-agreement", "--model", str(trained_folder)]
    command += [
        "--exported",
        exported,
        "--data",
        str(data),
        "--target",
        "de",
        "--patience",
        "1",
        "2",
        "--json",
        str(out),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [result["patience"] for result in results] == [1.0, 2.0]
    for result in results:
        assert result["sentences"] == len(SOURCES)
        assert sum(result["higher_score"].values()) == result["differ"] <= len(SOURCES)
        assert 0 <= result["ctranslate2_longer"] <= result["differ"]
        assert 0 <= result["bleu_ctranslate2"] <= 100 and 0 <= result["bleu_generate"] <= 100
        if result["differ"] == 0:
            assert result["bleu_ctranslate2"] == result["bleu_generate"]
