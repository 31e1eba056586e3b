"""Export to CTranslate2: every configuration the model allows translates exactly as `generate()` does."""

import json
import os
import subprocess
import sys

import ctranslate2
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from tests.conftest import tiny_model
from vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel
from vanilla_transformer.exports.ctranslate2 import ExportError, export_ctranslate2

CONFIGURATIONS = {
    "paper": {},
    "pre-norm": dict(norm_position="pre"),
    "separate embeddings": dict(share_embeddings=False),
    "learned positions": dict(position_encoding="learned"),
    "attention bias": dict(attention_bias=True),
    "gelu": dict(activation="gelu"),
    "unscaled embeddings": dict(scale_embedding=False),
    "imported from Marian": dict(activation="silu", output_bias=True, position_layout="halves", attention_bias=True),
    "imported from fairseq": dict(position_layout="fairseq", attention_bias=True, share_embeddings=False),
    "every option": dict(
        norm_position="pre", share_embeddings=False, position_encoding="learned", attention_bias=True, activation="gelu"
    ),
}


def word_tokenizer(vocab_size: int = 50) -> PreTrainedTokenizerFast:
    """Ids 0-3 are <pad> <s> </s> <unk>, then the words w4 ... w{vocab_size - 1}; encoding appends </s>."""
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + [f"w{i}" for i in range(4, vocab_size)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def random_sentences(count: int, seed: int = 0) -> list[str]:
    """Sentences of 1 to 12 words: padded batches of very different lengths."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 13, (count,), generator=generator).tolist()
    return [" ".join(f"w{i}" for i in torch.randint(4, 50, (n,), generator=generator).tolist()) for n in lengths]


def peaked_model(seed: int, **overrides) -> VanillaTransformerForConditionalGeneration:
    """A random tiny model whose output distributions are peaked (larger output weights), so that beam search has
    clear winners and end-of-sentence comes up, as in a trained model."""
    model = tiny_model(seed, **overrides)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.mul_(2.0)
    return model


def generate_ids(model, tokenizer, sentences, num_beams: int, max_new_tokens: int = 24) -> list[list[int]]:
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=num_beams, max_new_tokens=max_new_tokens, length_penalty=1.0)
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id}
    return [[i for i in row[1:].tolist() if i not in special] for row in out]


def ctranslate2_ids(folder, tokenizer, sentences, num_beams: int, max_new_tokens: int = 24) -> list[list[int]]:
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(sentences)["input_ids"]]
    results = translator.translate_batch(  # as CTranslate2Translator searches for generate()'s early_stopping=False
        sources,
        beam_size=num_beams,
        patience=2,
        max_decoding_length=max_new_tokens,
        min_decoding_length=0,
        length_penalty=1.0,
    )
    return [tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results]


@pytest.mark.parametrize("name", CONFIGURATIONS)
def test_each_configuration_translates_token_for_token_as_generate(name, tmp_path):
    model, tokenizer = peaked_model(1, **CONFIGURATIONS[name]), word_tokenizer()
    folder = export_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer)
    sentences = random_sentences(16)
    for num_beams in (1, 5):
        expected = generate_ids(model, tokenizer, sentences, num_beams)
        assert ctranslate2_ids(folder, tokenizer, sentences, num_beams) == expected, (name, num_beams)


def same_prefix(ids: list[int], others: list[int]) -> int:
    """How many tokens two outputs share before their first difference."""
    return next((i for i, (a, b) in enumerate(zip(ids, others)) if a != b), min(len(ids), len(others)))


def test_a_trained_model_translates_as_generate_in_float32_and_mostly_so_in_int8(trained_folder, tmp_path):
    model = VanillaTransformerForConditionalGeneration.from_pretrained(trained_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(trained_folder)
    float32 = export_ctranslate2(trained_folder, tmp_path / "float32")
    int8 = export_ctranslate2(trained_folder, tmp_path / "int8", quantization="int8")
    from vanilla_transformer.training.tasks.numbers import english

    sentences = [english(n) for n in range(100, 400, 5)]
    for num_beams in (1, 5):
        expected = generate_ids(model, tokenizer, sentences, num_beams)
        assert ctranslate2_ids(float32, tokenizer, sentences, num_beams) == expected
        quantized = ctranslate2_ids(int8, tokenizer, sentences, num_beams)
        # this model has had 40 updates: many of its choices are near ties, which int8's rounding can flip, and a
        # flipped token changes the rest of the sentence; so agreement is counted token by token, up to the first
        # difference of each sentence, over the longer output
        agree = sum(same_prefix(q, e) for q, e in zip(quantized, expected)) / sum(
            max(len(q), len(e)) for q, e in zip(quantized, expected)
        )
        assert agree >= 0.75, f"int8 agrees with float32 on only {agree:.0%} of the tokens (beam {num_beams})"
        assert any(q == e for q, e in zip(quantized, expected))
    # int8 linear weights (the positional tables stay float32, and are most of this tiny model)
    assert os.path.getsize(os.path.join(int8, "model.bin")) < os.path.getsize(os.path.join(float32, "model.bin"))


def test_the_exported_folder_translates_in_a_fresh_process_without_the_packages_code(trained_folder, tmp_path):
    folder = export_ctranslate2(trained_folder, tmp_path / "ct2")
    script = f"""
import sys

class NoPackage:  # importing vanilla_transformer fails in this process
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "vanilla_transformer":
            raise ImportError("vanilla_transformer is not available here")

sys.meta_path.insert(0, NoPackage())
import ctranslate2
from transformers import AutoTokenizer

folder = {str(folder)!r}
translator = ctranslate2.Translator(folder)
tokenizer = AutoTokenizer.from_pretrained(folder)
source = tokenizer.convert_ids_to_tokens(tokenizer.encode("two hundred fifty-one"))
best = translator.translate_batch([source], beam_size=5, patience=2, min_decoding_length=0)[0].hypotheses[0]
print(tokenizer.decode(tokenizer.convert_tokens_to_ids(best), skip_special_tokens=True))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    model = VanillaTransformerForConditionalGeneration.from_pretrained(trained_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(trained_folder)
    with torch.no_grad():
        generated = model.generate(**tokenizer(["two hundred fifty-one"], return_tensors="pt"), num_beams=5)
    assert result.stdout.strip() == tokenizer.decode(generated[0], skip_special_tokens=True).strip()


def test_the_model_is_not_changed_by_exporting_it(tmp_path):
    model, tokenizer = tiny_model(2), word_tokenizer()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    export_ctranslate2(model, tmp_path / "int8", tokenizer=tokenizer, quantization="int8")
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    half = tiny_model(2).to(torch.bfloat16).train()  # a model in training, in half precision: it stays so
    export_ctranslate2(half, tmp_path / "half", tokenizer=tokenizer)
    assert half.training and {p.dtype for p in half.parameters()} == {torch.bfloat16}


def test_a_folder_with_files_is_kept_unless_overwrite_is_asked(tmp_path):
    model, tokenizer = tiny_model(), word_tokenizer()
    out = tmp_path / "ct2"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"not empty: choose a new folder, or overwrite it \(--overwrite\)"):
        export_ctranslate2(model, out, tokenizer=tokenizer)
    with pytest.raises(ExportError, match="not empty"):  # before the folder's model loads
        export_ctranslate2(str(tmp_path / "no-model-here"), out)
    assert (out / "notes.txt").read_text() == "mine" and sorted(os.listdir(out)) == ["notes.txt"]
    export_ctranslate2(model, out, tokenizer=tokenizer, overwrite=True)
    assert (out / "model.bin").is_file() and not (out / "notes.txt").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".ct2.staging-")] == []  # no staging folder left


def test_a_staging_folder_a_killed_export_left_is_removed_by_the_next_and_an_unwritable_out_is_named(tmp_path):
    model, tokenizer = tiny_model(), word_tokenizer()
    left = tmp_path / ".ct2.staging-0123456789ab"  # as a write killed part-way leaves it
    left.mkdir()
    (left / "model.bin").write_bytes(b"half")
    export_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer)
    assert not left.exists() and (tmp_path / "ct2" / "model.bin").is_file()
    assert oct((tmp_path / "ct2").stat().st_mode & 0o777) == oct(0o777 & ~current_umask())
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ExportError, match=f"{tmp_path}/afile/sub cannot be made, since {tmp_path}/afile is a file"):
        export_ctranslate2(model, tmp_path / "afile" / "sub", tokenizer=tokenizer)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_an_export_never_replaces_a_file_of_the_folder_it_reads(tmp_path, capsys):
    from vanilla_transformer.cli import main

    folder = tmp_path / "model"
    tiny_model().save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    weights, tokenizer = (folder / "model.safetensors").read_bytes(), (folder / "tokenizer.json").read_bytes()
    for out in (folder / "model.safetensors", folder / "tokenizer.json"):
        with pytest.raises(ExportError, match=f"{out} is inside {folder}, which is being read"):
            export_ctranslate2(str(folder), out, overwrite=True)
        for to in ("ctranslate2", "space"):
            assert main(["export", "--model", str(folder), "--to", to, "--out", str(out), "--overwrite"]) == 2
            assert (
                f"--out {out} is a file of the --model folder {folder}: write it elsewhere" in capsys.readouterr().err
            )
    assert (folder / "model.safetensors").read_bytes() == weights
    assert (folder / "tokenizer.json").read_bytes() == tokenizer
    assert main(["export", "--model", str(folder), "--to", "ctranslate2", "--out", str(folder / "ct2")]) == 0  # new


@pytest.mark.parametrize("where", ["the model folder", "a folder above it"])
def test_an_export_never_replaces_the_folder_it_reads_even_with_overwrite(tmp_path, capsys, where):
    from vanilla_transformer.cli import main

    folder = tmp_path / "runs" / "model"
    tiny_model().save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    out = folder if where == "the model folder" else tmp_path / "runs"
    before = sorted(os.listdir(folder))
    with pytest.raises(ExportError, match=f"{out} holds {folder}, which is being read: write to another folder"):
        export_ctranslate2(str(folder), out, overwrite=True)
    capsys.readouterr()
    for to in ("ctranslate2", "space"):  # refused before the model loads
        assert main(["export", "--model", str(folder), "--to", to, "--out", str(out), "--overwrite"]) == 2
        assert capsys.readouterr().err.strip() == f"error: --out {out} holds --model {folder}: write to another folder"
    assert sorted(os.listdir(folder)) == before


def test_a_tokenizer_smaller_than_the_embedding_table_exports_with_placeholder_rows(tmp_path):
    """Every loader's one tokenizer rule is at most vocab_size tokens. The rows past the tokenizer's last id get
    placeholder tokens in the exported vocabulary, and the export still translates as generate()."""
    model, tokenizer = peaked_model(1), word_tokenizer(40)
    folder = export_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer)
    vocabulary = json.loads((folder / "shared_vocabulary.json").read_text())
    assert len(vocabulary) == 50 and len(set(vocabulary)) == 50
    assert vocabulary[:40] == tokenizer.convert_ids_to_tokens(list(range(40)))
    sentences = random_sentences(16)
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(sentences)["input_ids"]]
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    results = translator.translate_batch(sources, beam_size=1, max_decoding_length=24, min_decoding_length=0)
    assert [[vocabulary.index(t) for t in r.hypotheses[0]] for r in results] == generate_ids(
        model, tokenizer, sentences, 1
    )


def test_what_cannot_be_exported_is_named():
    tokenizer = word_tokenizer()
    with pytest.raises(ExportError, match="quantization 'int3'"):
        export_ctranslate2(tiny_model(), "unused", tokenizer=tokenizer, quantization="int3")
    torch.manual_seed(0)
    base = VanillaTransformerModel(tiny_model().config)
    with pytest.raises(ExportError, match="output projection"):
        export_ctranslate2(base, "unused", tokenizer=tokenizer)
    with pytest.raises(ExportError, match="needs its tokenizer"):
        export_ctranslate2(tiny_model(), "unused")
    with pytest.raises(ExportError, match="the tokenizer has 60 tokens but the model's config.json has vocab_size=50"):
        export_ctranslate2(tiny_model(), "unused", tokenizer=word_tokenizer(60))
    learned = tiny_model(position_encoding="learned")
    with pytest.raises(ExportError, match="only 64 learned positions"):
        export_ctranslate2(learned, "unused", tokenizer=tokenizer, max_positions=100)
    for rows in (-5, 0, 1.5, True):
        with pytest.raises(ExportError, match=f"max_positions {rows!r}: expected a positive integer, or None"):
            export_ctranslate2(tiny_model(), "unused", tokenizer=tokenizer, max_positions=rows)
    no_unknown = word_tokenizer()
    no_unknown.unk_token = None
    with pytest.raises(ExportError, match=r"the tokenizer has no unknown token \(unk_token\); ctranslate2 needs one"):
        export_ctranslate2(tiny_model(), "unused", tokenizer=no_unknown)
    without_residuals = tiny_model(residual=False)  # a study's switch: ctranslate2 would run it with residuals
    with pytest.raises(ExportError, match=r"changes the architecture \(\{'residual': False\}"):
        export_ctranslate2(without_residuals, "unused", tokenizer=tokenizer)
    assert not os.path.exists("unused")


def test_an_export_whose_model_bin_is_cut_short_is_named_by_the_command(exported_folder, tmp_path, capsys):
    import shutil

    from vanilla_transformer.cli import main

    damaged = tmp_path / "damaged"
    shutil.copytree(exported_folder, damaged)
    (damaged / "model.bin").write_bytes((damaged / "model.bin").read_bytes()[:500])
    assert main(["translate", "--model", str(damaged), "seven"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --model {damaged}: could not load it for --engine ctranslate2: {damaged}: ")
    assert "CTranslate2 could not load it" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("vanilla_transformer_export.json", "[1]", "expected an object whose max_positions is a positive integer"),
        ("vanilla_transformer_export.json", '{"max_positions": "abc"}', "expected an object whose max_positions is"),
        ("vanilla_transformer_export.json", "{", "not the JSON object an export writes"),
        ("generation_config.json", "[]", "is not a generation config the library reads"),
        ("generation_config.json", '{"max_new_tokens": "x"}', "is not a generation config the library reads"),
        ("vanilla_transformer_export.json", "[" * 5000 + "]" * 5000, "is not valid JSON: it nests too deeply"),
        ("generation_config.json", "[" * 5000 + "]" * 5000, "is not valid JSON: it nests too deeply"),
    ],
)
def test_an_exports_settings_of_the_wrong_kind_are_named_by_file(exported_folder, tmp_path, capsys, name, text,
                                                                 message):  # fmt: skip
    import shutil

    from vanilla_transformer.cli import main

    damaged = tmp_path / "damaged"
    shutil.copytree(exported_folder, damaged)
    (damaged / name).write_text(text)
    assert main(["translate", "--model", str(damaged), "seven"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --model {damaged}") and len(err.splitlines()) == 1, err
    assert f"{name}" in err and message in err
