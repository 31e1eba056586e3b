"""`python -m bench SUITE [flags]`: run one benchmark suite from the repository root. `python -m bench SUITE --help`
shows that suite's flags; a suite's module (`bench/SUITE/suite.py`) is imported only when that suite runs."""

import argparse
import importlib
import sys

# suite -> (its module in this package, what it measures)
SUITES = {
    "speed": ("speed.suite", "training, generation, memory and utilisation against MarianMTModel: the report's head"),
    "serving": ("serving.suite", "CTranslate2 exports against generate() and MarianMTModel: the serving section"),
    "serve": ("serve.suite", "`vanilla-transformer serve` under load against offline batches: the serve section"),
    "data": ("data.suite", "the data pipeline at scale, time to the first update and peak memory: the data section"),
    "gpu": ("gpu.suite", "training and generation in bf16 on a CUDA GPU: the GPU section"),
    "engines": ("engines.suite", "peak memory per process under DDP, FSDP2 and DeepSpeed ZeRO: the engines section"),
    "generation-split": ("generation_split.suite", "where generate()'s time goes: encoder, decoder, search (printed)"),
    "search-agreement": ("search_agreement.suite", "generate() against CTranslate2 beam search, scored by the model"),
    "translate": (
        "translate.suite",
        "a corpus through `translate` against a plain MarianMTModel loop and CTranslate2's translate_file: the "
        "translate section",
    ),
    "translate-fairseq": (
        "translate.interactive",
        "`translate` against fairseq-interactive on the same fairseq model, for context: the translate-fairseq section",
    ),
}


def overview() -> argparse.ArgumentParser:
    """The parser that lists the suites, a line each."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    suites = parser.add_subparsers(title="suites", metavar="SUITE", required=True)
    for name, (_, summary) in SUITES.items():
        suites.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SUITES:
        parser = overview()
        parser.parse_args(argv)  # --help lists the suites; anything else is an error
        parser.error("name a suite first")
    module = importlib.import_module(f".{SUITES[argv[0]][0]}", __package__)
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
