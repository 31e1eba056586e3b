"""One process of a training run that the engines suite launches: the training command (with accelerate's FSDP
selectable on CPU processes, as tests/training/fsdp_on_cpu.py does), and this process's peak resident memory (VmHWM,
MiB) through the updates (taken as the finish begins: averaging, the final beam search, the saved folder) and over the
whole run, written to PEAK_DIR/rank-RANK.json."""

import gc
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "tests", "training"), ROOT]

import fsdp_on_cpu  # noqa: E402,F401  (the lift applies on import)
from vanilla_transformer.training.run import loop  # noqa: E402

from bench.common.memory import peak_rss_mib  # noqa: E402
from vanilla_transformer.cli import main  # noqa: E402

peaks = {}
finish = loop.finish


def tensor_mib() -> float:
    """MiB held by the CPU tensors Python can reach (each storage once; a DTensor through its local shard): the
    weights, gradients and optimizer state of this process, with whatever else is alive."""
    import torch
    from torch.distributed.tensor import DTensor

    seen, total = set(), 0
    for value in gc.get_objects():
        if isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.device.type == "cpu":
            storage = value.untyped_storage()
            if storage.data_ptr() and storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total / 2**20


def finish_after_noting_the_peak(run):
    peaks["updates_peak_rss_mib"] = peak_rss_mib()
    peaks["tensor_mib"] = tensor_mib()
    return finish(run)


loop.finish = finish_after_noting_the_peak

if __name__ == "__main__":
    status = main(sys.argv[1:])
    peaks.update(peak_rss_mib=peak_rss_mib(), status=status)
    with open(os.path.join(os.environ["PEAK_DIR"], f"rank-{os.environ.get('RANK', '0')}.json"), "w") as handle:
        json.dump(peaks, handle)
    sys.exit(status)
