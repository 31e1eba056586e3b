"""`vanilla-transformer plot`: the training curves of a run folder, drawn from its metrics.jsonl (also while the
run goes on)."""

import argparse

from .failures import reported_as


def plot_command_parser(subparsers) -> argparse.ArgumentParser:
    plot = subparsers.add_parser("plot", help="draw the training curves of a run folder (also while it runs)")
    plot.add_argument("run_dir", help="a training run's folder (its metrics.jsonl)")
    plot.add_argument("--out", help="PNG path (default: RUN_DIR/training_curves.png)")
    plot.set_defaults(func=plot_command)
    return plot


def plot_command(args: argparse.Namespace) -> int:
    from ..corpus.output import check_output_file
    from ..training.report.plots import plot_run

    if args.out is not None:
        check_output_file("--out", args.out)
    with reported_as(2, ValueError):  # not a run folder, or --out not a PNG file's name
        print(plot_run(args.run_dir, args.out))
    return 0
