"""Where generation time goes, for this model and for MarianMTModel of the same size: the encoder, the decoder's
forward calls (one per new token, the output projection included), and the rest, which is `generate()`'s own search
code (scores, top-k, beam bookkeeping, cache reordering) that both models share.

    python -m bench generation-split [--quick]

Same models, sources and decoding settings as the speed suite's generation table (32 sentences, a fixed number of new
tokens); the two models are timed alternately and the medians over repeats are printed as a Markdown table.
"""

import argparse
import statistics
import time

import torch

from ..common import models, report

SUITE = "generation-split"

SOURCES, SOURCE_LENGTH, NEW_TOKENS = 32, 16, 16


class Stopwatch:
    """Adds up the time spent in one module's forward calls."""

    def __init__(self, module: torch.nn.Module):
        self.seconds, self.forward = 0.0, module.forward

        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = self.forward(*args, **kwargs)
            self.seconds += time.perf_counter() - start
            return out

        module.forward = timed


def split(size_name: str, num_beams: int, repeats: int) -> dict:
    size = models.SIZES[size_name]
    sources = torch.randint(3, size["vocab"], (SOURCES, SOURCE_LENGTH), generator=torch.Generator().manual_seed(0))
    runs = {}
    for kind in ("vanilla", "marian"):
        model = models.build(kind, size, "sdpa", "cpu")
        # generate() runs the encoder once through get_encoder(), then the whole model once per new token
        encoder, decoder = Stopwatch(model.get_encoder()), Stopwatch(model)
        runs[kind] = (models.Generate(model, sources, num_beams, NEW_TOKENS), encoder, decoder)
        runs[kind][0]()  # warm-up
    times = {kind: {"total": [], "encoder": [], "decoder": []} for kind in runs}
    for _ in range(repeats):
        for kind, (generate, encoder, decoder) in runs.items():
            encoder.seconds = decoder.seconds = 0.0
            start = time.perf_counter()
            generate()
            times[kind]["total"].append(time.perf_counter() - start)
            times[kind]["encoder"].append(encoder.seconds)
            times[kind]["decoder"].append(decoder.seconds)
    result = {}
    for kind, parts in times.items():
        total, enc, dec = (statistics.median(parts[k]) * 1e3 for k in ("total", "encoder", "decoder"))
        result[kind] = {"total": total, "encoder": enc, "decoder": dec, "search": total - enc - dec}
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = report.suite_parser(SUITE, __doc__)
    parser.add_argument("--quick", action="store_true", help="the numbers size only, 3 repeats")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    sizes = ["numbers"] if args.quick else ["tiny", "base"]
    repeats = 3 if args.quick else 7
    print(
        f"{SOURCES} sentences of {SOURCE_LENGTH} tokens, {NEW_TOKENS} new tokens, sdpa, {torch.get_num_threads()} "
        f"threads; medians of {repeats} alternating repeats, ms per generate() call\n"
    )
    print(
        "| size | search | model | total | encoder | decoder forward | search code | decoder: Marian / ours | "
        "total: Marian / ours |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size_name in sizes:
        for num_beams in (1, 5):
            print_rows(size_name, num_beams, split(size_name, num_beams, repeats))
    return 0


def print_rows(size_name: str, num_beams: int, r: dict) -> None:
    """The table's two rows of one size and search: ours with the ratios, then Marian's."""
    search = "greedy" if num_beams == 1 else f"beam {num_beams}"
    for kind, label in (("vanilla", "ours"), ("marian", "Marian")):
        p = r[kind]
        ratios = (
            (
                f"{r['marian']['decoder'] / r['vanilla']['decoder']:.2f}x | "
                f"{r['marian']['total'] / r['vanilla']['total']:.2f}x"
            )
            if kind == "vanilla"
            else " | "
        )
        print(
            f"| {size_name} | {search} | {label} | {p['total']:.0f} | {p['encoder']:.0f} | "
            f"{p['decoder']:.0f} | {p['search']:.0f} | {ratios} |"
        )
