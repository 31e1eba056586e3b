"""`vanilla_transformer.cli`, with accelerate's FSDP selectable on CPU processes (gloo): for the engines suite and the
tests of the training command under accelerate's FSDP2 on a machine without a GPU.

accelerate picks FSDP only for GPU-like processes: with `cpu=True` it sets up plain CPU data parallelism and keeps
the FSDP plugin unused. This script lifts that one choice and nothing else: where accelerate built an FSDP plugin
from the launch's config and chose MULTI_CPU, the state says FSDP, as it does on GPUs (accelerate mirrors the type
into `PartialState` the same way). Preparing, sharding, saving and loading are accelerate's and torch's own code.
Run it as `accelerate launch --config_file examples/accelerate/fsdp2.yaml bench/fsdp_on_cpu.py train ...
--cpu`."""

import sys

import accelerate.state
from accelerate.utils import DistributedType

accelerator_state_init = accelerate.state.AcceleratorState.__init__


def init_with_fsdp_on_cpu(self, *args, **kwargs):
    accelerator_state_init(self, *args, **kwargs)
    plugin = kwargs.get("fsdp_plugin")
    if plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = plugin
        accelerate.state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP


accelerate.state.AcceleratorState.__init__ = init_with_fsdp_on_cpu

if __name__ == "__main__":
    from vanilla_transformer.cli import main

    sys.exit(main(sys.argv[1:]))
