"""Where a training step's time goes: a torch.profiler trace of a few steps, its kernel time grouped by what each
kernel does, and the GEMM-only ceiling (the step's FLOPs over its GEMM and attention time alone, a share of the peak:
the utilisation the step would reach if everything around its matrix products were free).

On CUDA the trace's device events are the kernels (and the copies and fills the runtime issues): each is put in a
group by its name, and idle is the step's time in which no kernel ran. On a CPU the operators are the kernels: each
operator's own time (its children's left out) is put in a group by its name, and idle is the step's time outside
every operator (Python, the autograd engine's bookkeeping, the profiler)."""

from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

MATRIX = "gemm cutlass xmma nvjet cublas aten::mm aten::addmm aten::bmm matmul flash fmha cudnn attention sdpa"
FUSED = "layer_norm dropout masked_fill"
COPIES = "copy memcpy memset cast fill zero_ aten::to contiguous aten::cat"
ELEMENTWISE = "elementwise reduce add mul relu threshold where div sub sum mean exp sqrt pow neg"
# (group, substrings of a kernel's or an operator's name, lower-cased); the first group with a match takes it
RULES = (
    # log_softmax's CUDA kernels are cunn_SoftMaxForward/Backward<..., LogSoftMax...Epilogue>: only a loss takes it
    ("loss", ("cross_entropy", "log_softmax", "logsoftmax", "nll_loss", "logsumexp")),
    ("optimizer", ("adam", "multi_tensor_apply", "_foreach", "clip_grad", "lpnorm")),
    # the compiler's kernels: its GEMM templates (max-autotune's), else fused elementwise work, whatever aten
    # operator they are named after (a kernel that pads the attention mask for sdpa is named after sdpa)
    ("GEMM and attention", ("triton_tem_",)),
    ("fused elementwise and normalisation", ("triton_", "cpp_fused")),
    ("GEMM and attention", tuple(MATRIX.split())),
    ("fused elementwise and normalisation", tuple(FUSED.split())),
    # drawn apart from the kernel that uses them: the CPU's dropout masks (a fused dropout kernel is fused above)
    ("random numbers", ("uniform_", "bernoulli", "normal_", "random_", "philox")),
    ("copies and casts", tuple(COPIES.split())),
    ("fused elementwise and normalisation", tuple(ELEMENTWISE.split())),
)
GROUPS = (
    "GEMM and attention",
    "fused elementwise and normalisation",
    "loss",
    "optimizer",
    "copies and casts",
    "random numbers",
    "other",
)
# the profiler's own ranges: steps and the optimizer's record_function around its step, not kernels
RANGES = ("ProfilerStep", "Optimizer.step", "Optimizer.zero_grad", "## ", "Torch-Compiled Region")


def group_of(name: str) -> str:
    """The group a kernel or operator belongs to, by its name."""
    lowered = name.lower()
    return next((group for group, keys in RULES if any(key in lowered for key in keys)), "other")


@dataclass(frozen=True)
class StepProfile:
    step_ms: float  # wall clock per step, under the profiler
    groups: dict  # group -> milliseconds of kernel time per step, "idle" included
    gemm_ceiling: float  # the step's FLOPs / its GEMM and attention time / the peak

    def as_dict(self) -> dict:
        return {"step_ms": self.step_ms, "groups": self.groups, "gemm_ceiling": self.gemm_ceiling}


def profile_step(step, device: str, steps: int, flops: int, peak: float) -> StepProfile:
    """`steps` calls of `step` (warmed up already) under torch.profiler, grouped per step."""
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    synchronize()
    with profile(activities=activities) as trace:
        for _ in range(steps):
            step()
        synchronize()
    events = [e for e in trace.events() if not e.name.startswith(RANGES)]
    wall = wall_us(trace.events())
    busy = device_busy(events) if cuda else operator_busy(events)
    groups = {group: busy.get(group, 0.0) / steps / 1e3 for group in GROUPS}
    groups["idle"] = max(0.0, wall / steps / 1e3 - sum(groups.values()))
    return StepProfile(wall / steps / 1e3, groups, gemm_ceiling(flops, groups, peak))


def gemm_ceiling(flops: int, groups: dict, peak: float) -> float:
    """The step's FLOPs over its GEMM and attention time (`groups`, ms per step), as a share of `peak` (FLOP/s)."""
    gemm_seconds = groups["GEMM and attention"] / 1e3
    return flops / gemm_seconds / peak if gemm_seconds > 0 else float("nan")


def wall_us(events) -> float:
    """The trace's span in microseconds: from its first event's start to its last event's end."""
    spans = [(e.time_range.start, e.time_range.end) for e in events]
    return max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0


def device_busy(events) -> dict:
    """Microseconds of CUDA kernel time per group (overlapping kernels on several streams counted once each). The
    ranges that the profiler mirrors on the GPU's timeline for a `record_function` (user annotations: the compiled
    region's, the optimizer's) span kernels and are not kernels themselves."""
    busy = {}
    for event in events:
        if event.device_type == DeviceType.CUDA and not event.is_user_annotation:
            group = group_of(event.name)
            busy[group] = busy.get(group, 0.0) + event.time_range.elapsed_us()
    return busy


def operator_busy(events) -> dict:
    """Microseconds of operator time per group on the CPU: each operator's own time, its children's left out. Only
    operators count (aten's, and compiled kernels); the autograd engine's nodes and other ranges are overhead."""
    busy = {}
    for event in events:
        kernel = event.name.startswith("aten::") or "fused" in event.name
        if event.device_type == DeviceType.CPU and kernel and event.self_cpu_time_total > 0:
            group = group_of(event.name)
            busy[group] = busy.get(group, 0.0) + event.self_cpu_time_total
    return busy


# the columns of a profiled step in the suite's tables, after the columns that name the step
PROFILE_COLUMNS = "step ms | " + " | ".join(GROUPS) + " | idle | GEMM-only ceiling"


def profile_cells(found: dict) -> str:
    """A profiled step's cells under PROFILE_COLUMNS, from `StepProfile.as_dict()`."""
    groups = " | ".join(f"{found['groups'][group]:.2f}" for group in (*GROUPS, "idle"))
    return f"{found['step_ms']:.2f} | {groups} | {100 * found['gemm_ceiling']:.1f}%"
