"""A process's memory as Linux reports it: fields of /proc/PID/status and /proc/PID/smaps_rollup in MiB, and this
process's resident set and its peak.

Only the standard library is imported here: the serving suite's CTranslate2 probe processes read their peak through
this module and must not load torch or transformers.
"""

import contextlib
import resource


def proc_field_mib(file: str, field: str, pid: int | str = "self") -> float | None:
    """A `field: N kB` line of /proc/PID/`file` in MiB; None where /proc cannot tell."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/{file}") as handle:
            for line in handle:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024  # kB
    return None


def status_mib(field: str, pid: int | str = "self") -> float | None:
    """A memory field of /proc/PID/status (Linux) in MiB (VmHWM: the process's resident peak; VmRSS: its resident
    set now; RssAnon: the part of it that no file backs); None where /proc cannot tell."""
    return proc_field_mib("status", field, pid)


def rollup_mib(field: str, pid: int | str = "self") -> float | None:
    """A field of /proc/PID/smaps_rollup (Linux) in MiB (Pss: the process's share of its resident pages, each page
    divided among the processes that map it, so that the Pss of processes sharing pages sums to the memory they use;
    Pss_Anon: the part that no file backs); None where /proc cannot tell."""
    return proc_field_mib("smaps_rollup", field, pid)


def proc_status_mib(field: str) -> float:
    """A memory field of this process's /proc status in MiB; elsewhere getrusage's ru_maxrss, its peak so far.
    VmHWM, the peak, belongs to the process image and starts afresh at exec; ru_maxrss does not (it keeps the
    high-water mark of the forking parent), so it is only a fallback."""
    value = status_mib(field)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if value is None else value


def current_rss_mib() -> float:
    return proc_status_mib("VmRSS")


def peak_rss_mib() -> float:
    return proc_status_mib("VmHWM")
