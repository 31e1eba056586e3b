"""`vanilla-transformer plot`: the training curves of a run folder, drawn from its metrics.jsonl (also while the
run goes on)."""

import argparse

from .failures import reported_as


def plot_command_parser(subparsers) -> argparse.ArgumentParser:
    plot = subparsers.add_parser("plot", help="draw the training curves of a run folder (also while it runs)")
    plot.add_argument("run_dir", help="a training run's folder (its metrics.jsonl)")
    plot.add_argument("--out", help="image path, .png, .svg, .pdf... (default: RUN_DIR/training_curves.png)")
    plot.set_defaults(func=plot_command)
    return plot


def plot_command(args: argparse.Namespace) -> int:
    from ..corpus.output import check_output_file
    from ..training.report.plots import check_image_name, plot_run

    with reported_as(2, ValueError):  # --out not an image file's name, or not a run folder
        if args.out is not None:
            check_output_file("--out", args.out)
            check_image_name(args.out, "--out ")
        print(plot_run(args.run_dir, args.out))
    return 0
