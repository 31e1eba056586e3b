"""The commands' own process-wide settings for the CPU: how glibc's allocator keeps freed memory, and float32
denormals flushed to zero. The library changes no process setting on import, on `train()` or on `generate()`; only
`vanilla-transformer train` applies these, before it trains, and the commands that decode with the torch engine on
the CPU (translate, evaluate, score, serve) the allocator's, before they load the model."""

import ctypes

import torch


def apply_cpu_process_settings(cpu: bool) -> None:
    """`keep_freed_memory_mapped` and `flush_denormals`, when the run trains on the CPU (`--cpu`, or no GPU)."""
    if cpu or not torch.cuda.is_available():  # the device Accelerator(cpu=args.cpu) trains on is the CPU
        keep_freed_memory_mapped()
        flush_denormals()


def apply_decoding_process_settings(engine: str, placement) -> None:
    """`keep_freed_memory_mapped` where a command decodes with the torch engine on the CPU (`placement`: the
    `Placement` of its flags). Each decoding step allocates and frees tensors of a few MiB (a beam's logits and their
    scores: 160 x 37,000 floats, 23 MiB, at the base size), which glibc maps afresh each time. Measured on 2 cores (AMD
    EPYC), `generate()` of 32 sentences and 32 new tokens, beam 5, in fresh processes taken alternately: the base size
    5.30 and 5.54 s without, 4.59 and 4.19 s with; the tiny size 341, 372 and 311 ms without, 269, 269 and 246 ms with.
    Peak RSS at the base size 1,078 to 1,094 MiB without, 1,139 to 1,170 MiB with. Numbers are not changed: denormals
    are left as they are."""
    if engine == "torch" and placement.torch_device().type == "cpu":
        keep_freed_memory_mapped()


def keep_freed_memory_mapped() -> bool:
    """Ask glibc to keep freed memory instead of returning it to the kernel; returns whether it could.

    On the CPU every training step allocates and frees the same large tensors (the (tokens, vocab) logits and their
    gradient are 128 MiB at 4096 tokens and 8000 types). glibc serves blocks that large with fresh mmap calls and
    unmaps them when freed, so each step pays a page fault per 4 KiB page touched (docs/training.md gives the measured
    step times). Served from the heap and never trimmed, the pages stay mapped from one step to the next. This is
    the commands' own process setting (the same as MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...), applied by the
    command line; importing the package or calling `train()` or `generate()` changes nothing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: leave the allocator alone
        return False
    m_trim_threshold, m_mmap_max, m_arena_max = -1, -4, -8  # from <malloc.h>
    # one arena for every thread: what the streamed data's reader thread frees, a training step can reuse (each
    # thread's own arena would keep its own peak, never given back)
    return all(
        mallopt(option, value) for option, value in ((m_mmap_max, 0), (m_trim_threshold, 2**31 - 1), (m_arena_max, 1))
    )


def flush_denormals() -> bool:
    """Make the CPU treat float32 denormals (magnitudes below 1.2e-38) as zero; returns whether it could.

    A trained model's attention weights hold denormals: the softmax of well-separated scores underflows into them
    (none at initialisation). x86 CPUs handle denormal operands in microcode, several times slower, so float32
    training slows down as the model learns (measured in training/recipes/RESULTS.md). Flushed to zero, they cost
    nothing, and they change no sum of the sizes a model works with. This is the command's own process setting,
    like the allocator's, applied by the command line: importing the package or calling `train()` changes nothing.
    """
    return torch.set_flush_denormal(True)
