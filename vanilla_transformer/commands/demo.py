"""`vanilla-transformer demo`: the Gradio app that translates and shows each stage of the Transformer."""

import argparse

from ..inference.devices import Placement, PlacementError
from ..training.options.argument_types import Port
from .engine import add_device_arguments, flag_error
from .serve import check_address


def demo_command_parser(subparsers) -> argparse.ArgumentParser:
    demo = subparsers.add_parser("demo", help="a Gradio app: translate and watch each stage of the Transformer")
    demo.add_argument("--model", required=True, help="a model folder (or Hub name)")
    demo.add_argument("--port", type=Port, help="the local port (default: Gradio's, 7860 or the next free)")
    demo.add_argument("--host", default="127.0.0.1", help="the address to serve on (0.0.0.0: every interface)")
    demo.add_argument("--share", action="store_true", help="also serve on a temporary public gradio.live link")
    add_device_arguments(demo)
    demo.set_defaults(func=demo_command)
    return demo


def demo_command(args: argparse.Namespace) -> int:
    from ..demo.app import launch

    check_address(args.host, args.port)  # None: any port, as Gradio picks one; the host must resolve
    placement = Placement(device=args.device, dtype=args.dtype)
    try:
        launch(args.model, args.port, args.share, args.host, where=f"--model {args.model}", placement=placement)
    except PlacementError as error:
        raise flag_error(error) from error
    return 0
