"""`import_checkpoint` and `vanilla-transformer import`: trained models of Marian (shared and separate vocabularies),
FSMT and fairseq, built with random weights by each source's own implementation (tests/importing_sources.py), come
out computing the source's logits and generating its tokens, and then work with everything this package has."""

import copy
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests import importing_sources as sources
from tests.modeling.test_hub import SOURCES as REMOTE_SOURCES
from tests.modeling.test_hub import run_without_package
from tests.modeling.test_parity import copy_into_torch_transformer
from vanilla_transformer import CheckpointImportError, VanillaTransformerForConditionalGeneration, import_checkpoint
from vanilla_transformer.cli import main
from vanilla_transformer.errors import ModelFolderError
from vanilla_transformer.importers import IMPORTERS, Importer
from vanilla_transformer.importing import KINDS as IMPORT_KINDS
from vanilla_transformer.model_folder import load_model_folder

KINDS = ["marian-shared", "marian-separate", "fsmt", "fairseq"]
PRE_NORM = {"encoder_normalize_before": True, "decoder_normalize_before": True}  # fairseq's pre-norm flags


@dataclass
class Imported:
    reference: torch.nn.Module  # the source's own implementation (for fairseq: the FSMT model it was written from)
    reference_tokenizer: object
    model: VanillaTransformerForConditionalGeneration
    tokenizer: object
    source: str
    folder: str


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("imports")
    built = {}
    for kind in KINDS:
        if kind.startswith("marian"):
            reference, tokenizer = sources.marian_folder(root / kind, separate_vocabs=kind == "marian-separate")
            source, options = root / kind, {}
        elif kind == "fsmt":
            reference, tokenizer = sources.fsmt_folder(root / kind)
            source, options = root / kind, {}
        else:
            folder, reference, tokenizer = sources.fairseq_folder(root / kind)
            source, options = folder / "checkpoint_best.pt", {"trust_pickle": True}
        out = root / f"{kind}-imported"
        model, ours = import_checkpoint(source, kind.split("-")[0], out=out, **options)
        built[kind] = Imported(reference, tokenizer, model, ours, str(source), str(out))
    return built


def batch(tokenizer, texts):
    return tokenizer(texts, return_tensors="pt", padding=True)


def decoder_inputs(model, tokenizer, count: int, seed: int):
    """Padded target sentences, shifted right as in training, and where they are not padding."""
    labels = tokenizer(
        text_target=sources.sentences(count, sources.TARGET_WORDS, seed), return_tensors="pt", padding=True
    )["input_ids"]
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    real = decoder_input_ids != model.config.pad_token_id
    real[:, 0] = True  # Marian's decoding starts from <pad> itself
    return decoder_input_ids, real


def reference_logits(imported: Imported, source_batch, decoder_input_ids):
    # FSMT builds its causal mask only when use_cache is off
    with torch.no_grad():
        return imported.reference(**source_batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits


@pytest.mark.parametrize("kind", KINDS)
def test_imported_logits_equal_the_sources_on_padded_batches(imported, kind):
    case = imported[kind]
    texts = sources.sentences(8, seed=3)
    theirs, ours = batch(case.reference_tokenizer, texts), batch(case.tokenizer, texts)
    assert torch.equal(theirs["input_ids"], ours["input_ids"])  # the tokenizer came along, with the same ids
    assert (ours["attention_mask"] == 0).any()
    decoder_input_ids, real = decoder_inputs(case.model, case.tokenizer, 8, seed=4)
    with torch.no_grad():
        logits = case.model(**ours, decoder_input_ids=decoder_input_ids).logits
    expected = reference_logits(case, theirs, decoder_input_ids)
    assert logits.shape == expected.shape
    torch.testing.assert_close(logits[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_imported_generate_gives_the_sources_tokens(imported, kind, num_beams):
    case = imported[kind]
    texts = sources.sentences(8, seed=5)
    search = dict(num_beams=num_beams, max_new_tokens=24)  # the fairseq reference, an FSMT model, has other defaults
    with torch.no_grad():
        expected = case.reference.generate(**batch(case.reference_tokenizer, texts), **search)
        tokens = case.model.generate(**batch(case.tokenizer, texts), **search)
    assert tokens.tolist() == expected.tolist()
    assert len({tuple(row) for row in tokens.tolist()}) > 1  # translations that depend on the source


@pytest.mark.parametrize("kind", ["fsmt", "fairseq", "marian-shared"])
def test_an_input_longer_than_the_positions_table_gives_the_sources_logits(imported, kind):
    """FSMT extends its table on demand as the model does; Marian's table is its limit, read up to its last row."""
    case = imported[kind]
    length = case.reference.config.max_position_embeddings + 8 if kind != "marian-shared" else 64
    words = sources.sentences(1, seed=6, longest=1)[0].split() * (length - 1)
    text = " ".join(words)
    theirs, ours = batch(case.reference_tokenizer, [text]), batch(case.tokenizer, [text])
    assert ours["input_ids"].shape[1] == length > case.model.model.encoder.embed.embed_positions.pe.shape[0] - 1
    decoder_input_ids, _ = decoder_inputs(case.model, case.tokenizer, 1, seed=7)
    with torch.no_grad():
        logits = case.model(**ours, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(logits, reference_logits(case, theirs, decoder_input_ids), atol=1e-5, rtol=1e-5)


def test_what_each_source_carries_over(imported):
    marian, separate = imported["marian-shared"].model.config, imported["marian-separate"].model.config
    assert (marian.activation, marian.position_layout, marian.output_bias) == ("swish", "halves", True)
    assert marian.decoder_start_token_id == marian.pad_token_id and marian.share_embeddings
    assert not separate.share_embeddings and separate.share_decoder_embeddings
    assert separate.target_vocab_size == imported["marian-separate"].reference.config.decoder_vocab_size
    for kind in ("fsmt", "fairseq"):
        config = imported[kind].model.config
        assert (config.position_layout, config.pad_token_id, config.decoder_start_token_id) == ("fairseq", 1, 2)
        assert config.vocab_size != config.target_vocab_size and not config.share_decoder_embeddings
    generation = imported["marian-shared"].model.generation_config
    # the source's max_length 64, as the same limit in new tokens (the decoder starts from one token)
    assert (generation.bad_words_ids, generation.num_beams, generation.max_new_tokens) == ([[2]], 4, 63)
    assert generation.max_length is None
    card = open(os.path.join(imported["fairseq"].folder, "README.md"), encoding="utf-8").read()
    assert "checkpoint_best.pt" in card and "fairseq" in card and "imported" in card


@pytest.mark.parametrize("kind", ["marian-separate", "fairseq"])
def test_an_imported_folder_reloads_through_the_auto_classes_with_and_without_the_package(imported, kind, tmp_path):
    case = imported[kind]
    texts = sources.sentences(4, seed=8)
    tokenizer = AutoTokenizer.from_pretrained(case.folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(case.folder).eval()
    assert type(model) is VanillaTransformerForConditionalGeneration
    expected = case.model.generate(**batch(case.tokenizer, texts), num_beams=2, max_new_tokens=12).tolist()
    assert model.generate(**batch(tokenizer, texts), num_beams=2, max_new_tokens=12).tolist() == expected
    remote = run_without_package(case.folder, tmp_path / "copy", tmp_path)
    assert remote["model"] == "VanillaTransformerForConditionalGeneration" and not remote["package_modules"]
    reference = batch(case.tokenizer, REMOTE_SOURCES)
    expected = case.model.generate(**reference, num_beams=2, max_new_tokens=12).tolist()
    assert remote["tokens"] == remote["tokens_again"] == expected


@pytest.mark.parametrize("kind", KINDS)
def test_an_imported_tokenizer_reads_a_special_tokens_text_as_text_as_its_source_does(imported, kind):
    """marian-nmt's SentencePiece and fairseq's Moses tokenizer read a `</s>` or `<pad>` in a sentence as text, not
    as the token: so does the imported folder's tokenizer, wherever it is loaded (transformers' tokenizers would not,
    unless told: the import saves `split_special_tokens`)."""
    case = imported[kind]
    tokenizer, pad = AutoTokenizer.from_pretrained(case.folder), case.model.config.pad_token_id
    for text in ("one </s> two", "three <pad> four </s>"):
        for ids in (tokenizer(text)["input_ids"], tokenizer(text_target=text)["input_ids"]):
            assert ids[-1] not in ids[:-1] and pad not in ids, (text, ids)  # one end of sentence, the last


@pytest.mark.parametrize("kind", KINDS)
def test_an_imported_model_exports_to_ctranslate2_with_the_same_translations(imported, kind, tmp_path):
    from vanilla_transformer.exports.ctranslate2 import export_ctranslate2
    from vanilla_transformer.inference.translators import load_translator

    case = imported[kind]
    exported = export_ctranslate2(case.folder, str(tmp_path / "ct2"))
    texts = sources.sentences(8, seed=9)
    pytorch, ctranslate2 = load_translator(case.folder), load_translator(exported)
    expected = [t[0].text for t in pytorch.translate(texts, num_beams=1, max_length=20)]
    assert [t[0].text for t in ctranslate2.translate(texts, num_beams=1, max_length=20)] == expected
    # beam search stopping as ctranslate2 does (generate()'s early_stopping=True is its patience 1), without </s>
    # forced at the length limit (Marian's and FSMT's forced_eos_token_id), for which ctranslate2 has no rule
    for translator in (pytorch, ctranslate2):
        translator.generation_config.update(early_stopping=True, forced_eos_token_id=None)
    expected = [t[0].text for t in pytorch.translate(texts, num_beams=3, max_length=20)]
    assert [t[0].text for t in ctranslate2.translate(texts, num_beams=3, max_length=20)] == expected
    # and the same numbers: the log-probability of every token of given translations
    references = sources.sentences(8, sources.TARGET_WORDS, seed=13)
    found = ctranslate2.reference_log_probs(texts, references)
    with torch.no_grad():
        labels = case.tokenizer(text_target=references, return_tensors="pt", padding=True)["input_ids"]
        labels[labels == case.model.config.pad_token_id] = -100
        logits = case.model(**batch(case.tokenizer, texts), labels=labels).logits
    for row, (scores, label) in enumerate(zip(found, labels)):
        expected = logits[row].log_softmax(-1)[torch.arange(len(scores)), label[: len(scores)]]
        torch.testing.assert_close(torch.tensor(scores), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_both_engines_end_a_finished_translations_tokens_with_its_end_of_sentence(imported, kind, tmp_path):
    """FSMT's and fairseq's tokenizers name their </s> only as sep_token: the id comes from the export's own."""
    from vanilla_transformer.exports.ctranslate2 import export_ctranslate2
    from vanilla_transformer.inference.translators import load_translator

    case = imported[kind]
    model = copy.deepcopy(case.model)
    eos = model.config.eos_token_id
    with torch.no_grad():
        model.lm_head.weight[eos] = 3 * model.lm_head.weight[eos + 2]  # </s> soon
    model.save_pretrained(tmp_path / "model")
    case.tokenizer.save_pretrained(tmp_path / "model")
    exported = export_ctranslate2(str(tmp_path / "model"), str(tmp_path / "ct2"))
    texts = sources.sentences(8, seed=9)
    pytorch, ctranslate2 = load_translator(str(tmp_path / "model")), load_translator(exported)
    for translator in (pytorch, ctranslate2):
        translator.generation_config.update(forced_eos_token_id=None)  # ctranslate2 has no rule for it
    expected = [t[0].tokens for t in pytorch.translate(texts, num_beams=1, max_length=20)]
    assert [t[0].tokens for t in ctranslate2.translate(texts, num_beams=1, max_length=20)] == expected
    assert any(tokens[-1] == eos for tokens in expected)
    prefix = [sources.sentences(1, sources.TARGET_WORDS, seed=3)[0].split()[0]] * len(texts)  # its </s> left out
    expected = [t[0].text for t in pytorch.translate(texts, prefix=prefix, num_beams=1, max_length=20)]
    assert [t[0].text for t in ctranslate2.translate(texts, prefix=prefix, num_beams=1, max_length=20)] == expected


def test_an_fsmt_import_encodes_targets_with_the_target_vocabulary(tmp_path):
    """FSMT's own tokenizer encodes `text_target` with the source vocabulary; the import's gives the target
    vocabulary's ids (here the two order their words differently, so no id is shared by chance)."""
    german = list(reversed(sources.TARGET_WORDS))
    _, reference = sources.fsmt_folder(tmp_path / "fsmt", target_words=german)
    _, tokenizer = import_checkpoint(tmp_path / "fsmt", "fsmt", out=tmp_path / "imported")
    targets = sources.sentences(6, sources.TARGET_WORDS, seed=30)
    expected = [[4 + german.index(word) for word in sentence.split()] + [2] for sentence in targets]
    assert AutoTokenizer.from_pretrained(tmp_path / "imported")(text_target=targets)["input_ids"] == expected
    assert tokenizer(text_target=targets)["input_ids"] == expected != reference(text_target=targets)["input_ids"]
    assert tokenizer(targets)["input_ids"] == reference(targets)["input_ids"]  # sources as FSMT encodes them
    assert tokenizer.batch_decode(expected, skip_special_tokens=True) == targets


def test_a_marian_import_with_separate_vocabularies_encodes_targets_as_marian_does(imported):
    case = imported["marian-separate"]
    targets = sources.sentences(6, sources.TARGET_WORDS, seed=31)
    expected = case.reference_tokenizer(text_target=targets)["input_ids"]
    assert AutoTokenizer.from_pretrained(case.folder)(text_target=targets)["input_ids"] == expected


@pytest.mark.parametrize("kind", ["marian-separate", "fsmt"])
def test_an_imported_model_fine_tunes_one_seq2seq_trainer_step(imported, kind, tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    case = imported[kind]
    model = AutoModelForSeq2SeqLM.from_pretrained(case.folder)
    tokenizer = AutoTokenizer.from_pretrained(case.folder)
    texts, targets = sources.sentences(8, seed=10), sources.sentences(8, sources.TARGET_WORDS, seed=11)
    data = Dataset.from_dict({"source": texts, "target": targets}).map(
        lambda row: tokenizer(row["source"], text_target=row["target"]), remove_columns=["source", "target"]
    )
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    output_before = model.get_output_embeddings().weight.detach().clone()  # tied to an embedding in Marian's
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=8, report_to=[], use_cpu=True
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=arguments,
        train_dataset=data,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    result = trainer.train()
    assert result.global_step == 1 and torch.isfinite(torch.tensor(result.training_loss))
    changed = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert "model.encoder.layers.0.ffn.w_1.weight" in changed and "model.decoder.layers.1.ffn.w_2.bias" in changed
    assert not torch.equal(model.get_output_embeddings().weight, output_before)


def test_the_table_of_importers_is_the_one_list_of_kinds(imported, monkeypatch, tmp_path):
    """`import_checkpoint`, its refusal of an unknown kind and the model card read `IMPORTERS`: a kind added to the
    table is accepted, named among the known ones, and described in its card; `KINDS` is the table's kinds."""
    assert IMPORT_KINDS == tuple(IMPORTERS) == ("marian", "fsmt", "fairseq")
    with pytest.raises(CheckpointImportError, match=r"^kind 'opennmt': expected one of marian, fsmt, fairseq\.$"):
        import_checkpoint("anything", "opennmt")
    case = imported["marian-shared"]

    def read(source: str, trust_pickle: bool):
        return copy.deepcopy(case.model), case.tokenizer, None

    for kind, hub_base_model in (("opennmt", False), ("opennmt-hub", True)):
        monkeypatch.setitem(
            IMPORTERS, kind, Importer(read, f"an {kind} checkpoint", hub_base_model=hub_base_model, model_type=None)
        )
    with pytest.raises(CheckpointImportError, match=r"expected one of marian, fsmt, fairseq, opennmt, opennmt-hub\.$"):
        import_checkpoint("anything", "moses")
    (tmp_path / "model.pt").write_bytes(b"")  # a local source must exist
    import_checkpoint(tmp_path / "model.pt", "opennmt", out=tmp_path / "out")
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "The weights of `model.pt`, an opennmt checkpoint, imported unchanged by" in card
    assert "`vanilla-transformer import --from opennmt`" in card and "imported-from-opennmt" in card
    assert "base_model" not in card
    model, _ = import_checkpoint("someone/opus-mt-xx", "opennmt-hub")
    assert "base_model: someone/opus-mt-xx" in model._model_card_text
    assert "[someone/opus-mt-xx](https://huggingface.co/someone/opus-mt-xx), an opennmt-hub checkpoint" in (
        model._model_card_text
    )


def test_a_fairseq_checkpoint_is_read_only_when_the_pickle_is_trusted(imported):
    with pytest.raises(CheckpointImportError, match="--trust-pickle"):
        import_checkpoint(imported["fairseq"].source, "fairseq")


def test_languages_are_given_for_a_fairseq_checkpoint_only(imported, tmp_path, capsys):
    """A fairseq checkpoint that names its languages takes the same ones (or none); a Marian or FSMT source names
    its own, and `import --languages` for one is an error of one line."""
    case = imported["marian-separate"]
    command = ["import", "--from", "marian", case.source, "--out", str(tmp_path / "m"), "--languages", "en", "de"]
    assert main(command) == 2
    assert "languages: a marian source names its own; they are given for fairseq only." in capsys.readouterr().err
    source = imported["fairseq"].source
    _, tokenizer = import_checkpoint(source, "fairseq", trust_pickle=True, languages=("en", "de"))
    assert (tokenizer.src_lang, tokenizer.tgt_lang) == ("en", "de")
    with pytest.raises(CheckpointImportError, match="is en to de, not fr to de"):
        import_checkpoint(source, "fairseq", trust_pickle=True, languages=("fr", "de"))


@pytest.mark.parametrize(
    "settings, extra, named",
    [
        ({"layernorm_embedding": True}, {}, "layernorm_embedding"),
        ({"max_relative_positions": 16}, {}, "max_relative_positions"),
        ({"activation_fn": "gelu_accurate"}, {}, "activation_fn"),
        ({"decoder_ffn_embed_dim": 64}, {}, "decoder_ffn_embed_dim"),
        ({}, {"encoder.layernorm_embedding.weight": torch.ones(16)}, "encoder.layernorm_embedding.weight"),
        ({"arch": "lightconv_iwslt_de_en"}, {}, "arch"),
        ({**PRE_NORM, "no_decoder_final_norm": True}, {}, "no_decoder_final_norm"),
        ({"encoder_ffn_embed_dim": 48, "decoder_ffn_embed_dim": 48}, {}, "a weight does not fit the model"),
        ({"encoder_layers": "2"}, {}, "encoder_layers"),
        ({"task": "translation_multi_simple_epoch", "encoder_langtok": "src", "decoder_langtok": True}, {},
         "encoder_langtok='src'; the model reads and writes language tokens, which the imported tokenizer cannot"),
    ],
)  # fmt: skip
def test_a_variant_the_model_cannot_express_is_named(tmp_path, settings, extra, named):
    folder, _, _ = sources.fairseq_folder(tmp_path / "fairseq", args_overrides=settings, extra=extra)
    with pytest.raises(CheckpointImportError, match=named):
        import_checkpoint(folder, "fairseq", trust_pickle=True)


def test_learned_positions_of_two_sizes_are_cut_to_the_smaller_with_a_warning(tmp_path, capsys):
    learned = {"encoder_learned_pos": True, "decoder_learned_pos": True}
    sizes = {"max_source_positions": 40, "max_target_positions": 30}
    tables = {f"{stack}.embed_positions.weight": torch.randn(rows + 2, 16) for stack, rows in (("encoder", 40),
              ("decoder", 30))}  # fmt: skip
    folder, _, _ = sources.fairseq_folder(tmp_path / "learned", args_overrides={**learned, **sizes}, extra=tables)
    model, _ = import_checkpoint(folder, "fairseq", trust_pickle=True)
    assert model.config.max_position_embeddings == 30
    assert "learned positions for 40 source and 30 target tokens; the model has one table of 30" in (
        capsys.readouterr().err
    )


def test_a_fairseq_checkpoint_leaving_out_what_its_weights_cannot_tell_is_warned_of(tmp_path, capsys):
    heads = {"encoder_attention_heads": None, "decoder_attention_heads": None}
    folder, _, _ = sources.fairseq_folder(
        tmp_path / "iwslt", args_overrides={**heads, "arch": "transformer_iwslt_de_en"}
    )
    import_checkpoint(folder, "fairseq", trust_pickle=True)
    assert "its arguments leave out encoder_attention_heads, which the weights cannot tell" in capsys.readouterr().err
    folder, _, _ = sources.fairseq_folder(tmp_path / "base", args_overrides={**heads, "arch": "transformer"})
    import_checkpoint(folder, "fairseq", trust_pickle=True)  # base_architecture's own: nothing to warn of
    assert "leave out" not in capsys.readouterr().err


def test_source_files_cut_short_or_not_utf8_are_named_in_one_line(tmp_path):
    marian = tmp_path / "marian"
    sources.marian_folder(marian)
    (marian / "source.spm").write_bytes((marian / "source.spm").read_bytes()[:50])
    with pytest.raises(CheckpointImportError, match=f"{marian}: could not load its tokenizer"):
        import_checkpoint(marian, "marian", out=tmp_path / "m")
    cut = tmp_path / "cut"
    sources.marian_folder(cut)
    (cut / "model.safetensors").write_bytes((cut / "model.safetensors").read_bytes()[:5000])
    header = "could not load it as MarianMTModel: Error while deserializing header: [^(]*$"  # no hint of pickles
    with pytest.raises(CheckpointImportError, match=f"{cut}: {header}"):
        import_checkpoint(cut, "marian", out=tmp_path / "m")
    folder, _, _ = sources.fairseq_folder(tmp_path / "fairseq")
    (folder / "dict.en.txt").write_bytes(b"\xff\xfe 1\n")
    with pytest.raises(CheckpointImportError, match="a file of it is not UTF-8 text"):
        import_checkpoint(folder / "checkpoint_best.pt", "fairseq", trust_pickle=True, out=tmp_path / "f")
    assert not (tmp_path / "m").exists() and not (tmp_path / "f").exists()


@pytest.mark.parametrize(
    "kind, lacking", [("marian", "source.spm"), ("fsmt", "merges.txt"), ("marian", "target_vocab.json")]
)
def test_a_source_folder_lacking_a_tokenizer_file_is_named_with_the_file(tmp_path, kind, lacking):
    folder = tmp_path / kind
    if kind == "marian":  # target_vocab.json: a separate target vocabulary's
        sources.marian_folder(folder, separate_vocabs=lacking == "target_vocab.json")
    else:
        sources.fsmt_folder(folder)
    (folder / lacking).unlink()
    with pytest.raises(
        CheckpointImportError, match=f"^{folder}: its tokenizer needs {lacking}, which the folder lacks"
    ):
        import_checkpoint(folder, kind)


@pytest.mark.parametrize("kind", IMPORT_KINDS)
def test_a_source_that_is_not_there_is_named_not_looked_up(tmp_path, kind):
    for source in (tmp_path / "nowhere", "./runs/nowhere"):
        with pytest.raises(CheckpointImportError, match=f"^{source}: no such file or folder"):
            import_checkpoint(source, kind, trust_pickle=True)


def test_a_pre_norm_fairseq_checkpoint_keeps_its_final_layer_norms(tmp_path):
    """fairseq's --encoder-normalize-before: pre-norm layers, a final LayerNorm closing each stack."""
    norms = {
        f"{stack}.layer_norm.{part}": torch.randn(16) for stack in ("encoder", "decoder") for part in ("weight", "bias")
    }
    folder, _, _ = sources.fairseq_folder(tmp_path / "fairseq", args_overrides=PRE_NORM, extra=norms)
    model, _ = import_checkpoint(folder, "fairseq", trust_pickle=True)
    assert model.config.norm_position == "pre"
    for stack in ("encoder", "decoder"):
        final = getattr(model.model, stack).final_norm
        assert torch.equal(final.weight, norms[f"{stack}.layer_norm.weight"])
        assert torch.equal(final.bias, norms[f"{stack}.layer_norm.bias"])
    # and it computes what torch.nn.Transformer computes with norm_first=True and its final LayerNorms
    reference = copy_into_torch_transformer(model, norm_first=True)
    reference.encoder.norm.load_state_dict(model.model.encoder.final_norm.state_dict())
    reference.decoder.norm.load_state_dict(model.model.decoder.final_norm.state_dict())
    src, tgt = torch.randint(4, 30, (2, 7)), torch.randint(4, 30, (2, 5))
    with torch.no_grad():
        ours = model.model(input_ids=src, decoder_input_ids=tgt).last_hidden_state
        theirs = reference(
            model.model.encoder.embed(src, None),
            model.model.decoder.embed(tgt, None),
            tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1]),
            tgt_is_causal=True,
        )
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


def test_a_model_folder_of_another_type_names_the_import_that_brings_it_in(imported, capsys):
    source = imported["marian-shared"].source
    with pytest.raises(ModelFolderError, match=f"vanilla-transformer import --from marian {source} --out DIR"):
        load_model_folder(source)
    assert main(["translate", "--model", imported["fsmt"].source, "w5 w6"]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "import --from fsmt" in error
    assert main(["translate", "--model", imported["fairseq"].source, "w5"]) == 1
    assert "import --from fairseq" in capsys.readouterr().err


def test_a_model_folder_of_a_type_no_importer_reads_names_the_kinds_that_can_be(tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    expected = "vanilla-transformer import brings in marian, fsmt and fairseq models only."
    with pytest.raises(ModelFolderError, match=f"a 'bert' model folder, not a vanilla_transformer one; {expected}"):
        load_model_folder(str(folder))


def test_a_folder_of_another_type_than_the_import_reads_is_named_before_reading(imported, trained_folder, tmp_path):
    marian = imported["marian-shared"].source
    with pytest.raises(CheckpointImportError, match=f"{marian}: a 'marian' model folder, not a 'fsmt' one; import it "
                       "with --from marian"):  # fmt: skip
        import_checkpoint(marian, "fsmt", out=tmp_path / "out")
    with pytest.raises(CheckpointImportError, match="'vanilla_transformer' model folder, not a 'marian' one; it is a "
                       "model folder of this package already"):  # fmt: skip
        import_checkpoint(trained_folder, "marian", out=tmp_path / "out")
    untyped = tmp_path / "untyped"  # a CTranslate2 export's config.json, say: no importer's, fairseq's included
    untyped.mkdir()
    (untyped / "config.json").write_text('{"bos_token": "<s>"}')
    with pytest.raises(CheckpointImportError, match=f"{untyped}: its config.json names no model_type; expected a "
                       "'marian' folder$"):  # fmt: skip
        import_checkpoint(untyped, "marian", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_path_that_is_not_a_model_folder_is_named_in_one_line(trained_folder, tmp_path, capsys, monkeypatch):
    empty, missing, no_tokenizer = tmp_path / "empty", tmp_path / "missing", tmp_path / "no-tokenizer"
    wrong_type, a_list = tmp_path / "wrong-type", tmp_path / "a-list"
    other_shapes, fewer = tmp_path / "other-shapes", tmp_path / "fewer-weights"  # than the config's model
    more = tmp_path / "more-weights"
    deep_config, deep_tokenizer = tmp_path / "deep-config", tmp_path / "deep-tokenizer"  # JSON deeper than Python reads
    listed, no_start = tmp_path / "listed", tmp_path / "no-start"  # generation configs: a list; no first token, which
    # config.json's fills in
    for folder in (empty, no_tokenizer):
        folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((trained_folder / name).read_bytes())
    for folder in (wrong_type, a_list, other_shapes, fewer, more, listed, no_start, deep_config, deep_tokenizer):
        shutil.copytree(trained_folder, folder)
    for folder, name in ((deep_config, "config.json"), (deep_tokenizer, "tokenizer.json")):
        (folder / name).write_text("[" * 5000 + "]" * 5000)
    (listed / "generation_config.json").write_text("[]")
    generation = json.loads((trained_folder / "generation_config.json").read_text())
    without = {k: v for k, v in generation.items() if k not in ("decoder_start_token_id", "bos_token_id")}
    (no_start / "generation_config.json").write_text(json.dumps(without))
    config = json.loads((trained_folder / "config.json").read_text())
    (wrong_type / "config.json").write_text(json.dumps({**config, "vocab_size": "200"}))
    (a_list / "config.json").write_text("[1, 2, 3]")
    (other_shapes / "config.json").write_text(json.dumps({**config, "d_ff": config["d_ff"] * 2}))
    (fewer / "config.json").write_text(json.dumps({**config, "encoder_layers": config["encoder_layers"] + 1}))
    weights = load_file(more / "model.safetensors")
    save_file({**weights, "model.decoder.layers.9.ffn.w_1.bias": torch.zeros(3)}, more / "model.safetensors")
    expected = {
        empty: f"{empty}: no config.json, so not a model folder",
        trained_folder / "config.json": f"{trained_folder / 'config.json'}: a file, not a model folder",
        missing: f"{missing}: no such folder",
        no_tokenizer: f"{no_tokenizer}: could not load a model folder, which has no tokenizer.json: ",
        wrong_type: f"{wrong_type}: could not load a model folder: Validation error for field 'vocab_size'",
        a_list: f"{a_list}: config.json holds list, not an object of settings",
        other_shapes: f"{other_shapes}: could not load a model folder: {other_shapes}/: model.decoder.layers.0.ffn.w_1",
        listed: f"{listed}: generation_config.json is not a generation config the library reads: 'list' object",
        fewer: f"{fewer}: its weights lack model.encoder.layers.1.ffn.w_1.bias, .* and 7 more, which the model of",
        more: f"{more}: its weights hold model.decoder.layers.9.ffn.w_1.bias, which the model of its config.json lacks",
        deep_config: f"{deep_config}: config.json is not valid JSON: it nests too deeply",
        deep_tokenizer: f"{deep_tokenizer}: tokenizer.json is not valid JSON: it nests too deeply",
    }
    for folder in (trained_folder, no_start):  # the library's generate() would fail on the second
        assert main(["translate", "--model", str(folder), "seven"]) == 0
    outputs = capsys.readouterr().out.splitlines()
    assert len(outputs) == 2 and outputs[0] == outputs[1]
    reports = []  # the library's loading report, of a load then refused: the refusal says it in one line
    monkeypatch.setattr(logging.getLogger("transformers.modeling_utils"), "handlers", [handler := logging.Handler()])
    handler.emit = reports.append
    for folder, message in expected.items():
        with pytest.raises(ModelFolderError, match=message):
            load_model_folder(str(folder))
        assert main(["translate", "--model", str(folder), "seven"]) == 1
        error = capsys.readouterr().err
        assert re.match(f"error: --model {message}", error.strip().splitlines()[-1]) and "Traceback" not in error
    assert reports == []


def test_a_recursion_error_of_no_json_file_stays_a_bug(trained_folder, monkeypatch):
    """Only a folder's JSON file nested too deeply turns a RecursionError into a ModelFolderError."""
    from transformers import AutoTokenizer

    def recurse(*args, **kwargs):
        raise RecursionError("a bug's")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", recurse)
    with pytest.raises(RecursionError, match="a bug's"):
        load_model_folder(str(trained_folder))


def test_import_then_translate_export_and_demo_from_the_command_line(imported, tmp_path, capsys):
    from vanilla_transformer.demo.app import Demo, import_gradio, run_translation

    case = imported["fairseq"]
    out = tmp_path / "model"
    assert main(["import", "--from", "fairseq", case.source, "--out", str(out)]) == 2
    assert "--trust-pickle" in capsys.readouterr().err and not out.exists()
    assert main(["import", "--from", "fairseq", case.source, "--out", str(out), "--trust-pickle"]) == 0
    assert "Imported" in capsys.readouterr().out
    texts = sources.sentences(3, seed=12)
    assert main(["translate", "--model", str(out), "--num-beams", "2", "--max-length", "12", *texts]) == 0
    translations = capsys.readouterr().out.splitlines()
    assert main(["export", "--model", str(out), "--to", "ctranslate2", "--out", str(tmp_path / "ct2")]) == 0
    capsys.readouterr()
    assert main(["translate", "--model", str(tmp_path / "ct2"), "--num-beams", "2", "--max-length", "12", *texts]) == 0
    assert capsys.readouterr().out.splitlines() == translations
    demo = Demo(*load_model_folder(str(out)))
    outputs = run_translation(demo, import_gradio(), texts[0], 2)
    stages = outputs[3]
    assert outputs[0] == stages.translation != ""
    assert stages.source_tokens == case.tokenizer.tokenize(texts[0]) + ["</s>"]  # the source vocabulary's tokens
    positions = demo.model.model.encoder.embed.embed_positions.table(len(stages.source_tokens))
    torch.testing.assert_close(stages.embeddings["encoder"].positions, positions)  # fairseq's, from position 2


@pytest.mark.parametrize("kind", KINDS)
def test_every_imported_kind_prints_word_alignments(imported, kind, capsys):
    """Their tokenizers give no character offsets: the words come from the tokenizers' own markers."""
    texts = sources.sentences(3, seed=13)
    argv = ["translate", "--model", imported[kind].folder, "--num-beams", "2", "--max-length", "12", "--alignments"]
    assert main([*argv, *texts]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(texts)
    for text, line in zip(texts, lines):
        translation, pharaoh = line.split("\t")
        pairs = [tuple(map(int, pair.split("-"))) for pair in pharaoh.split()]
        assert all(s < len(text.split()) and t < len(translation.split()) for s, t in pairs), (text, line)
        assert {t for _, t in pairs} == set(range(len(translation.split())))  # every target word has a source word


@pytest.mark.parametrize(
    "codes",
    [
        "#version: 0.2\n8 7\n6 9</w>\ne r</w>\n1 9\n",  # subword-nmt: a merge's second symbol may be digits
        "8 7 120\n6 9</w> 80\ne r</w> 75\n1 9 12\n",  # fastBPE: each merge with its count
    ],
)
def test_bpe_codes_keep_every_merge_whose_symbols_are_digits(tmp_path, codes):
    from transformers import FSMTTokenizer

    from vanilla_transformer.importers.fairseq import bpe_merges

    (tmp_path / "bpecodes").write_text(codes, encoding="utf-8")
    merges = [line for line in bpe_merges(str(tmp_path)).splitlines() if not line.startswith("#")]
    assert merges == ["8 7", "6 9</w>", "e r</w>", "1 9"]
    vocabulary = {token: i for i, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", "87@@", "69</w>", "8769</w>"])}
    (tmp_path / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    (tmp_path / "merges.txt").write_text(bpe_merges(str(tmp_path)), encoding="utf-8")
    tokenizer = FSMTTokenizer(
        langs=["en", "de"],
        src_vocab_file=str(tmp_path / "vocab.json"),
        tgt_vocab_file=str(tmp_path / "vocab.json"),
        merges_file=str(tmp_path / "merges.txt"),
    )
    assert tokenizer.tokenize("8769") == ["87", "69</w>"]  # as subword-nmt segments it: 87@@ 69


@pytest.mark.parametrize("kind", ["marian-separate", "fsmt", "fairseq"])
def test_translating_with_an_imported_folder_warns_of_no_length_clash(imported, kind, capfd):
    """The source's total length limit is kept as new tokens: translate asks for new tokens, and a config holding
    both would make generate() warn on every batch."""
    case = imported[kind]
    config = load_model_folder(case.folder)[0].generation_config
    assert config.max_length is None and config.max_new_tokens > 0  # the source's limit, counted in new tokens
    if kind == "fsmt":
        assert config.max_new_tokens == case.reference.generation_config.max_length - 1
    texts = sources.sentences(3, seed=5)
    capfd.readouterr()
    assert main(["translate", "--model", case.folder, "--batch-size", "1", "--num-beams", "2", *texts]) == 0
    printed = capfd.readouterr()
    assert len(printed.out.splitlines()) == 3 and "seem to have been set" not in printed.err


def test_an_import_never_replaces_the_folder_it_reads_even_with_overwrite(tmp_path):
    from vanilla_transformer.importing import CheckpointImportError, import_checkpoint

    source = tmp_path / "opus" / "marian"
    source.mkdir(parents=True)
    (source / "config.json").write_text("{}")
    for out in (source, tmp_path / "opus"):
        with pytest.raises(CheckpointImportError, match=f"{out} holds {source}, which is being read"):
            import_checkpoint(source, "marian", out=out, overwrite=True)
    for out in (source / "config.json",):  # one of its files
        with pytest.raises(CheckpointImportError, match=f"{out} is inside {source}, which is being read"):
            import_checkpoint(source, "marian", out=out, overwrite=True)
    checkpoint = tmp_path / "fairseq" / "checkpoint_best.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"weights")
    (checkpoint.parent / "dict.en.txt").write_text("a 1\n")
    with pytest.raises(CheckpointImportError, match="dict.en.txt is inside .*, which is being read"):
        import_checkpoint(checkpoint, "fairseq", out=checkpoint.parent / "dict.en.txt", overwrite=True)
    assert (source / "config.json").read_text() == "{}" and (checkpoint.parent / "dict.en.txt").read_text() == "a 1\n"


@pytest.mark.parametrize("kind", ["marian", "fsmt"])
def test_a_half_precision_source_and_one_whose_config_names_half_precision_import_their_exact_values(tmp_path, kind):
    make = {"marian": sources.marian_folder, "fsmt": sources.fsmt_folder}[kind]
    half, _ = make(tmp_path / "half")
    half.half().save_pretrained(tmp_path / "half")  # its sinusoids too, rounded to float16
    model, _ = import_checkpoint(tmp_path / "half", kind)
    weight = model.model.encoder.layers[0].ffn.w_1.weight
    assert weight.dtype == torch.float32 and torch.equal(weight, half.model.encoder.layers[0].fc1.weight.float())
    full, _ = make(tmp_path / "named")
    config = json.loads((tmp_path / "named" / "config.json").read_text())
    (tmp_path / "named" / "config.json").write_text(json.dumps({**config, "dtype": "float16"}))
    model, _ = import_checkpoint(tmp_path / "named", kind)  # float32 weights: not rounded to the config's float16
    assert torch.equal(model.model.encoder.layers[0].ffn.w_1.weight, full.model.encoder.layers[0].fc1.weight)


@pytest.mark.parametrize("change", ["drop", "add"])
def test_an_import_whose_weights_do_not_match_its_config_one_for_one_is_refused(tmp_path, change):
    from safetensors.torch import load_file, save_file

    from vanilla_transformer.importing import CheckpointImportError, import_checkpoint

    source = tmp_path / "marian"
    sources.marian_folder(source)
    weights = load_file(source / "model.safetensors")
    if change == "drop":
        weights.pop("model.encoder.layers.0.fc1.weight")
        message = "the model lacks: model.encoder.layers.0.fc1.weight"
    else:
        weights["model.encoder.layernorm_embedding.weight"] = weights["model.encoder.layers.0.fc1.bias"].clone()
        message = "has weights its config has no place for: model.encoder.layernorm_embedding.weight"
    save_file(weights, source / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointImportError, match=f"{message}; every weight must find its place"):
        import_checkpoint(source, "marian", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_dictionary_is_read_as_fairseqs_add_from_file_reads_it(tmp_path):
    from vanilla_transformer.importers.fairseq import SPECIALS, read_dictionary

    path = tmp_path / "dict.en.txt"
    # trailing white space dropped; an overwritten symbol takes a row of its own, and the ids after it move on
    path.write_text("w4 100 \nw5 99\r\n<unk> 1 #fairseq:overwrite\nw 6 98\n", newline="")
    assert read_dictionary(str(path)) == [*SPECIALS, "w4", "w5", "<unk>", "w 6"]
    for text, message in (
        ("w4 many\n", r"dict.en.txt:1: expected '<symbol> <count>' \(a whole count\), got 'w4 many'"),
        ("w4\n", r"dict.en.txt:1: expected '<symbol> <count>' \(a whole count\), got 'w4'"),
        ("w4 1\nw4 2\n", r"dict.en.txt:2: 'w4' is in the dictionary already; fairseq takes a second row only with"),
        ("<pad> 1\n", r"dict.en.txt:1: '<pad>' is in the dictionary already"),
    ):
        path.write_text(text)
        with pytest.raises(CheckpointImportError, match=message):
            read_dictionary(str(path))


def test_an_fsmt_import_keeps_the_longest_input_its_tokenizer_truncates_to(tmp_path):
    sources.fsmt_folder(tmp_path / "fsmt")
    settings = json.loads((tmp_path / "fsmt" / "tokenizer_config.json").read_text())
    (tmp_path / "fsmt" / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": 1024}))
    _, tokenizer = import_checkpoint(tmp_path / "fsmt", "fsmt", out=tmp_path / "out")
    assert tokenizer.model_max_length == 1024
    assert AutoTokenizer.from_pretrained(tmp_path / "out").model_max_length == 1024


@pytest.mark.parametrize(
    "change, message",
    [
        ({"decoder_start_token_id": None}, "decoder_start_token_id must be set"),
        ({"decoder_start_token_id": 500}, r"decoder_start_token_id must be a token id in \[0, vocab_size=\d+\), got"),
        ({"pad_token_id": None}, "config.json: pad_token_id is null; expected a token id"),
    ],
    ids=["no start", "a start past the vocabulary", "no padding"],
)
def test_a_source_setting_the_model_cannot_take_is_named_in_one_line(tmp_path, capsys, change, message):
    sources.fsmt_folder(tmp_path / "fsmt")
    config = json.loads((tmp_path / "fsmt" / "config.json").read_text())
    (tmp_path / "fsmt" / "config.json").write_text(json.dumps({**config, **change}))
    assert main(["import", "--from", "fsmt", str(tmp_path / "fsmt"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert re.search(f"error: import --from fsmt: {tmp_path / 'fsmt'}: .*{message}", error), error
    assert "Traceback" not in error and "--trust-pickle" not in error and not (tmp_path / "out").exists()


def test_only_a_source_whose_weights_are_a_pickle_is_told_of_trust_pickle(tmp_path):
    sources.marian_folder(tmp_path / "marian")
    torch.save(load_file(tmp_path / "marian" / "model.safetensors"), tmp_path / "marian" / "pytorch_model.bin")
    (tmp_path / "marian" / "model.safetensors").unlink()
    with pytest.raises(CheckpointImportError, match=r"weights are read from safetensors only; pass --trust-pickle"):
        import_checkpoint(tmp_path / "marian", "marian")
    model, _ = import_checkpoint(tmp_path / "marian", "marian", trust_pickle=True)
    assert model.config.vocab_size > 0


def test_a_marian_vocabulary_without_unk_and_a_checkpoint_file_for_a_folder_importer_are_named(tmp_path):
    sources.marian_folder(tmp_path / "marian")
    vocabulary = json.loads((tmp_path / "marian" / "vocab.json").read_text())
    del vocabulary["<unk>"]
    (tmp_path / "marian" / "vocab.json").write_text(json.dumps(vocabulary))
    with pytest.raises(CheckpointImportError, match=r"marian: could not load its tokenizer: KeyError\('<unk> token"):
        import_checkpoint(tmp_path / "marian", "marian")
    checkpoint = tmp_path / "checkpoint_best.pt"
    checkpoint.write_bytes(b"weights")
    for kind in ("marian", "fsmt"):
        with pytest.raises(CheckpointImportError, match=f"a file; --from {kind} reads a model folder .* and --from "
                           "fairseq a checkpoint file"):  # fmt: skip
            import_checkpoint(checkpoint, kind)


def test_overwritten_special_symbols_keep_fairseqs_own_ids(tmp_path):
    """fairseq appends eos_index (2) and maps unknown words to unk_index (3), whatever rows a dictionary adds."""
    folder, _, _ = sources.fairseq_folder(tmp_path / "fairseq")
    for language in ("en", "de"):
        lines = (folder / f"dict.{language}.txt").read_text().splitlines()
        lines[-2:] = ["<unk> 1 #fairseq:overwrite", "</s> 1 #fairseq:overwrite"]  # the same number of rows
        (folder / f"dict.{language}.txt").write_text("\n".join(lines) + "\n")
    _, tokenizer = import_checkpoint(folder / "checkpoint_best.pt", "fairseq", trust_pickle=True)
    ids = tokenizer(["zzzz"])["input_ids"][0]
    assert ids[-1] == 2 and set(ids[:-1]) == {3}
