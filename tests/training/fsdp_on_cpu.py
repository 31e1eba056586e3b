"""`vanilla_transformer.cli`, with accelerate's FSDP selectable on CPU processes (gloo): for the engines suite and the
tests of the training command under accelerate's FSDP2 and FSDP1 on a machine without a GPU.

accelerate picks FSDP only for GPU-like processes: with `cpu=True` it sets up plain CPU data parallelism and keeps
the FSDP plugin unused. This script lifts that choice: where accelerate built an FSDP plugin from the launch's config
and chose MULTI_CPU, the state says FSDP, as it does on GPUs (accelerate mirrors the type into `PartialState` the
same way). FSDP2 then runs as accelerate sets it up. Under FSDP1 alone, two details of torch's FSDP1 on CPU follow:
the processes' device is `cpu` (accelerate's `cpu:0` fails FSDP1's check against its compute device, `cpu`), and
state dicts are not "offloaded to CPU" (the parameters are there already, and FSDP1 crashes copying them), and module
states are not synced (accelerate's plugin looks for an accelerator device to sync them on; the processes start from
the same seed). Preparing, sharding, saving and loading are accelerate's and torch's own code.
Run it as
`accelerate launch --config_file examples/accelerate/fsdp2.yaml tests/training/fsdp_on_cpu.py train ... --cpu`."""

import os
import sys

import accelerate.state
import torch
import torch.distributed.fsdp.api
from accelerate.utils import DistributedType

accelerator_state_init = accelerate.state.AcceleratorState.__init__


def init_with_fsdp_on_cpu(self, *args, **kwargs):
    accelerator_state_init(self, *args, **kwargs)
    plugin = kwargs.get("fsdp_plugin")
    if plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = plugin
        accelerate.state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        if plugin.fsdp_version == 1:
            fit_fsdp1_to_cpu(self)


def fit_fsdp1_to_cpu(state) -> None:
    """FSDP1 compares its compute device, `cpu`, with accelerate's `cpu:0`; and it crashes (SIGSEGV) "offloading to
    CPU" the parameters already there, as accelerate asks in get_state_dict and its full-state-dict checkpoints."""
    state.device = accelerate.state.PartialState._shared_state["device"] = torch.device("cpu")
    for config in vars(torch.distributed.fsdp.api).values():
        if isinstance(config, type) and "offload_to_cpu" in vars(config):
            config.offload_to_cpu = property(lambda self: False, lambda self, value: None)


accelerate.state.AcceleratorState.__init__ = init_with_fsdp_on_cpu
if os.environ.get("FSDP_VERSION") == "1":  # read by the FSDP plugin the Accelerator builds from the launch's config
    os.environ["FSDP_SYNC_MODULE_STATES"] = "false"

if __name__ == "__main__":
    from vanilla_transformer.cli import main

    sys.exit(main(sys.argv[1:]))
