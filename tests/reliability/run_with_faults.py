"""Runs `vanilla-transformer` in this process with a fault injected at the operating-system level, for the tests
that kill or starve a real training process.

    python run_with_faults.py --hang-in-checkpoint-write STEP  train ...   # stop inside the write of checkpoint STEP
    python run_with_faults.py --file-size-limit BYTES train ...            # writes past BYTES fail (EFBIG)
"""

import os
import resource
import signal
import sys
import time

from vanilla_transformer.training.run import checkpoints

from vanilla_transformer.cli import main


def hang_in_checkpoint_write(step: int) -> None:
    """When checkpoint STEP's files are written but not yet renamed into place, say so and wait to be killed."""
    original = checkpoints._fsync_tree

    def fsync_then_hang(path: str) -> None:
        original(path)
        if os.path.basename(path) == f"{checkpoints.TEMPORARY_PREFIX}{step}":
            print(f"WRITING {path}", flush=True)
            time.sleep(600)

    checkpoints._fsync_tree = fsync_then_hang


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[0] == "--hang-in-checkpoint-write":
        hang_in_checkpoint_write(int(argv[1]))
        argv = argv[2:]
    elif argv[0] == "--file-size-limit":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(argv[1]), int(argv[1])))
        argv = argv[2:]
    sys.exit(main(argv))
