"""Positions (§3.5): the sinusoids have a value for every position, so a model reads and writes sequences longer than
max_position_embeddings; learned positions end at their table, and generate() stays within it."""

import logging
import math

import pytest
import torch
from transformers import CompileConfig, GenerationConfig
from vanilla_transformer.modeling.modeling_vanilla_transformer import sinusoidal_table

from tests.conftest import tiny_model

EOS = 2


def section_3_5(positions: range, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)), in float64."""
    return torch.tensor(
        [
            [
                math.sin(pos / 10000 ** (2 * (j // 2) / d_model))
                if j % 2 == 0
                else math.cos(pos / 10000 ** (2 * (j // 2) / d_model))
                for j in range(d_model)
            ]
            for pos in positions
        ],
        dtype=torch.float64,
    )


def test_positions_beyond_the_initial_table_follow_section_3_5():
    model = tiny_model(max_position_embeddings=16)
    embed = model.get_encoder().embed
    initial = embed.embed_positions.pe.clone()
    assert torch.equal(initial, sinusoidal_table(16, 32))
    ids = torch.randint(3, 50, (1, 200))
    with torch.no_grad():
        x = embed(ids, None)  # dropout is 0 in the tiny model: token embedding * sqrt(d_model) + PE
    table = embed.embed_positions.pe
    assert table.shape[0] >= 200
    assert torch.equal(table[:16], initial)  # the rows it had are kept as they were
    torch.testing.assert_close(table[:200].double(), section_3_5(range(200), 32), atol=5e-5, rtol=0)
    expected = embed.embed_tokens(ids) * math.sqrt(32) + section_3_5(range(200), 32).float()
    torch.testing.assert_close(x, expected, atol=2e-4, rtol=0)


def test_a_sinusoidal_model_trained_on_short_inputs_reads_and_writes_long_ones():
    model = tiny_model(max_position_embeddings=16)
    src = torch.randint(3, 50, (2, 200))
    generated = model.generate(input_ids=src, max_new_tokens=30, min_new_tokens=30, do_sample=False)
    assert generated.shape == (2, 31)
    beams = model.generate(input_ids=src, max_new_tokens=30, num_beams=3)
    assert beams.shape[0] == 2
    with torch.no_grad():
        logits = model(input_ids=src, decoder_input_ids=generated).logits
    assert logits.shape == (2, 31, 50) and torch.isfinite(logits).all()


def greedy(model, src, cache_implementation=None, **kwargs):
    out = model.generate(
        input_ids=src,
        max_new_tokens=20,
        min_new_tokens=20,
        do_sample=False,
        cache_implementation=cache_implementation,
        return_dict_in_generate=True,
        output_logits=True,
        **kwargs,
    )
    return out.sequences, torch.stack(out.logits, dim=1)  # (batch, 21), (batch, 20, vocab)


@pytest.mark.parametrize("cache_implementation", [None, "static"])  # the growing cache, then the fixed-size one
def test_decoding_with_a_cache_past_the_initial_table_equals_a_full_forward(cache_implementation):
    model = tiny_model(max_position_embeddings=8)
    src = torch.randint(3, 50, (2, 12))
    sequences, step_logits = greedy(model, src, cache_implementation)
    assert sequences.shape == (2, 21)
    with torch.no_grad():  # teacher forcing: every position at once, no cache
        full = model(input_ids=src, decoder_input_ids=sequences[:, :-1], use_cache=False).logits
    torch.testing.assert_close(step_logits, full, atol=1e-4, rtol=1e-4)
    full[..., EOS] = -float("inf")  # min_new_tokens forbids end-of-sentence
    assert torch.equal(full.argmax(-1), sequences[:, 1:])


def test_compiled_decoding_past_the_initial_table_equals_eager_decoding():
    # compiled code cannot grow the table: it computes the positions it needs from the formula
    model = tiny_model(max_position_embeddings=8)
    src = torch.randint(3, 50, (2, 12))
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True
    compiled, compiled_logits = greedy(model, src, "static", compile_config=compile_config)
    assert hasattr(model, "_compiled_call")  # the compiled path was taken, not skipped
    # the decoder read positions 0 .. 19, all but the first in compiled steps, and its table did not grow
    assert model.get_decoder().embed.embed_positions.pe.shape[0] == 8
    eager, eager_logits = greedy(model, src)
    assert torch.equal(compiled, eager)
    torch.testing.assert_close(compiled_logits, eager_logits, atol=1e-4, rtol=1e-4)


def test_learned_positions_end_at_their_table_in_forward():
    model = tiny_model(position_encoding="learned", max_position_embeddings=16)
    with pytest.raises(ValueError, match="reaches position 17, beyond max_position_embeddings=16"):
        model(input_ids=torch.randint(3, 50, (1, 17)), decoder_input_ids=torch.ones(1, 1, dtype=torch.long))


def test_generate_truncates_a_source_longer_than_the_learned_positions_and_names_its_row(caplog):
    model = tiny_model(position_encoding="learned", max_position_embeddings=16)
    src = torch.randint(3, 50, (3, 40))
    mask = torch.ones_like(src)
    mask[1, 10:] = 0  # row 1 fits: it loses only padding
    kwargs = dict(max_new_tokens=6, do_sample=False)
    with caplog.at_level(logging.WARNING):
        out = model.generate(input_ids=src, attention_mask=mask, **kwargs)
    lines = [r.getMessage() for r in caplog.records if "source of batch row" in r.getMessage()]
    assert len(lines) == 1 and "row(s) 0, 2 is longer" in lines[0] and "max_position_embeddings=16" in lines[0]
    assert torch.equal(out, model.generate(input_ids=src[:, :16], attention_mask=mask[:, :16], **kwargs))
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # positionally, without a mask: every row loses tokens
        model.generate(src, **kwargs)
    assert any("row(s) 0, 1, 2 is longer" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_generate_stops_where_the_learned_positions_end(num_beams, cache_implementation):
    model = tiny_model(position_encoding="learned", max_position_embeddings=16)
    src = torch.randint(3, 50, (2, 6))
    with pytest.warns(UserWarning, match="Unfeasible length constraints"):  # the library's: no 64 tokens, then
        out = model.generate(
            input_ids=src,
            max_new_tokens=64,
            min_new_tokens=64,
            num_beams=num_beams,
            cache_implementation=cache_implementation,
        )
    assert out.shape[1] == 17  # the start token, then 16 tokens: the decoder read positions 0 .. 15
    with torch.no_grad():
        model(input_ids=src, decoder_input_ids=out[:, :-1])  # within the table
    with pytest.warns(UserWarning, match="Unfeasible length constraints"):
        assert model.generate(input_ids=src, max_length=100, min_length=100).shape[1] == 17
    model.generation_config.max_new_tokens = 32  # as a trained folder's holds it, under a config of the call's
    for lengths in ({"max_new_tokens": 30}, {"max_length": 30}, {}):
        config = GenerationConfig(num_beams=num_beams, **lengths)
        assert model.generate(input_ids=src, generation_config=config).shape[1] == 17


@pytest.mark.parametrize("layout", ["halves", "fairseq"])
def test_the_layouts_of_imported_models_are_their_implementations_tables_and_grow_as_they_do(layout):
    """Marian's [sin | cos] from position 0 and fairseq's (FSMT's) halves from padding_idx + 1, from transformers'
    own position classes; a model of either layout grows its table, and computes rows from the formula (as compiled
    code does), the same way."""
    from transformers.models.fsmt.modeling_fsmt import SinusoidalPositionalEmbedding
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    model = tiny_model(max_position_embeddings=16, position_layout=layout)
    positions = model.get_encoder().embed.embed_positions
    if layout == "halves":
        expected = MarianSinusoidalPositionalEmbedding(80, 32).create_weight()
    else:
        expected = SinusoidalPositionalEmbedding.get_embedding(80 + 1, 32, padding_idx=0)[1:]  # pad_token_id 0
    assert torch.equal(positions.pe, expected[:16])
    with torch.no_grad():
        positions(torch.arange(80), 80)  # grows the table
        from_formula = positions.table(80)
    assert torch.equal(positions.pe[:80], expected) and torch.equal(from_formula, expected)
