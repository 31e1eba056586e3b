"""Word alignments from the cross-attention (fairseq's --print-alignment): the argmax of the chosen layer's attention,
averaged over the chosen heads, for each target token, merged into words; the same under every attention backend."""

import pytest
from transformers import AutoTokenizer
from vanilla_transformer.training.tasks.numbers import english, german

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.demo.attention_maps import attention_maps
from vanilla_transformer.inference.alignment import align, marker_words, word_indices

SOURCES = [english(n) for n in (121, 342, 99, 7)]
TARGETS = [german(n) for n in (121, 342, 99, 7)]


def load(folder, backend: str):
    model = VanillaTransformerForConditionalGeneration.from_pretrained(folder, attn_implementation=backend)
    return model.eval(), AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("layer, heads", [(None, None), (0, [1, 3])])
def test_each_target_token_is_aligned_to_the_source_token_its_attention_weighs_most(trained_folder, layer, heads):
    model, tokenizer = load(trained_folder, "eager")
    alignments = align(model, tokenizer, SOURCES, TARGETS, layer=layer, heads=heads, batch_size=3)
    for source, target, alignment in zip(SOURCES, TARGETS, alignments):
        maps = attention_maps(model, tokenizer, source, target)  # the eager weights, recorded by the library
        cross = maps["cross"][-1 if layer is None else layer]  # (heads, target tokens, source tokens)
        cross = (cross if heads is None else cross[heads]).mean(0)
        expected = [(cross[j, :-1].argmax().item(), j) for j in range(cross.shape[0] - 1)]  # ends of sentence out
        assert alignment.token_pairs == expected


def test_alignments_are_the_same_under_every_attention_backend(trained_folder):
    eager = align(*load(trained_folder, "eager"), SOURCES, TARGETS)
    assert align(*load(trained_folder, "sdpa"), SOURCES, TARGETS) == eager  # sdpa gives no weights: computed


def test_tokens_are_merged_into_whitespace_separated_words():
    text = "the dog, barks"
    offsets = [(0, 3), (3, 7), (7, 8), (8, 11), (11, 14)]  # "the" "▁dog" "," "▁bar" "ks": spaces go with the word
    assert word_indices(offsets, text) == [0, 1, 1, 2, 2]
    assert word_indices([(0, 0)], "") == [0]
    assert word_indices([(0, 1), (1, 3)], "  ") == [-1, -1]  # whitespace: in no word


def test_a_text_of_whitespace_alone_has_no_words_to_align(trained_folder):
    model, tokenizer = load(trained_folder, "eager")
    found = align(model, tokenizer, ["forty-two", "   ", "\u3000", "seven"], ["   ", "zwei", "\n", " sieben"])
    assert [alignment.pharaoh() for alignment in found] == ["", "", "", "0-0"]  # no word -1


@pytest.mark.parametrize(
    "tokens, words",
    [
        (["▁seven", "▁hun", "dred", "▁elf", "</s>"], [0, 1, 1, 2, 2]),  # SentencePiece: "▁" starts a word
        (["sie@@", "ben@@", "hundert", "elf", "</s>"], [0, 0, 0, 1, 2]),  # subword-nmt: "@@" goes on
        (["sie", "ben</w>", "elf</w>", "</s>"], [0, 0, 1, 2]),  # FSMT's BPE: "</w>" ends a word
    ],
    ids=["sentencepiece", "subword-nmt", "end of word"],
)
def test_without_offsets_tokens_are_merged_into_words_by_the_tokenizers_markers(tokens, words):
    assert marker_words(tokens) == words


def test_a_layer_outside_the_decoder_is_refused(trained_folder):
    with pytest.raises(ValueError, match="layer 9: expected 0 to 0, the decoder's layers"):
        align(*load(trained_folder, "eager"), SOURCES, TARGETS, layer=9)


def test_heads_may_be_any_sequence_of_whole_numbers(trained_folder):
    import numpy

    model, tokenizer = load(trained_folder, "eager")
    expected = align(model, tokenizer, SOURCES, TARGETS, layer=0, heads=[1, 3])
    assert align(model, tokenizer, SOURCES, TARGETS, layer=numpy.int64(0), heads=numpy.array([1, 3])) == expected
    assert align(model, tokenizer, SOURCES, TARGETS, layer=0, heads=(h for h in (1, 3))) == expected


@pytest.mark.parametrize(
    "heads, message",
    [([], "heads []: expected None"), ([99], "head 99 is not one of the layer's"), (0, "heads 0: expected None"),
     ([1, 1], "a head is given twice")],
)  # fmt: skip
def test_heads_not_of_the_layer_are_refused(trained_folder, heads, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        align(*load(trained_folder, "eager"), SOURCES, TARGETS, heads=heads)


def test_translate_prints_each_translation_with_its_alignment(trained_folder, exported_folder, capsys):
    assert main(["translate", "--model", str(trained_folder), "--num-beams", "2", "--alignments", *SOURCES]) == 0
    for source, line in zip(SOURCES, capsys.readouterr().out.splitlines()):
        translation, pharaoh = line.split("\t")
        pairs = [tuple(map(int, pair.split("-"))) for pair in pharaoh.split()]
        assert pairs and all(s < len(source.split()) and t < len(translation.split()) for s, t in pairs)
    assert main(["translate", "--model", str(exported_folder), "--alignments", SOURCES[0]]) == 2
    assert "the ctranslate2 engine has no word alignments" in capsys.readouterr().err


def test_a_sentence_over_the_learned_positions_is_aligned_from_the_tokens_it_was_translated_from(learned_folder):
    from tests.conftest import long_sentence
    from vanilla_transformer.inference.translators import load_translator

    translator = load_translator(str(learned_folder))
    [[translation]] = translator.translate([long_sentence()], alignment=True, num_beams=1, max_length=4)
    assert translation.alignment.token_pairs and max(i for i, _ in translation.alignment.token_pairs) < 17
