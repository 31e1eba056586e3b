"""The processes that `torchrun` or `accelerate launch` start: accelerate's state of them, and the end of their
process group; the CPU cores this process may use; and SIGTERM raised as `Terminated` where a command runs."""

import os
import signal
import time


def processes():
    """accelerate's state of the processes (gloo between CPU processes where there is no CUDA)."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def end_processes() -> None:
    """Destroy the process group, if this process joined one, after its last collective; nothing otherwise.

    A process that exits with its group alive can abort at exit (SIGABRT, "terminate called without an active
    exception"): gloo's worker threads still hold finished work while the interpreter shuts down. Destroyed first,
    the group ends cleanly, with one care: gloo releases each finished collective on its own worker thread, which
    takes the GIL to free the work's tensors, and the group's destructor joins that thread while holding the GIL. If
    the worker is still freeing the last collective at that moment, neither ever returns (a finished run that never
    exits, its main thread in ~ProcessGroupGloo and the worker in gil_scoped_acquire). A short sleep, which lets go
    of the GIL, lets the worker finish first."""
    import torch.distributed

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        time.sleep(0.1)
        torch.distributed.destroy_process_group()


def is_first_process() -> bool:
    """Whether this process is the first of those a launcher started (RANK 0), or the only one: the one that says
    what all of them would say alike."""
    return os.environ.get("RANK", "0") == "0"


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system has one), at least 1."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Terminated(BaseException):
    """A SIGTERM (kill, a job scheduler), raised where the command is, as Ctrl-C raises KeyboardInterrupt."""


def terminate(owner: int):
    """The SIGTERM handler of process `owner`: raise `Terminated` there; in a process forked from it (a data
    worker, which inherits the handler), end as SIGTERM ends a process by default."""

    def handler(signum: int, frame) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated()

    return handler
