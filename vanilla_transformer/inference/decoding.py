"""generate()'s greedy and beam searches, rule for rule, with finished sentences leaving the batch.

`generate()` keeps every sentence of a batch in every step until the last one is done: a batch of 64 sentences
whose longest translation takes 60 steps runs the decoder 60 times on all 64 (times the beam), however short the
others are. fairseq's `SequenceGenerator` and CTranslate2 drop a sentence from the batch once its search is done;
so does `decode`, so that a batch costs about the sum of its sentences' lengths, not its count times the longest.

Everything else is generate()'s: the model's generation config with the search's settings, its logits processors
(built by generate()'s own `_get_logits_processor`), the decoder's start token, and its beam search's rules
(transformers 5's vectorised search: the 2k best continuations, the best k that do not end go on, those among
the first k that end are finished with sum(log p) / length ** length_penalty, `early_stopping`'s heuristics). A
sentence's search reads only its own rows, so dropping the others changes none of its steps: `decode` writes the
tokens generate() writes (up to the rounding of a smaller batch's matrix products).

    config = GenerationConfig.from_model_config(model.config)
    config.update(num_beams=5, max_new_tokens=64, num_return_sequences=2)
    found = decode(model, batch["input_ids"], batch["attention_mask"], config)
    found[0][0].tokens   # the best translation of the first sentence, its end of sentence last
"""

import math
from dataclasses import dataclass, replace

import torch
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import LogitsProcessorList
from transformers.modeling_outputs import BaseModelOutput

EXCLUDED = -1.0e9  # generate()'s score for a candidate that may not be chosen


@dataclass(frozen=True)
class Decoded:
    tokens: list[int]  # the generated tokens, after the decoder's start; the end of sentence last if written
    score: float | None  # what the search ranks by (greedy: computed the same way); None where not asked


class Decoder:
    """The model's decoder over the encoded batch, a step at a time, its cache kept; the rows it decodes can be
    reordered (a beam's hypotheses) or cut (sentences that are done)."""

    def __init__(self, model, input_ids, attention_mask, rows: torch.Tensor):
        self.model = model
        encoded = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        self.memory, self.mask = encoded[rows], attention_mask[rows]
        self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """The next token's logits (float32) of each row, given its last token."""
        out = self.model(encoder_outputs=BaseModelOutput(self.memory), attention_mask=self.mask,
                         decoder_input_ids=tokens[:, -1:], cache=self.cache, use_cache=True)  # fmt: skip
        return out.logits[:, -1].float()

    def reorder(self, rows: torch.Tensor) -> None:
        """Each row continues row `rows[i]`'s hypothesis, of the same sentence: the encoder's side is unchanged."""
        self.cache.self_attention_cache.reorder_cache(rows)

    def keep(self, rows: torch.Tensor) -> None:
        """Only `rows` go on, in that order (the rows of the sentences not done)."""
        self.cache.reorder_cache(rows)
        self.memory, self.mask = self.memory[rows], self.mask[rows]


def prepared(model, config: GenerationConfig, input_ids) -> tuple[GenerationConfig, LogitsProcessorList]:
    """The search's settings as generate() resolves them (unset ones from the model's generation config, then
    transformers' defaults), and generate()'s logits processors for them."""
    config, _ = model._prepare_generation_config(config)
    if config.max_new_tokens is not None:  # else generate() keeps `max_length`, the decoder's start included
        config.max_length = config.max_new_tokens + 1
    model._prepare_special_tokens(config, True, device=input_ids.device)
    processors = model._get_logits_processor(generation_config=config, input_ids_seq_length=1,
                                             encoder_input_ids=input_ids, prefix_allowed_tokens_fn=None,
                                             logits_processor=LogitsProcessorList(), device=input_ids.device,
                                             model_kwargs={})  # fmt: skip
    return config, processors


@torch.no_grad()
def decode(model, input_ids, attention_mask, config: GenerationConfig, scores: bool = False) -> list[list[Decoded]]:
    """Each sentence's `config.num_return_sequences` translations, best first, as generate() finds them with
    `config` (greedy or beam search, `max_new_tokens` new tokens at most). `scores`: greedy translations get their
    score too (beam search's always have theirs)."""
    config, processors = prepared(model, config, input_ids)
    if config.num_beams == 1:
        return greedy(model, input_ids, attention_mask, config, processors, scores)
    return beam(model, input_ids, attention_mask, config, processors)


def written(tokens: list[int], config: GenerationConfig) -> list[int]:
    """A finished hypothesis's tokens up to its end of sentence (included), the padding after it left out."""
    eos = set(config._eos_token_tensor.tolist())
    end = next((i for i, token in enumerate(tokens) if token in eos), None)
    return tokens if end is None else tokens[: end + 1]


def start_tokens(config: GenerationConfig, rows: int, device) -> torch.Tensor:
    return torch.full((rows, 1), int(config._decoder_start_token_tensor), dtype=torch.long, device=device)


def greedy(model, input_ids, attention_mask, config, processors, scores: bool) -> list[list[Decoded]]:
    """generate()'s greedy search: the processed logits' best token, until the end of sentence or the limit."""
    count, eos = len(input_ids), config._eos_token_tensor
    sentences = torch.arange(count, device=input_ids.device)  # the sentence of each row still decoded
    decoder = Decoder(model, input_ids, attention_mask, sentences)
    tokens = start_tokens(config, count, input_ids.device)
    totals, found = torch.zeros(count, device=input_ids.device), [None] * count
    while True:
        processed = processors(tokens, decoder.logits(tokens))
        chosen = processed.argmax(dim=-1)
        if scores:
            totals = totals + processed.log_softmax(dim=-1).gather(1, chosen[:, None])[:, 0]
        tokens = torch.cat([tokens, chosen[:, None]], dim=1)
        done = torch.isin(chosen, eos) | (tokens.shape[1] >= config.max_length)
        for row in done.nonzero()[:, 0].tolist():
            length = tokens.shape[1] - 1
            score = (totals[row] / length_power(length, config.length_penalty)).item() if scores else None
            found[sentences[row].item()] = [Decoded(tokens[row, 1:].tolist(), score)]
        if done.all():
            return found
        if done.any():
            going = (~done).nonzero()[:, 0]
            sentences, tokens, totals = sentences[going], tokens[going], totals[going]
            decoder.keep(going)


FIRST_WIDTH = 64  # tokens the beam's hypotheses have room for at first (see `widened`)


@dataclass
class Beams:
    """Beam search's state for the S sentences still searched, k hypotheses each (generate()'s tensors)."""

    sentences: torch.Tensor  # (S,): each one's index in the batch
    running: torch.Tensor  # (S, k, length): the hypotheses going on, the decoder's start first
    running_scores: torch.Tensor  # (S, k): their sums of log-probabilities
    finished: torch.Tensor  # (S, k, length): the best finished hypotheses so far, padded
    finished_scores: torch.Tensor  # (S, k): their scores (EXCLUDED: none yet)
    is_finished: torch.Tensor  # (S, k)
    improvable: torch.Tensor  # (S, 1): whether a running hypothesis may still beat a finished one

    def kept(self, going: torch.Tensor) -> "Beams":
        fields = ("sentences", "running", "running_scores", "finished", "finished_scores", "is_finished", "improvable")
        return Beams(**{name: getattr(self, name)[going] for name in fields})


def beam(model, input_ids, attention_mask, config, processors) -> list[list[Decoded]]:
    """generate()'s beam search, a sentence leaving the batch once no running hypothesis can change its result."""
    count, k, device = len(input_ids), config.num_beams, input_ids.device
    decoder = Decoder(model, input_ids, attention_mask, torch.arange(count, device=device).repeat_interleave(k))
    pad = config._pad_token_tensor if config._pad_token_tensor is not None else config._eos_token_tensor[0]
    running = torch.full((count, k, min(config.max_length, FIRST_WIDTH)), int(pad), dtype=torch.long, device=device)
    running[:, :, 0] = int(config._decoder_start_token_tensor)
    scores = torch.zeros(count, k, device=device)
    scores[:, 1:] = EXCLUDED  # only the first hypothesis is read at the first step
    state = Beams(torch.arange(count, device=device), running, scores, running.clone(),
                  torch.full((count, k), EXCLUDED, device=device), torch.zeros(count, k, dtype=torch.bool,
                  device=device), torch.ones(count, 1, dtype=torch.bool, device=device))  # fmt: skip
    found = [None] * count
    for length in range(1, config.max_length):
        state = beam_step(widened(state, length, config.max_length, int(pad)), decoder, processors, config, length)
        done = ~state.improvable[:, 0] | (length + 1 >= config.max_length)
        if config.early_stopping is True:
            done |= state.is_finished.all(dim=1)
        for s in done.nonzero()[:, 0].tolist():
            found[state.sentences[s].item()] = [
                Decoded(written(state.finished[s, j, 1:].tolist(), config), state.finished_scores[s, j].item())
                for j in range(config.num_return_sequences)
            ]
        if done.all():
            break
        if done.any():
            going = (~done).nonzero()[:, 0]
            state = state.kept(going)
            decoder.keep((going[:, None] * k + torch.arange(k, device=device)).view(-1))
    return found


def widened(state: Beams, length: int, max_length: int, pad: int) -> Beams:
    """The state with room for the token at `length`: the hypotheses grow twice as wide when full, up to
    `max_length`, rather than being made that wide at the start (a large max_length would take its memory, and its
    time at every step, for sentences that end long before it)."""
    width = state.running.shape[2]
    if length < width:
        return state
    more = min(2 * width, max_length) - width
    return replace(state, running=pad_right(state.running, more, pad), finished=pad_right(state.finished, more, pad))


def pad_right(tokens: torch.Tensor, more: int, pad: int) -> torch.Tensor:
    return torch.nn.functional.pad(tokens, (0, more), value=pad)


def beam_step(state: Beams, decoder: Decoder, processors, config, length: int) -> Beams:
    """One step of generate()'s beam search over the tokens so far (`length` of them, the start included)."""
    count, k = state.running_scores.shape
    flat = state.running[:, :, :length].reshape(count * k, length)
    log_probs = processors(flat, decoder.logits(flat).log_softmax(dim=-1))
    vocabulary = log_probs.shape[-1]
    total = (log_probs.view(count, k, vocabulary) + state.running_scores[:, :, None]).view(count, -1)
    top_scores, top_index = total.topk(candidates_kept(config, k))
    parents, tokens = top_index // vocabulary, top_index % vocabulary
    candidates = state.running.gather(1, parents[:, :, None].expand(-1, -1, state.running.shape[2])).clone()
    candidates[:, :, length] = tokens
    ends = torch.isin(tokens, config._eos_token_tensor) | (length + 1 >= config.max_length)
    # the best k that do not end go on
    going_scores = top_scores + ends.float() * EXCLUDED
    going = going_scores.topk(k).indices
    running, running_scores = candidates.gather(1, expanded(going, candidates)), going_scores.gather(1, going)
    decoder.reorder((parents.gather(1, going) + torch.arange(count, device=going.device)[:, None] * k).view(-1))
    # those among the first k that end are finished, if they beat the finished ones
    just = ends & (torch.arange(ends.shape[1], device=ends.device) < k)
    finishing = top_scores / length_power(length, config.length_penalty)
    if config.early_stopping is True:
        finishing = finishing + state.is_finished.all(dim=1, keepdim=True).float() * EXCLUDED
    finishing = finishing + (~state.improvable).float() * EXCLUDED + (~just).float() * EXCLUDED
    merged_scores = torch.cat([state.finished_scores, finishing], dim=1)
    best = merged_scores.topk(k).indices
    merged = torch.cat([state.finished, candidates], dim=1)
    finished = merged.gather(1, expanded(best, merged))
    is_finished = torch.cat([state.is_finished, just], dim=1).gather(1, best)
    improvable = still_improvable(state.improvable, running_scores, merged_scores.gather(1, best), is_finished,
                                  length + 1, config)  # fmt: skip
    return Beams(state.sentences, running, running_scores, finished, merged_scores.gather(1, best), is_finished,
                 improvable)  # fmt: skip


def length_power(length: int, penalty: float) -> float:
    """length ** penalty, which a hypothesis's summed log-probability is divided by: inf where it passes float's range
    (Python raises OverflowError there), as in the tensors it divides."""
    try:
        return float(length) ** penalty
    except OverflowError:
        return math.inf


def candidates_kept(config, k: int) -> int:
    """generate()'s candidates a step: enough that k go on if each end of sentence token took one."""
    return max(2, 1 + len(config._eos_token_tensor)) * k


def expanded(index: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return index[:, :, None].expand(-1, -1, like.shape[2])


def still_improvable(improvable, running_scores, finished_scores, is_finished, length: int, config) -> torch.Tensor:
    """generate()'s early-stopping heuristic: the best running hypothesis, at its best hypothetical length, beats
    the worst finished one (or not all k have finished)."""
    if config.early_stopping == "never" and config.length_penalty > 0.0:
        best_length = config.max_length - 1
    else:
        best_length = length - 1
    best_possible = running_scores[:, :1] / length_power(best_length, config.length_penalty)
    worst = torch.where(is_finished, finished_scores.min(dim=1, keepdim=True).values, EXCLUDED)
    return improvable & (best_possible > worst).any(dim=-1, keepdim=True)
