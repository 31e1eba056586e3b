"""Small trained-model folders of the three sources `import_checkpoint` reads, with random weights, each written by
the source's own implementation: transformers' MarianMTModel and MarianTokenizer (a sentencepiece model trained
here), FSMTForConditionalGeneration and FSMTTokenizer, and a fairseq checkpoint in fairseq's key names and file
format (the pickle `torch.save` writes, its `args` Namespace, `dict.*.txt`, `bpecodes`) holding an FSMT model's
weights, which FSMT's converter took from fairseq under the same names."""

import argparse
import io
import json
import random

import torch

# Marian: ids 0-2 are </s> <unk> <pad> in both vocabularies, then sentencepiece's word pieces ▁w4 ...
MARIAN_SPECIALS = ["</s>", "<unk>", "<pad>"]
MARIAN_PAD = 2
SOURCE_WORDS = [f"w{i}" for i in range(4, 40)]
TARGET_WORDS = [f"w{i}" for i in range(4, 30)]


def sentences(count: int, words=SOURCE_WORDS, seed: int = 0, longest: int = 12) -> list[str]:
    """Sentences of 1 to `longest` words: padded batches of very different lengths."""
    generator = random.Random(seed)
    return [" ".join(generator.choice(words) for _ in range(generator.randint(1, longest))) for _ in range(count)]


def randomise(model, seed: int):
    """Random LayerNorms and biases (the implementations start them at one and zero, which would leave them
    untested)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                parameter.copy_(torch.rand(parameter.shape, generator=generator) + 0.5)
            elif name.endswith("bias"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return model.eval()


def sentencepiece_model(words) -> bytes:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences(400, words, seed=1)),
        model_writer=model,
        vocab_size=len(words) + 3,
        model_type="word",
        minloglevel=2,
        hard_vocab_limit=False,
    )
    return model.getvalue()


def marian_folder(folder, separate_vocabs: bool = False, seed: int = 0):
    """A MarianMTModel and MarianTokenizer as `save_pretrained` writes them, in the OPUS-MT settings: SiLU, scaled
    embeddings, decoding from <pad>, a final logits bias; with `separate_vocabs`, a smaller target vocabulary."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocabularies = {}
    for side, words in (("source", SOURCE_WORDS), ("target", TARGET_WORDS if separate_vocabs else SOURCE_WORDS)):
        (folder / f"{side}.spm").write_bytes(sentencepiece_model(words))
        vocabularies[side] = {token: i for i, token in enumerate(MARIAN_SPECIALS + [f"▁{w}" for w in words])}
    (folder / "vocab.json").write_text(json.dumps(vocabularies["source"]))
    (folder / "target_vocab.json").write_text(json.dumps(vocabularies["target"]))
    tokenizer = MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
        target_vocab_file=str(folder / "target_vocab.json"),
        separate_vocabs=separate_vocabs,
        source_lang="en",
        target_lang="de",
    )
    config = MarianConfig(
        vocab_size=len(vocabularies["source"]),
        decoder_vocab_size=len(vocabularies["target"]),
        share_encoder_decoder_embeddings=not separate_vocabs,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        dropout=0.0,
        init_std=0.4,  # larger than the default 0.02: translations that depend on the source
        pad_token_id=MARIAN_PAD,
        eos_token_id=0,
        forced_eos_token_id=0,
        decoder_start_token_id=MARIAN_PAD,
    )
    torch.manual_seed(seed)
    model = randomise(MarianMTModel(config), seed)
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape) * 0.5)
        model.final_logits_bias[0, 0] += 3.0  # </s> comes up: translations of different lengths
    model.generation_config.bad_words_ids = [[MARIAN_PAD]]  # as the OPUS-MT models' generation configs
    model.generation_config.num_beams = 4
    model.generation_config.max_length = 64
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def fsmt_files(folder, words=SOURCE_WORDS, target_words=TARGET_WORDS) -> dict:
    """FSMTTokenizer's files: vocabularies of word-end tokens ("w12</w>") after <s> <pad> </s> <unk>, and BPE merges
    that join each word's characters."""
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    files = {}
    for name, side_words in (("vocab-src.json", words), ("vocab-tgt.json", target_words)):
        vocabulary = {token: i for i, token in enumerate(specials + [f"{w}</w>" for w in side_words])}
        files[name] = folder / name
        files[name].write_text(json.dumps(vocabulary))
    numbers = sorted({w[1:] for w in words + target_words})
    merges = [f"{n[0]} {n[1]}</w>" for n in numbers if len(n) == 2] + [f"w {n}</w>" for n in numbers]
    files["merges.txt"] = folder / "merges.txt"
    files["merges.txt"].write_text("\n".join(merges) + "\n")
    return files


def fsmt_model(seed: int = 0, **overrides):
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    values = dict(
        langs=["en", "de"],
        src_vocab_size=4 + len(SOURCE_WORDS),
        tgt_vocab_size=4 + len(TARGET_WORDS),
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=32,
        dropout=0.0,
        init_std=0.4,
        num_beams=3,
        max_length=40,
    )
    values.update(overrides)
    torch.manual_seed(seed)
    return randomise(FSMTForConditionalGeneration(FSMTConfig(**values)), seed)


def fsmt_folder(folder, seed: int = 0, target_words=TARGET_WORDS):
    """An FSMTForConditionalGeneration and FSMTTokenizer as `save_pretrained` writes them: separate source and
    target vocabularies (the target's of `target_words`, in that order), fairseq's positions and special tokens."""
    from transformers import FSMTTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    files = fsmt_files(folder, target_words=target_words)
    tokenizer = FSMTTokenizer(
        langs=["en", "de"],
        src_vocab_file=str(files["vocab-src.json"]),
        tgt_vocab_file=str(files["vocab-tgt.json"]),
        merges_file=str(files["merges.txt"]),
    )
    model = fsmt_model(seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def fairseq_arguments(model, **overrides) -> argparse.Namespace:
    """The training arguments a fairseq checkpoint stores, for the architecture of an FSMT model."""
    c = model.config
    values = dict(
        arch="transformer",
        task="translation",
        source_lang="en",
        target_lang="de",
        encoder_embed_dim=c.d_model,
        decoder_embed_dim=c.d_model,
        encoder_ffn_embed_dim=c.encoder_ffn_dim,
        decoder_ffn_embed_dim=c.decoder_ffn_dim,
        encoder_layers=c.encoder_layers,
        decoder_layers=c.decoder_layers,
        encoder_attention_heads=c.encoder_attention_heads,
        decoder_attention_heads=c.decoder_attention_heads,
        encoder_normalize_before=False,
        decoder_normalize_before=False,
        encoder_learned_pos=False,
        decoder_learned_pos=False,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_fn="relu",
        share_all_embeddings=False,
        share_decoder_input_output_embed=False,
        no_scale_embedding=False,
        max_source_positions=c.max_position_embeddings,
        max_target_positions=c.max_position_embeddings,
        layernorm_embedding=False,
        no_token_positional_embeddings=False,
        adaptive_softmax_cutoff=None,
        decoder_output_dim=c.d_model,
        decoder_input_dim=c.d_model,
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def fairseq_state_dict(model, extra: dict | None = None) -> dict:
    """An FSMT model's weights under fairseq's names (FSMT's without "model."), with the buffers fairseq saves."""
    state = {name.removeprefix("model."): tensor.clone() for name, tensor in model.state_dict().items()}
    for stack in ("encoder", "decoder"):
        del state[f"{stack}.embed_positions.weight"]  # fairseq's sinusoids are not saved ...
        state[f"{stack}.embed_positions._float_tensor"] = torch.FloatTensor(1)  # ... only this device marker
        state[f"{stack}.version"] = torch.Tensor([3])
    state.update(extra or {})
    return state


def fairseq_folder(folder, seed: int = 0, args_overrides: dict | None = None, extra: dict | None = None):
    """A fairseq checkpoint of an FSMT model's weights, with its dictionaries and BPE codes: (folder, FSMT model,
    FSMT tokenizer of the same vocabularies)."""
    from transformers import FSMTTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    model = fsmt_model(seed)
    torch.save(
        {
            "args": fairseq_arguments(model, **(args_overrides or {})),
            "model": fairseq_state_dict(model, extra),
            "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "num_updates": 10}],
            "extra_state": {"epoch": 1},
        },
        folder / "checkpoint_best.pt",
    )
    for language, words in (("en", SOURCE_WORDS), ("de", TARGET_WORDS)):
        (folder / f"dict.{language}.txt").write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(words)))
    (folder / "fsmt-reference").mkdir(exist_ok=True)
    files = fsmt_files(folder / "fsmt-reference")
    (folder / "bpecodes").write_text(
        "".join(f"{line} {1000 - i}\n" for i, line in enumerate(files["merges.txt"].read_text().split("\n")[:-1]))
    )
    tokenizer = FSMTTokenizer(
        langs=["en", "de"],
        src_vocab_file=str(files["vocab-src.json"]),
        tgt_vocab_file=str(files["vocab-tgt.json"]),
        merges_file=str(files["merges.txt"]),
    )
    return folder, model, tokenizer
