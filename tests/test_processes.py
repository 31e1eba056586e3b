"""The end of a process group: destroyed after the last collective, and nothing to do where none is left."""

import torch
import torch.distributed

from vanilla_transformer.processes import end_processes


def test_the_group_this_process_joined_is_destroyed_and_a_second_end_does_nothing(tmp_path):
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    total = torch.ones(3)
    torch.distributed.all_reduce(total)
    end_processes()
    assert not torch.distributed.is_initialized()
    end_processes()
    assert total.tolist() == [1.0, 1.0, 1.0]
