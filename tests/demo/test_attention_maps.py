"""`vanilla-transformer attention`: heatmaps of the model's own attention, valid PNGs, and a clear message without
matplotlib."""

import sys

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.cli import main
from vanilla_transformer.demo.attention_maps import attention_maps, write_attention_figures
from vanilla_transformer.errors import MissingDependencyError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load(folder):
    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def test_maps_are_the_models_attention(trained_folder):
    model, tokenizer = load(trained_folder)
    maps = attention_maps(model, tokenizer, "one hundred twenty-three", target="einhundertdreiundzwanzig")
    config = model.config
    assert len(maps["encoder_self"]) == config.encoder_layers and len(maps["cross"]) == config.decoder_layers
    src, tgt = len(maps["source_tokens"]), len(maps["target_tokens"])
    assert maps["target_tokens"][-1] == tokenizer.eos_token and maps["decoder_input_tokens"][0] == tokenizer.bos_token
    for layer in range(config.encoder_layers):
        assert maps["encoder_self"][layer].shape == (config.num_heads, src, src)
    for layer in range(config.decoder_layers):
        self_attention, cross = maps["decoder_self"][layer], maps["cross"][layer]
        assert self_attention.shape == (config.num_heads, tgt, tgt) and cross.shape == (config.num_heads, tgt, src)
        torch.testing.assert_close(self_attention, torch.tril(self_attention))  # causal: nothing above the diagonal
        for matrix in (self_attention, cross, maps["encoder_self"][0]):
            torch.testing.assert_close(matrix.sum(-1), torch.ones(matrix.shape[:-1]))  # rows are distributions
    # the same numbers as an independent forward pass of the model with output_attentions
    encoded = tokenizer(["one hundred twenty-three"], return_tensors="pt")
    labels = tokenizer(text_target=["einhundertdreiundzwanzig"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(**encoded, labels=labels, output_attentions=True)
    torch.testing.assert_close(maps["cross"][-1], out.cross_attentions[-1][0])
    torch.testing.assert_close(maps["decoder_self"][0], out.decoder_attentions[0][0])


def test_generated_translation_is_force_decoded_consistently(trained_folder):
    model, tokenizer = load(trained_folder)
    maps = attention_maps(model, tokenizer, "three hundred", num_beams=1, max_new_tokens=10)
    expected = model.generate(**tokenizer(["three hundred"], return_tensors="pt"), num_beams=1, max_new_tokens=10)
    assert maps["translation"] == tokenizer.decode(expected[0], skip_special_tokens=True)


def test_attention_command_writes_png_files(trained_folder, tmp_path, capsys):
    out = tmp_path / "figures"
    code = main(
        [
            "attention",
            "--model",
            str(trained_folder),
            "--source",
            "two hundred fifty-one",
            "--out",
            str(out),
            "--num-beams",
            "2",
        ]
    )
    assert code == 0
    assert "two hundred fifty-one ->" in capsys.readouterr().out
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["alignment.png", "cross_layer1.png", "decoder_self_layer1.png", "encoder_self_layer1.png"])
    import matplotlib.image

    for path in out.iterdir():
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5_000, path.name
        height, width = matplotlib.image.imread(path).shape[:2]
        assert 200 <= height <= 4000 and 200 <= width <= 4000, (path.name, height, width)
    # figures there already, the user's or an earlier run's, are replaced only when asked to, and whole
    (out / "alignment.png").write_bytes(b"the user's own")
    (out / "notes.txt").write_text("kept")
    argv = ["attention", "--model", str(trained_folder), "--source", "seven", "--out", str(out), "--num-beams", "1"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    held = "encoder_self_layer1.png, decoder_self_layer1.png, cross_layer1.png and 1 more"
    assert error == f"error: --out {out} holds {held} already: pass --overwrite to replace them"
    assert (out / "alignment.png").read_bytes() == b"the user's own"
    assert main([*argv, "--overwrite"]) == 0
    assert (out / "alignment.png").read_bytes()[:8] == PNG_MAGIC and (out / "notes.txt").read_text() == "kept"
    assert sorted(p.name for p in out.iterdir()) == sorted([*names, "notes.txt"])  # no file left beside them


def test_without_matplotlib_the_message_says_what_to_install(trained_folder, tmp_path, monkeypatch):
    model, tokenizer = load(trained_folder)
    maps = attention_maps(model, tokenizer, "three hundred", target="dreihundert")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of matplotlib now fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'vanilla-transformer\[plots\]'"):
        write_attention_figures(maps, str(tmp_path / "figures"))
    assert not (tmp_path / "figures").exists()


def test_the_command_refuses_an_out_it_cannot_write_into_before_loading_the_model(tmp_path, capsys):
    existing = tmp_path / "notes.txt"
    existing.write_text("mine")
    argv = ["attention", "--model", str(tmp_path / "no-model"), "--source", "seven", "--out"]
    assert main([*argv, str(existing)]) == 2
    assert capsys.readouterr().err == f"error: --out {existing}: is a file; expected a folder\n"
    assert existing.read_text() == "mine"
    figures = existing / "figures"
    assert main([*argv, str(figures)]) == 2
    assert capsys.readouterr().err == f"error: --out {figures}: cannot be made, since {existing} is a file\n"


def test_the_command_refuses_the_model_folder_no_name_and_a_blank_source(trained_folder, tmp_path, capsys):
    before = sorted(path.name for path in trained_folder.iterdir())
    argv = ["attention", "--model", str(trained_folder)]
    refused = {
        ("--source", "seven", "--out", str(trained_folder / "figures")): "is inside the --model folder",
        ("--source", "seven", "--out", ""): "--out: an empty name; expected a folder",
        ("--source", "  ", "--out", str(tmp_path / "figures")): "--source is blank; expected the sentence",
        ("--source", "\u200b", "--out", str(tmp_path / "figures")): "--source is blank; expected the sentence",
        ("--source", " ".join(["seven"] * 200), "--out", str(tmp_path / "figures")): "--source: 201 tokens; the "
        "maps are drawn for at most 128, since a figure grows as the square of its tokens",
        ("--source", "seven", "--max-length", "500", "--out", str(tmp_path / "figures")): "--max-length: 500 tokens",
        ("--source", "seven", "--target", "sieben ☃x", "--out", str(tmp_path / "figures")): "--target: '☃x' has a "
        "token the target vocabulary lacks (<unk>)",
        ("--source", "sev\udcffen", "--out", str(tmp_path / "figures")): "--source: not Unicode text: '\\udcff' at "
        "character 4",  # a byte of the command line that is not UTF-8
    }
    for flags, words in refused.items():
        assert main([*argv, *flags]) == 2
        assert words in capsys.readouterr().err
    assert sorted(path.name for path in trained_folder.iterdir()) == before and not (tmp_path / "figures").exists()


def test_overwrite_removes_the_figures_of_layers_the_model_lacks_and_a_failed_write_is_named(trained_folder, tmp_path,
                                                                                             capsys):  # fmt: skip
    out = tmp_path / "figures"
    out.mkdir()
    (out / "cross_layer3.png").write_bytes(b"a deeper model's, of another sentence")
    argv = ["attention", "--model", str(trained_folder), "--source", "seven", "--out", str(out), "--num-beams", "1"]
    assert main(argv) == 2 and "holds cross_layer3.png already: pass --overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    assert not (out / "cross_layer3.png").exists() and (out / "cross_layer1.png").exists()
    (out / "alignment.png").unlink()
    (out / "alignment.png").mkdir()  # a folder of the name: the figure cannot be written
    assert main([*argv, "--overwrite"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: --out {out}: could not be written: ")
