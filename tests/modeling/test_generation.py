"""Incremental decoding with the library's cache objects and every generation strategy."""

import warnings

import pytest
import torch
from transformers import CompileConfig, EncoderDecoderCache, GenerationConfig, MarianMTModel, StaticCache
from transformers.generation import GenerateBeamEncoderDecoderOutput
from vanilla_transformer.modeling.modeling_vanilla_transformer import CACHE_FIELD

from tests.conftest import tiny_marian_config, tiny_model

RENAMED = CACHE_FIELD == "cache"  # transformers 5.24 renamed the cache argument `past_key_values` to `cache`


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
@pytest.mark.parametrize("argument", ["cache", "past_key_values"])
def test_the_cache_is_taken_under_either_name(argument):
    # transformers 5.24 passes the cache as `cache=`; earlier releases, and older user code, as `past_key_values=`
    model = tiny_model()
    src, tgt = torch.randint(3, 50, (2, 5)), torch.randint(3, 50, (2, 4))
    with torch.no_grad():
        full = model(input_ids=src, decoder_input_ids=tgt, use_cache=False).logits
        first = model(input_ids=src, decoder_input_ids=tgt[:, :3], use_cache=True)
        cache = first[CACHE_FIELD]
        last = model(input_ids=src, decoder_input_ids=tgt[:, 3:], use_cache=True, **{argument: cache}).logits
    assert cache.get_seq_length() == 4  # the second call added its token to the cache it was given
    torch.testing.assert_close(last, full[:, 3:], atol=1e-5, rtol=1e-5)


def cache_warnings(call) -> list[str]:
    """The messages of the warnings `call()` emits that name the cache argument."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if "past_key_values" in str(w.message) or "`cache`" in str(w.message)]


def test_past_key_values_is_deprecated_exactly_as_for_the_librarys_own_models():
    if not RENAMED:
        pytest.skip("the installed transformers still names the cache `past_key_values`: nothing is deprecated")
    torch.manual_seed(0)
    marian = MarianMTModel(tiny_marian_config(vocab_size=20)).eval()
    model = tiny_model()
    src, tgt = torch.randint(3, 20, (2, 5)), torch.randint(3, 20, (2, 4))
    with torch.no_grad():
        cache = model(input_ids=src, decoder_input_ids=tgt[:, :3], use_cache=True).cache
        (expected,) = cache_warnings(lambda: marian(input_ids=src, decoder_input_ids=tgt, past_key_values=None))
        assert cache_warnings(lambda: model(input_ids=src, decoder_input_ids=tgt[:, 3:], past_key_values=cache)) == [
            expected.replace("MarianMTModel", "VanillaTransformerForConditionalGeneration")
        ]
        assert cache.get_seq_length() == 4  # the cache passed under the old name was used and grown
        # the base model too; the decoder inside is passed `cache`, so one call warns once
        assert cache_warnings(lambda: model.model(input_ids=src, decoder_input_ids=tgt, past_key_values=None)) == [
            expected.replace("MarianMTModel", "VanillaTransformerModel")
        ]
        assert cache_warnings(lambda: model(input_ids=src, decoder_input_ids=tgt, cache=None)) == []
        # both names: the library's rule, `cache` wins and the old name is dropped with a warning
        both = cache_warnings(
            lambda: model(input_ids=src, decoder_input_ids=tgt[:, 3:], cache=cache, past_key_values=None)
        )
        assert len(both) == 1 and both[0].startswith("Both `past_key_values` and `cache` are set")
        assert cache.get_seq_length() == 5


def test_before_the_rename_past_key_values_is_the_librarys_own_name_and_warns_nothing():
    if RENAMED:
        pytest.skip("the installed transformers names the cache `cache`")
    model = tiny_model()
    src, tgt = torch.randint(3, 50, (2, 5)), torch.randint(3, 50, (2, 4))
    with torch.no_grad():
        cache = model(input_ids=src, decoder_input_ids=tgt[:, :3], use_cache=True).past_key_values
        assert cache_warnings(lambda: model(input_ids=src, decoder_input_ids=tgt[:, 3:], past_key_values=cache)) == []
        assert cache.get_seq_length() == 4
        with pytest.raises(ValueError, match="not both"):
            model(input_ids=src, decoder_input_ids=tgt[:, 3:], cache=cache, past_key_values=cache)


@pytest.mark.parametrize("settings", [dict(num_beams=1), dict(num_beams=3), dict(cache_implementation="static")])
def test_generate_warns_nothing_about_the_cache_argument(settings):
    # generate() passes the cache under the installed library's name: `cache` from 5.24, `past_key_values` before
    model = tiny_model()
    src = torch.randint(3, 50, (2, 6))
    assert cache_warnings(lambda: model.generate(input_ids=src, max_new_tokens=5, do_sample=False, **settings)) == []


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_incremental_decoding_with_cache_equals_full_forward(implementation):
    model = tiny_model()
    model.config._attn_implementation = implementation
    src = torch.randint(3, 50, (2, 7))
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    tgt = torch.randint(3, 50, (2, 6))
    with torch.no_grad():
        full = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, use_cache=False).logits
        encoder_outputs = model.get_encoder()(input_ids=src, attention_mask=mask)
        cache = None
        steps = []
        for t in range(tgt.shape[1]):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=tgt[:, t : t + 1],
                cache=cache,
                use_cache=True,
            )
            cache = out[CACHE_FIELD]
            steps.append(out.logits)
    assert isinstance(cache, EncoderDecoderCache)
    assert cache.get_seq_length() == tgt.shape[1]
    # cross-attention keys/values were computed once: their length is the source length, not steps * source
    assert cache.cross_attention_cache.layers[0].keys.shape[2] == src.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_chunked_decoding_with_cache_equals_full_forward():
    model = tiny_model()
    src = torch.randint(3, 50, (2, 7))
    tgt = torch.randint(3, 50, (2, 6))
    with torch.no_grad():
        full = model(input_ids=src, decoder_input_ids=tgt, use_cache=False).logits
        first = model(input_ids=src, decoder_input_ids=tgt[:, :3], use_cache=True)
        second = model(input_ids=src, decoder_input_ids=tgt[:, 3:], cache=first[CACHE_FIELD])
    torch.testing.assert_close(torch.cat([first.logits, second.logits], dim=1), full, atol=1e-5, rtol=1e-5)


STRATEGIES = {
    "greedy": dict(do_sample=False, num_beams=1),
    "beam": dict(do_sample=False, num_beams=4, num_return_sequences=2),
    "sampling": dict(do_sample=True, top_k=10, top_p=0.9, temperature=0.8),
    "beam_sampling": dict(do_sample=True, num_beams=3),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_generation_strategies_with_and_without_cache_agree(strategy):
    model = tiny_model()
    src = torch.randint(3, 50, (3, 6))
    mask = torch.ones_like(src)
    mask[2, 4:] = 0
    results = []
    for use_cache in (True, False):
        torch.manual_seed(0)
        out = model.generate(
            input_ids=src,
            attention_mask=mask,
            max_new_tokens=8,
            use_cache=use_cache,
            return_dict_in_generate=True,
            output_scores=True,
            **STRATEGIES[strategy],
        )
        results.append(out.sequences)
    assert torch.equal(results[0], results[1])
    assert (results[0][:, 0] == model.config.decoder_start_token_id).all()
    expected_rows = 3 * STRATEGIES[strategy].get("num_return_sequences", 1)
    assert results[0].shape[0] == expected_rows and results[0].shape[1] <= 9


def test_greedy_generation_picks_the_argmax_of_the_full_forward():
    model = tiny_model()
    src = torch.randint(3, 50, (2, 6))
    generated = model.generate(input_ids=src, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    with torch.no_grad():
        logits = model(input_ids=src, decoder_input_ids=generated[:, :-1]).logits
    logits[..., model.config.eos_token_id] = -float("inf")  # min_new_tokens forbids end-of-sentence
    assert torch.equal(logits.argmax(-1), generated[:, 1:])


def test_generation_config_is_honoured():
    model = tiny_model()
    torch.manual_seed(0)
    src = torch.randint(3, 50, (2, 6))
    tokens = dict(decoder_start_token_id=1, eos_token_id=2, pad_token_id=0)
    scored = dict(return_dict_in_generate=True, output_scores=True)
    model.generation_config = GenerationConfig(**tokens, num_beams=2, max_length=5, **scored)
    out = model.generate(input_ids=src)  # everything from the model's generation config
    # beam search ran: only it returns this output class, with a score per sequence and the beams each token came from
    assert isinstance(out, GenerateBeamEncoderDecoderOutput)
    assert out.sequences_scores.shape == (2,) and out.beam_indices is not None
    assert out.sequences.shape[1] == 5  # max_length, reached: this model does not end these sentences sooner

    model.generation_config = GenerationConfig(**tokens)  # the same settings, now passed to the call
    explicit = model.generate(input_ids=src, num_beams=2, max_length=5, **scored)
    assert torch.equal(out.sequences, explicit.sequences)
    torch.testing.assert_close(out.sequences_scores, explicit.sequences_scores)
    # and they matter for this input: greedy search gives another output, no max_length a longer one
    greedy = model.generate(input_ids=src, num_beams=1, max_length=5, **scored)
    assert not isinstance(greedy, GenerateBeamEncoderDecoderOutput)
    assert not torch.equal(greedy.sequences, out.sequences)
    assert model.generate(input_ids=src, num_beams=2, max_new_tokens=10).shape[1] == 11


def test_beam_reordering_moves_self_attention_states_and_leaves_cross_attention_states():
    model = tiny_model()
    beams, src = 3, torch.randint(3, 50, (2, 5))
    expanded = src.repeat_interleave(beams, dim=0)  # as generate() expands each source over its beams
    with torch.no_grad():
        out = model(input_ids=expanded, decoder_input_ids=torch.randint(3, 50, (6, 4)), use_cache=True)
    cache = out[CACHE_FIELD]
    self_keys = cache.self_attention_cache.layers[0].keys.clone()
    cross_keys = cache.cross_attention_cache.layers[0].keys
    # each new beam continues a beam of the same source: rows 0-2 come from 0-2, rows 3-5 from 3-5
    beam_idx = torch.tensor([2, 2, 0, 4, 3, 3])
    reordered = model._reorder_cache(cache, beam_idx)
    assert torch.equal(reordered.self_attention_cache.layers[0].keys, self_keys[beam_idx])
    assert reordered.cross_attention_cache.layers[0].keys is cross_keys  # untouched, not copied
    # reordering the cross-attention rows would not have changed them: all beams of a source share them
    assert torch.equal(cross_keys[beam_idx], cross_keys)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_incremental_decoding_with_a_static_cache_equals_full_forward(implementation):
    # a static cache hands back all its slots, filled or not: the causal mask must hide the empty ones
    model = tiny_model(encoder_layers=1, decoder_layers=3)  # the cache is sized by the decoder's layers
    model.config._attn_implementation = implementation
    src = torch.randint(3, 50, (2, 7))
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    tgt = torch.randint(3, 50, (2, 6))
    with torch.no_grad():
        full = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, use_cache=False).logits
        encoder_outputs = model.get_encoder()(input_ids=src, attention_mask=mask)
        cache = EncoderDecoderCache(StaticCache(model.config, max_cache_len=10), StaticCache(model.config, 7))
        steps = [
            model(
                encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tgt[:, :2], cache=cache
            ).logits
        ]  # a prefill of two positions, then one at a time
        for t in range(2, tgt.shape[1]):
            steps.append(
                model(
                    encoder_outputs=encoder_outputs,
                    attention_mask=mask,
                    decoder_input_ids=tgt[:, t : t + 1],
                    cache=cache,
                ).logits
            )
    assert int(cache.get_seq_length()) == tgt.shape[1]
    assert cache.self_attention_cache.layers[2].keys.shape[2] == 10
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generation_with_a_static_cache_equals_the_dynamic_cache(num_beams):
    model = tiny_model()
    src = torch.randint(3, 50, (3, 6))
    mask = torch.ones_like(src)
    mask[2, 4:] = 0
    kwargs = dict(input_ids=src, attention_mask=mask, max_new_tokens=8, num_beams=num_beams, do_sample=False)
    dynamic = model.generate(**kwargs)
    static = model.generate(**kwargs, cache_implementation="static")
    assert torch.equal(static, dynamic)


def test_compiled_generation_with_a_static_cache_equals_eager_generation():
    # what generate() does on an accelerator with cache_implementation="static": the greedy decoding steps run
    # through torch.compile'd forward calls, here without graph breaks (fullgraph) and forced on the CPU
    # (the library compiles greedy and sampling decoding; beam search runs the static cache uncompiled)
    model = tiny_model()
    src = torch.randint(3, 50, (2, 6))
    mask = torch.ones_like(src)
    mask[1, 4:] = 0
    kwargs = dict(input_ids=src, attention_mask=mask, max_new_tokens=5, do_sample=False)
    eager = model.generate(**kwargs)
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True
    compiled = model.generate(**kwargs, cache_implementation="static", compile_config=compile_config)
    assert torch.equal(compiled, eager)
    assert hasattr(model, "_compiled_call")  # the compiled path was taken, not skipped


def test_a_max_length_given_to_the_call_bounds_the_output_over_the_folders_max_new_tokens(tmp_path):
    """Every trained folder's generation config holds `max_new_tokens`; Seq2SeqTrainer passes its
    `generation_max_length` to generate() as `max_length`, which the library would let that default override."""
    from datasets import Dataset
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model = tiny_model()
    model.generation_config.update(max_new_tokens=12, min_new_tokens=None, num_beams=1, eos_token_id=None)
    source = torch.randint(3, 50, (2, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert model.generate(source, max_length=4).shape == (2, 4)  # the decoder's start and 3 new tokens
    assert not [w for w in caught if "max_new_tokens" in str(w.message)]
    assert model.generate(source).shape == (2, 13)  # the folder's default still holds without one
    assert model.generate(source, max_length=4, max_new_tokens=6).shape == (2, 7)  # both given: the library's rule
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), predict_with_generate=True, generation_max_length=4, report_to=[], use_cpu=True
    )
    data = Dataset.from_dict({"input_ids": source.tolist(), "labels": source[:, :3].tolist()})
    predicted = Seq2SeqTrainer(model=model, args=arguments).predict(data).predictions
    assert (predicted[:, 4:] == model.config.pad_token_id).all()  # padded to the folder's length, generated to 4
