"""Giving memory back to the system: the pages of the datasets' Arrow files that whole-column passes leave mapped, and
the heap that data preparation freed."""

import ctypes
import os

import datasets

MADV_DONTNEED = 4  # from <sys/mman.h> (Linux)


def release_file_pages(splits: datasets.DatasetDict) -> int:
    """Drop from this process's page tables the pages of the splits' Arrow files that earlier reads left mapped;
    returns the bytes of mapping released. The datasets library reads its files through read-only memory maps, and a
    pass over a whole column (the checks, the BPE's sample, the pairs' lengths) leaves nearly every page of the file
    resident there: the kernel reads ahead around each page touched, and opening an Arrow stream walks every record
    batch. Those pages count as the process's memory until the kernel reclaims them. `madvise(MADV_DONTNEED)` on a
    read-only file mapping only unmaps them: the data stays in the page cache and a later read maps it again. On
    other systems than Linux, nothing is done."""
    paths = {os.path.realpath(entry["filename"]) for split in splits.values() for entry in split.cache_files}
    if not paths or not os.path.exists("/proc/self/maps"):
        return 0
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    released = 0
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)  # address range, permissions, offset, device, inode, path
            if len(fields) < 6 or "w" in fields[1] or fields[5].rstrip("\n") not in paths:
                continue
            start, end = (int(address, 16) for address in fields[0].split("-"))
            if madvise(start, end - start, MADV_DONTNEED) == 0:
                released += end - start
    return released


def trim_freed_memory() -> bool:
    """Give the kernel back the heap memory that preparing the data used and freed (the BPE's sample and its
    training, the checks' arrays); returns whether glibc did. Once `keep_freed_memory_mapped` has turned glibc's own
    trimming off, that memory would stay with the process beside the training steps' own, which do not reuse most of
    it. Elsewhere than glibc, nothing is done."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False
