"""The package's own beam search, for what generate() does not do: translations that contain given terms, as fairseq
makes them with `--constraints ordered|unordered` (Post & Vilar 2018's dynamic beam allocation, vectorised as in Hu
et al. 2019), and translations from target prefixes, by fairseq's or CTranslate2's rules. transformers no longer has
a constrained search (it was removed from generate() in 2025), so this one is ported from fairseq's
`SequenceGenerator` and `LexicallyConstrainedBeamSearch` (MIT licence) rule for rule:

- every step, the candidates are the 2k best (hypothesis, token) pairs over the beam (k the beam size), each
  hypothesis's best token, and each token that moves a hypothesis on in its terms (`constraints.py`);
- the candidates are grouped in banks by how many constraint tokens they have met, and the beam is dealt out
  round-robin from the fullest bank down, so that hypotheses that took a term early are not crowded out;
- the end of sentence is forbidden to a hypothesis until its terms are all met; a candidate that ends the sentence
  among the first k is finished with the score sum(log p) / length^length_penalty (length in tokens, end of sentence
  included), and a sentence is done when k hypotheses are finished or the length limit is reached;
- a prefix's tokens are the only choice while it lasts; where fairseq and CTranslate2 treat prefixes differently,
  the options' `SearchRules` (`options.py`: `FAIRSEQ`, `CTRANSLATE2`) choose.

    options = SearchOptions(num_beams=5, length_penalty=1.0, max_length=200, rules=FAIRSEQ)
    hypotheses = beam_search(model, input_ids, attention_mask, options, terms=terms)
    hypotheses[0][0].tokens   # the best translation of the first sentence, its terms in it
"""

import math
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from .constraints import initial_state
from .decoding import length_power
from .options import SearchOptions

# fairseq's sort key gives each bank this much score: the candidates sort by bank, then by score within a bank
BANK_WEIGHT = -100


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # the generated tokens, the end of sentence last
    score: float  # sum of the tokens' log-probabilities / len(tokens) ** length_penalty


@dataclass
class Beam:
    """The search's state over the S sentences still being searched, k rows (hypotheses) per sentence."""

    tokens: torch.Tensor  # (S * k, step + 1): the decoder's start, then the tokens chosen
    scores: torch.Tensor  # (S * k, step): each hypothesis's running sum of log-probabilities, token by token
    states: list[list]  # each sentence's k constraint states
    sentences: list[int]  # each sentence's index in the input
    ignore: torch.Tensor  # (S, k): fairseq's cands_to_ignore, rows filled with ended candidates


@dataclass
class Candidates:
    """Each sentence's 2k candidates for the next step, dealt out across the banks."""

    scores: torch.Tensor  # (S, 2k): the running sum of log-probabilities with the candidate's token
    tokens: torch.Tensor  # (S, 2k)
    beams: torch.Tensor  # (S, 2k): the hypothesis (0..k-1) each extends
    states: list[list]  # each candidate's constraint state


@torch.no_grad()
def beam_search(
    model, input_ids, attention_mask, options: SearchOptions, terms=None, prefixes=None
) -> list[list[Hypothesis]]:
    """Each sentence's finished hypotheses, best first (at most `options.num_beams`), each of at most
    `options.max_length` tokens before its end of sentence (a prefix's included). Each contains every term of its
    sentence's `terms` (lists of target token ids; None: no terms), in order when `options.ordered`, and starts
    with its sentence's prefix (target token ids; None: none), whose tokens count in its length, and in its score
    by the options' `rules`. A sentence none of whose hypotheses has met its terms by the length limit ends them all
    there (fairseq stops with an assertion error). `options` are resolved: a beam size and a length penalty."""
    config, k, count = model.config, options.num_beams, len(input_ids)
    terms, prefixes = terms or [[] for _ in range(count)], prefixes or [[] for _ in range(count)]
    rows = torch.arange(count, device=input_ids.device).repeat_interleave(k)
    encoder = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    memory, mask = encoder.last_hidden_state[rows], attention_mask[rows]
    start = torch.full((count * k, 1), config.decoder_start_token_id, dtype=torch.long)  # the beam's on the CPU
    states = [[initial_state(sentence, options.ordered)] * k for sentence in terms]
    beam = Beam(start, torch.zeros(count * k, 0), states, list(range(count)), torch.zeros(count, k, dtype=torch.bool))
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    finished: list[list[Hypothesis]] = [[] for _ in range(count)]
    for step in range(options.max_length + 1):
        step_input = dict(decoder_input_ids=beam.tokens[:, -1:].to(mask.device), cache=cache, use_cache=True)
        logits = model(encoder_outputs=BaseModelOutput(memory), attention_mask=mask, **step_input).logits[:, -1].cpu()
        lprobs = step_log_probs(logits, config, step, options, beam.states)
        force_prefixes(lprobs, step, [prefixes[s] for s in beam.sentences], k, options)
        candidates = step_candidates(step, lprobs, beam)
        if options.rules.only_best_ends_after_prefix:
            ends_after = [0 < len(prefixes[s]) == step for s in beam.sentences]
            only_best_ends(candidates, ends_after, config.eos_token_id)
        done = finish(step, beam, candidates, config.eos_token_id, options, finished)
        if len(done) == len(beam.sentences):
            break
        keep = advance(beam, candidates, done, config.eos_token_id).to(mask.device)  # the beam's rows are on the CPU
        memory, mask = memory[keep], mask[keep]
        cache.reorder_cache(keep)
    return [ranked(hypotheses) for hypotheses in finished]


def force_prefixes(lprobs, step: int, prefixes: list[list[int]], k: int, options: SearchOptions) -> None:
    """Where a sentence's prefix goes on at this step, its token is the only choice, with its own log-probability
    (fairseq's _prefix_tokens) or 0 (CTranslate2's update_sample_with_prefix: nothing added to the score)."""
    if step >= options.max_length:
        return
    for s, prefix in enumerate(prefixes):
        if step < len(prefix):
            rows = slice(s * k, (s + 1) * k)
            kept = lprobs[rows, prefix[step]].clone() if options.rules.prefix_in_score else 0.0
            lprobs[rows] = -math.inf
            lprobs[rows, prefix[step]] = kept


def ranked(hypotheses: list[Hypothesis]) -> list[Hypothesis]:
    if not hypotheses:
        return hypotheses
    order = torch.tensor([h.score for h in hypotheses]).sort(descending=True).indices.tolist()
    return [hypotheses[i] for i in order]


def step_log_probs(logits, config, step: int, options: SearchOptions, states) -> torch.Tensor:
    """This step's log-probabilities with fairseq's rules: never padding; only the end of sentence at the length
    limit; no end of sentence before `min_length` tokens, nor before a hypothesis's terms are all met."""
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    lprobs[lprobs != lprobs] = -math.inf
    lprobs[:, config.pad_token_id] = -math.inf
    eos = config.eos_token_id
    if step >= options.max_length:
        lprobs[:, :eos] = -math.inf
        lprobs[:, eos + 1 :] = -math.inf
    elif step < options.rules.min_length:
        lprobs[:, eos] = -math.inf
    if step > 0:
        lprobs[unmet_rows(states, at_limit=step >= options.max_length), eos] = -math.inf
    return lprobs


def unmet_rows(states: list[list], at_limit: bool) -> list[int]:
    """The hypotheses (rows) whose terms are not all met. At the length limit, only in the sentences where another
    hypothesis has met them: where none has, fairseq stops with an assertion error, and here they all may end."""
    k = len(states[0])
    return [
        s * k + b
        for s, sentence in enumerate(states)
        if not at_limit or any(state.finished for state in sentence)
        for b, state in enumerate(sentence)
        if not state.finished
    ]


def only_best_ends(candidates: Candidates, sentences: list[bool], eos: int) -> None:
    """CTranslate2's rule at the first step after a prefix: an end of sentence other than the best candidate is
    a dead candidate (its score -inf), in its place."""
    for s, applies in enumerate(sentences):
        if applies:
            later = candidates.tokens[s, 1:].eq(eos)
            candidates.scores[s, 1:][later] = -math.inf


def step_candidates(step: int, lprobs, beam: Beam) -> Candidates:
    """Every remaining sentence's candidates (fairseq's LexicallyConstrainedBeamSearch.step)."""
    k = len(beam.states[0])
    found = [
        sentence_candidates(step, lprobs[s * k : (s + 1) * k], beam.scores[s * k : (s + 1) * k], beam.states[s])
        for s in range(len(beam.sentences))
    ]
    scores = torch.tensor([[c[0] for c in sentence] for sentence in found], dtype=torch.float32)
    tokens = torch.tensor([[c[1] for c in sentence] for sentence in found])
    beams = torch.tensor([[c[2] for c in sentence] for sentence in found])
    return Candidates(scores, tokens, beams, [[c[3] for c in sentence] for sentence in found])


def sentence_candidates(step: int, lprobs, scores, states) -> list[tuple]:
    """One sentence's 2k candidates (score, token, hypothesis, state): the 2k best pairs, each hypothesis's best
    token and each token that moves a hypothesis on in its terms, dealt out across the banks."""
    k, vocabulary = lprobs.shape
    count = min(2 * k, k * vocabulary - 1)
    if step == 0:  # every hypothesis is the decoder's start: only the first is read
        lprobs, states = lprobs[:1], states[:1]
    else:
        lprobs = lprobs + scores[:, -1:]
    best, index = lprobs.reshape(-1).topk(min(count, lprobs.numel()))
    values, tokens, beams = best.tolist(), (index % vocabulary).tolist(), (index // vocabulary).tolist()
    if step > 0:
        each_best, each_token = lprobs.topk(1, dim=1)
        values += each_best[:, 0].tolist()
        tokens += each_token[:, 0].tolist()
        beams += list(range(k))
    for hypothesis, state in enumerate(states):
        for token in list(state.next_tokens()):  # a set's own order, as fairseq reads it
            values.append(lprobs[hypothesis, token].item())
            tokens.append(token)
            beams.append(hypothesis)
    following = [states[b].advance(t) for b, t in zip(beams, tokens)]
    dealt = deal_out(values, tokens, beams, following, states[-1].distinct_tokens, vocabulary, count)
    return dealt + [(-math.inf, *dealt[-1][1:])] * (count - len(dealt))  # 2k past the vocabulary: dead ones


def deal_out(values, tokens, beams, following, distinct_tokens: int, vocabulary: int, count: int) -> list[tuple]:
    """The candidates sorted by (bank, score), duplicates dropped, then interleaved from the fullest bank down and
    cut to `count`."""
    banks = torch.tensor([state.bank for state in following])
    key = (distinct_tokens - banks) * BANK_WEIGHT + torch.tensor(values, dtype=torch.float32)
    order = key.sort(descending=True).indices.tolist()
    pairs = [beams[i] * (vocabulary + 1) + tokens[i] for i in order]
    kept = [i for j, i in enumerate(order) if j == 0 or pairs[j] != pairs[j - 1]]  # equal pairs sort together
    stripes, bank_count, current = [], -1, banks[kept[0]].item()
    for i in kept:
        bank = banks[i].item()
        bank_count = bank_count + 1 if bank == current else 0
        current = bank
        stripes.append(distinct_tokens - bank + bank_count * (len(kept) + 1))
    dealt = [kept[j] for j in torch.tensor(stripes).sort().indices.tolist()]
    return [(values[i], tokens[i], beams[i], following[i]) for i in dealt[:count]]


def finish(step, beam: Beam, candidates: Candidates, eos: int, options: SearchOptions, finished) -> list[int]:
    """Finish the hypotheses that end among each sentence's first k candidates (fairseq's finalize_hypos); the
    positions (in `beam.sentences`) of the sentences that are done: k finished hypotheses, or the length limit."""
    k = candidates.scores.shape[1] // 2
    ends = candidates.tokens[:, :k].eq(eos) & candidates.scores[:, :k].ne(-math.inf) & ~beam.ignore
    normalised = candidates.scores / length_power(step + 1, options.length_penalty)
    touched = []
    for s, j in ends.nonzero().tolist():
        sentence = beam.sentences[s]
        if len(finished[sentence]) < k or options.rules.keep_every_end:
            row = s * k + candidates.beams[s, j].item()
            finished[sentence].append(Hypothesis(beam.tokens[row, 1:].tolist() + [eos], normalised[s, j].item()))
        touched.append(s)
    if step >= options.max_length:
        for s, sentence in enumerate(beam.sentences):  # none ended among the first k: the best candidate ends
            if not finished[sentence]:
                row = s * k + candidates.beams[s, 0].item()
                finished[sentence].append(Hypothesis(beam.tokens[row, 1:].tolist() + [eos], normalised[s, 0].item()))
        return list(range(len(beam.sentences)))
    return [s for s in sorted(set(touched)) if len(finished[beam.sentences[s]]) >= k]


def advance(beam: Beam, candidates: Candidates, done: list[int], eos: int) -> torch.Tensor:
    """The next beam of the sentences not done: each sentence's first k candidates that do not end (fairseq's
    active hypotheses); gives the rows of the previous beam they extend, to reorder what the decoder keeps."""
    k = candidates.scores.shape[1] // 2
    remaining = [s for s in range(len(beam.sentences)) if s not in done]
    index = torch.tensor(remaining)
    ends = candidates.tokens[index].eq(eos) & candidates.scores[index].ne(-math.inf)
    ends[:, :k] |= beam.ignore[index]
    order = ends.long() * 2 * k + torch.arange(2 * k)
    position, active = order.topk(k, dim=1, largest=False)
    rows = (index[:, None] * k + candidates.beams[index].gather(1, active)).view(-1)
    chosen = candidates.tokens[index].gather(1, active).view(-1, 1)
    beam.tokens = torch.cat([beam.tokens[rows], chosen], dim=1)
    beam.scores = torch.cat([beam.scores[rows], candidates.scores[index].gather(1, active).view(-1, 1)], dim=1)
    beam.states = [[candidates.states[s][a] for a in row] for s, row in zip(remaining, active.tolist())]
    beam.sentences = [beam.sentences[s] for s in remaining]
    beam.ignore = position >= 2 * k
    return rows
