"""What a run of the translate suite measures: its corpus, and per size a tokenizer, a MarianMTModel of random weights
whose outputs end near their sources' lengths, this package's model imported from it and its CTranslate2 export,
with translate_file's search settings and input. Only the standard library is imported here at import time."""

import json
import os
import random
import statistics

from ..common import models

CHECKED = 16  # sentences on which MarianMTModel and the imported model must give the same text
TOLERANCE = 0.03  # calibration: the mean output length within 3% of the mean source length
POOL = 29_000  # the BPE is trained on at least this many pairs: every Multi30k training pair


def corpus(data: str | None, count: int) -> list[tuple[str, str]]:
    """`count` (English, German) pairs: Multi30k's training pairs in `data` repeated in a seeded random order, else
    number words of 1 to 6 digits drawn with a fixed seed."""
    rng = random.Random(0)
    if data is None:
        from vanilla_transformer.training.tasks.numbers import draw_number, english, german

        numbers = [draw_number(rng, rng.randint(1, 6)) for _ in range(count)]
        return [(english(n), german(n)) for n in numbers]
    with open(os.path.join(data, "train.jsonl"), encoding="utf-8") as handle:
        pairs = [(r["en"].strip(), r["de"].strip()) for r in (json.loads(line)["translation"] for line in handle)]
    order = list(range(count))
    rng.shuffle(order)
    return [pairs[i % len(pairs)] for i in order]


def write_lines(lines: list[str], path: str) -> str:
    """The lines to a file, one a line; returns its path."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)
    return path


def length_head(model, sharpness: float = 3.0, strength: float = 3.0) -> None:
    """Set head 0 of the last decoder layer's cross-attention of a MarianMTModel so that target position t attends
    to source position t, or past the source's end to its last position (its query and key read sinusoids of
    frequencies from 1 down to about 0.01), and adds there the source token's share of </s> (read across the
    positions' span) along </s>'s embedding: the output's </s> logit peaks where the source ends. Everything else
    keeps its random weights."""
    import torch

    d, width = model.config.d_model, model.config.d_model // model.config.decoder_attention_heads
    attention = model.model.decoder.layers[-1].encoder_attn
    with torch.no_grad():
        basis, _ = torch.linalg.qr(model.model.decoder.embed_positions.weight[: d // 2].T.float())
        eos = model.model.shared.weight[models.EOS].float()
        reader = eos - basis @ (basis.T @ eos)
        rows = torch.arange(width)
        # [sin | cos] of every `step`-th frequency: a sharp peak at the same position, decaying with the distance
        step = max(1, round(d / 4 / (width // 2 - 1)))
        frequencies = [step * j for j in range(width // 2)]
        columns = torch.tensor([*frequencies, *(d // 2 + j for j in frequencies)])
        for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
            projection.weight[:width] = 0
            projection.bias[:width] = 0
        attention.q_proj.weight[rows, columns] = sharpness
        attention.k_proj.weight[rows, columns] = sharpness
        attention.v_proj.weight[0] = reader / reader.norm()
        attention.out_proj.weight[:, :width] = 0
        attention.out_proj.weight[:, 0] = strength * eos / eos.norm()


def greedy_lengths(model, tokenizer, sentences: list[str], max_length: int) -> list[int]:
    """Each sentence's greedy output length in tokens, </s> included."""
    import torch

    lengths = []
    for start in range(0, len(sentences), 64):
        batch = tokenizer(sentences[start : start + 64], padding=True, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**batch, num_beams=1, max_new_tokens=max_length)
        rows = out[:, 1:].tolist()
        lengths += [row.index(models.EOS) + 1 if models.EOS in row else len(row) for row in rows]
    return lengths


def calibrate(model, tokenizer, sentences: list[str], max_length: int) -> dict:
    """Bisect the output bias of </s> until the mean greedy output length is within TOLERANCE of the mean source
    length (tokens, </s> included) on `sentences`."""
    sentences = sorted(sentences, key=len)
    source = statistics.mean(len(ids) for ids in tokenizer(sentences)["input_ids"])
    low, high = -20.0, 20.0
    for _ in range(14):
        bias = (low + high) / 2
        model.final_logits_bias[0, models.EOS] = bias
        lengths = greedy_lengths(model, tokenizer, sentences, max_length)
        output = statistics.mean(lengths)
        if abs(output / source - 1) <= TOLERANCE:
            break
        low, high = (bias, high) if output > source else (low, bias)
    return {"bias": bias, "calibration_sentences": len(sentences), "mean_source_tokens": source,
            "mean_output_tokens": output, "output_lengths": len(set(lengths))}  # fmt: skip


def same_text(marian, tokenizer, ours: str, sentences: list[str], max_length: int) -> dict:
    """Greedy translations of MarianMTModel and of the imported model (the torch engine), compared."""
    import torch

    from vanilla_transformer import load_translator

    with torch.inference_mode():
        batch = tokenizer(sentences, padding=True, return_tensors="pt")
        out = marian.generate(**batch, num_beams=1, max_new_tokens=max_length)
    theirs = [text.strip() for text in tokenizer.batch_decode(out, skip_special_tokens=True)]
    found = load_translator(ours).translate(sentences, num_beams=1, max_length=max_length)
    return {"same": sum(t[0].text == text for t, text in zip(found, theirs)), "of": len(sentences)}


def build_models(size_name: str, pairs: list[tuple[str, str]], folder: str, args) -> dict:
    """The size's tokenizer and MarianMTModel (folder/marian), ours imported from it (folder/ours) and exported to
    CTranslate2 (folder/ct2); what was built and checked."""
    import torch
    from transformers import MarianConfig, MarianMTModel
    from vanilla_transformer.training.data.bpe import train_bpe_tokenizer

    from vanilla_transformer import export_ctranslate2, import_checkpoint

    texts = sorted({text for pair in pairs for text in pair})
    tokenizer = train_bpe_tokenizer(texts, vocab_size=models.SIZES[size_name]["vocab"])
    size = dict(models.SIZES[size_name], vocab=len(tokenizer))
    torch.manual_seed(0)
    marian = MarianMTModel(MarianConfig(**models.marian_settings(size, dropout=0.0))).eval()
    length_head(marian)
    sources = list(dict.fromkeys(source for source, _ in pairs))
    facts = {"vocab": len(tokenizer), **calibrate(marian, tokenizer, sources[: args.calibration], args.max_length)}
    marian.save_pretrained(os.path.join(folder, "marian"))
    tokenizer.save_pretrained(os.path.join(folder, "marian"))
    import_checkpoint(os.path.join(folder, "marian"), "marian", out=os.path.join(folder, "ours"), overwrite=True)
    facts["check"] = same_text(marian, tokenizer, os.path.join(folder, "ours"), sources[:CHECKED], args.max_length)
    export_ctranslate2(os.path.join(folder, "ours"), os.path.join(folder, "ct2"), overwrite=True)
    return facts


def file_search(ct2: str, beams: int, max_length: int) -> dict:
    """translate_file's search settings: those the CTranslate2 engine gives translate_batch for the export's
    generation config (patience, length penalty, guards, forbidden tokens, the length limit)."""
    from transformers import GenerationConfig

    from vanilla_transformer.exports.ctranslate2 import exported_vocabularies

    config, target = GenerationConfig.from_pretrained(ct2), exported_vocabularies(ct2)[1]
    suppressed = [[target[i] for i in ids] for ids in config.bad_words_ids] if config.bad_words_ids else None
    return dict(beam_size=beams, patience=1.0 if config.early_stopping is True else 2.0,
                length_penalty=1.0 if config.length_penalty is None else config.length_penalty,
                no_repeat_ngram_size=config.no_repeat_ngram_size or 0,
                repetition_penalty=config.repetition_penalty or 1.0, suppress_sequences=suppressed,
                max_decoding_length=max_length - (config.forced_eos_token_id is not None),
                min_decoding_length=0)  # fmt: skip


def pretokenize(ct2: str, lines: list[str], path: str) -> str:
    """The lines as the export's source tokens, space-separated, </s> included (what the engine gives ctranslate2)."""
    from transformers import AutoTokenizer

    from vanilla_transformer.exports.ctranslate2 import exported_vocabularies

    tokenizer, source = AutoTokenizer.from_pretrained(ct2), exported_vocabularies(ct2)[0]
    return write_lines([" ".join(source[i] for i in ids) for ids in tokenizer(lines)["input_ids"]], path)
