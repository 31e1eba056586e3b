"""The Python side of fairseq's reference, run by the fairseq environment's Python (not imported by the tests):

python fairseq_side.py tokenize FOLDER SPLIT...
    Moses-tokenises FOLDER/SPLIT.en and FOLDER/SPLIT.de into SPLIT.tok.en and SPLIT.tok.de with fairseq's own
    `--tokenizer moses` (each side in its own language), as a corpus is prepared for fairseq-preprocess.
python fairseq_side.py reference MODEL_FOLDER BPE PAIRS OUT
    Loads the model as fairseq's hub interface does (`--tokenizer moses --bpe BPE --bpe-codes bpecodes`) and
    writes to OUT, as JSON, fairseq's encoding of the (English, German) pairs in the JSON file PAIRS (source ids as
    fairseq-interactive encodes raw text; target ids as the target side was prepared for training), its logits
    for the first LOGIT_PAIRS pairs, decoding from </s> as fairseq does in training, and each pair's per-token
    log-probabilities from fairseq's SequenceScorer, the scorer that `fairseq-generate --score-reference` runs,
    and its beam-5 translation of each source from the first PREFIX_TOKENS tokens of its target, as
    `fairseq-generate --prefix-size PREFIX_TOKENS` makes it (the generator's prefix_tokens).
python fairseq_side.py interactive OUT ARGUMENTS...
    fairseq-interactive ARGUMENTS, its own `cli_main` in this process, what it prints written to OUT.
python fairseq_side.py steps JSON
    The commands above, each `[command, *arguments]` in the JSON list, one after another in this one process (one
    start-up of torch and fairseq for them all).
"""

import contextlib
import json
import sys

import torch
from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_scorer import SequenceScorer

LOGIT_PAIRS = 8
PREFIX_TOKENS = 2


def moses(language: str) -> MosesTokenizer:
    return MosesTokenizer(MosesTokenizerConfig(source_lang=language, target_lang=language))


def tokenize(folder: str, *splits: str) -> None:
    for language in ("en", "de"):
        tokenizer = moses(language)
        for split in splits:
            with open(f"{folder}/{split}.{language}", encoding="utf-8") as lines:
                tokenized = "".join(tokenizer.encode(line.rstrip("\n")) + "\n" for line in lines)
            with open(f"{folder}/{split}.tok.{language}", "w", encoding="utf-8") as out:
                out.write(tokenized)


def reference(folder: str, bpe: str, pairs_file: str, out: str) -> None:
    hub = TransformerModel.from_pretrained(
        folder,
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=folder,
        tokenizer="moses",
        bpe=bpe,
        bpe_codes=f"{folder}/bpecodes",
        source_lang="en",
        target_lang="de",
    ).eval()
    with open(pairs_file, encoding="utf-8") as handle:
        pairs = json.load(handle)
    german = moses("de")
    sources = [hub.encode(english) for english, _ in pairs]
    targets = [
        hub.tgt_dict.encode_line(hub.apply_bpe(german.encode(text)), add_if_not_exist=False, append_eos=True).long()
        for _, text in pairs
    ]
    model = hub.models[0]
    logits = []
    with torch.no_grad():
        for source, target in list(zip(sources, targets))[:LOGIT_PAIRS]:
            previous = torch.cat([target.new_tensor([hub.tgt_dict.eos()]), target[:-1]])
            output, _ = model(source[None], torch.tensor([len(source)]), previous[None])
            logits.append(output[0].tolist())
    scorer, positional_scores = SequenceScorer(hub.tgt_dict), []
    for source, target in zip(sources, targets):
        previous = torch.cat([target.new_tensor([hub.tgt_dict.eos()]), target[:-1]])
        net_input = {"src_tokens": source[None], "src_lengths": torch.tensor([len(source)]),
                     "prev_output_tokens": previous[None]}  # fmt: skip
        [[hypothesis]] = scorer.generate([model], {"net_input": net_input, "target": target[None]})
        positional_scores.append(hypothesis["positional_scores"].tolist())
    prefixed = []
    for source, target in zip(sources, targets):
        prefix = target[: min(PREFIX_TOKENS, len(target) - 1)]
        [hypotheses] = hub.generate([source], beam=5, inference_step_args={"prefix_tokens": prefix[None]})
        prefixed.append({"prefix": prefix.tolist(), "tokens": hypotheses[0]["tokens"].tolist()})
    result = {
        "prefixed": prefixed,
        "positional_scores": positional_scores,
        "source_ids": [ids.tolist() for ids in sources],
        "target_ids": [ids.tolist() for ids in targets],
        "decoder_input_ids": [[hub.tgt_dict.eos()] + ids.tolist()[:-1] for ids in targets[:LOGIT_PAIRS]],
        "logits": logits,
    }
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


def interactive(out: str, *arguments: str) -> None:
    from fairseq_cli.interactive import cli_main

    sys.argv = ["fairseq-interactive", *arguments]
    with open(out, "w", encoding="utf-8") as handle, contextlib.redirect_stdout(handle):
        cli_main()


def steps(commands: str) -> None:
    for command, *arguments in json.loads(commands):
        COMMANDS[command](*arguments)


COMMANDS = {"tokenize": tokenize, "reference": reference, "interactive": interactive, "steps": steps}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
