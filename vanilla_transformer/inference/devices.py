"""Where a translator runs and in what precision: one `Placement` (device, precision, threads) that the commands,
the server and `load_translator` take whole, and the one place where its values are checked.

    Placement()                                   # CUDA when there is one, else the CPU; its precision (`auto`)
    Placement(device="cuda:1", dtype="float16")   # the torch engine on the second card, in float16
    Placement(device="cuda", compute_type="int8_float16")   # the CTranslate2 engine on the first card

`dtype` is the torch engine's (`auto`: bfloat16 on a CUDA card that has it, else float16; float32 on the CPU) and
`compute_type` the CTranslate2 engine's, in its own names (`default`: the model's, float32 as exported; on CUDA
`float16`, `int8_float16`, ...). A value that the device or the engine cannot run is a `PlacementError` naming the
option."""

from dataclasses import dataclass, replace

import torch

from ..errors import is_whole

DEVICES = "auto, cpu, cuda or cuda:N"
DEVICE_HELP = f"where the model runs: {DEVICES} (auto: CUDA when present, else the CPU)"
DTYPE_HELP = ("the torch engine's precision (auto: bfloat16 on a CUDA card that computes it, else float16 there; "
              "float32 on the CPU)")  # fmt: skip
MOST_THREADS = 1024  # a thread pool of millions fails to start, deep in OpenMP or the tokenizer
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class PlacementError(ValueError):
    """A device, precision or thread count that cannot be used here; `option` names it (device, dtype,
    compute_type, inter_threads), `value` is what was asked and `reason` why it cannot be."""

    def __init__(self, option: str, value, reason: str):
        super().__init__(f"{option}={value!r}: {reason}")
        self.option, self.value, self.reason = option, value, reason


@dataclass(frozen=True)
class Placement:
    device: str = "auto"  # auto: CUDA when present, else the CPU; cpu; cuda; cuda:N
    dtype: str = "auto"  # the torch engine's precision: auto, float32, bfloat16, float16
    compute_type: str = "default"  # the CTranslate2 engine's (ctranslate2's names)
    threads: int | None = None  # CPU threads on each batch (None: the engine's own choice)
    inter_threads: int = 1  # CTranslate2: batches translated at once, each on `threads` threads

    def __post_init__(self):
        for option in ("threads", "inter_threads"):
            value = getattr(self, option)
            if value is None and option == "threads":
                continue
            if not is_whole(value) or not 1 <= value <= MOST_THREADS:
                raise PlacementError(option, value, f"expected a whole number from 1 to {MOST_THREADS}")

    def for_process(self, local_rank: int) -> "Placement":
        """The placement of process `local_rank` of several on one machine: the GPU of that number where the
        device is a GPU (auto on a machine with CUDA, or cuda), else this one."""
        if self.device in ("auto", "cuda") and torch.cuda.is_available():
            return replace(self, device=f"cuda:{local_rank}")
        return self

    def torch_device(self) -> torch.device:
        """The device the torch engine runs on."""
        name = self.device
        if name == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            device = torch.device(name)
        except (RuntimeError, TypeError) as error:
            raise PlacementError("device", name, f"expected {DEVICES}") from error
        if device.type not in ("cpu", "cuda") or (device.type == "cpu" and device.index not in (None, 0)):
            raise PlacementError("device", name, f"expected {DEVICES}")
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                raise PlacementError("device", name, "CUDA is not available here (torch sees no CUDA device)")
            if device.index is not None and device.index >= count:
                raise PlacementError(
                    "device", name, f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
                )
        return device

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        """The torch engine's precision on `device`."""
        if self.dtype == "auto":
            if device.type == "cpu":
                return torch.float32
            return torch.bfloat16 if has_bfloat16(device) else torch.float16
        if self.dtype not in DTYPES:
            raise PlacementError("dtype", self.dtype, f"expected auto, {', '.join(DTYPES)}")
        if self.dtype == "float16" and device.type == "cpu":
            raise PlacementError("dtype", self.dtype, "the torch engine does not run float16 on the CPU: use "
                                 "float32 or bfloat16 there, float16 on CUDA")  # fmt: skip
        if self.dtype == "bfloat16" and device.type == "cuda" and not has_bfloat16(device):
            raise PlacementError("dtype", self.dtype, f"the CUDA card of {device} has no bfloat16: use float16")
        return DTYPES[self.dtype]

    def ctranslate2_device(self, ctranslate2) -> tuple[str, int]:
        """The CTranslate2 engine's device and device index."""
        if self.device == "auto":
            return ("cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"), 0
        kind, _, index = self.device.partition(":")
        if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index not in ("", "0")):
            raise PlacementError("device", self.device, f"expected {DEVICES}")
        count = ctranslate2.get_cuda_device_count() if kind == "cuda" else 1
        if kind == "cuda" and count == 0:
            raise PlacementError("device", self.device, "CTranslate2 sees no CUDA device here")
        if index and int(index) >= count:
            raise PlacementError("device", self.device, f"this machine has {count} CUDA device(s)")
        return kind, int(index or 0)

    def check_compute_type(self, ctranslate2, device: str) -> None:
        """A `PlacementError` where CTranslate2 cannot compute in `compute_type` on `device`."""
        supported = ctranslate2.get_supported_compute_types(device)
        if self.compute_type not in ("default", "auto") and self.compute_type not in supported:
            kinds = ", ".join(sorted(supported))
            raise PlacementError("compute_type", self.compute_type, f"CTranslate2 on {device} computes in {kinds}")

    def place(self, model):
        """`model` on the torch engine's device, in its precision, with its CPU threads: the one place a torch model
        is put where a placement says."""
        self.check_torch()
        device = self.torch_device()
        dtype = self.torch_dtype(device)
        if self.threads:
            torch.set_num_threads(self.threads)
        return model.to(device=device, dtype=dtype)

    def check_torch(self) -> None:
        """A `PlacementError` for what only the CTranslate2 engine takes."""
        if self.inter_threads != 1:
            raise PlacementError("inter_threads", self.inter_threads, "batches in parallel need the CTranslate2 engine")
        if self.compute_type != "default":
            raise PlacementError("compute_type", self.compute_type, "the CTranslate2 engine's precision: the torch "
                                 "engine takes dtype")  # fmt: skip

    def check_ctranslate2(self) -> None:
        """A `PlacementError` for what only the torch engine takes."""
        if self.dtype != "auto":
            raise PlacementError("dtype", self.dtype, "the torch engine's precision: the CTranslate2 engine takes "
                                 "compute_type (float16, int8_float16, ...)")  # fmt: skip


def has_bfloat16(device: torch.device) -> bool:
    """Whether the CUDA card of `device` computes in bfloat16 natively (compute capability 8.0 and later), not
    emulated."""
    return torch.cuda.get_device_capability(device) >= (8, 0)


DEFAULT_PLACEMENT = Placement()  # CUDA when present, else the CPU, each engine's precision there


def describe(device: torch.device, dtype: torch.dtype) -> str:
    """`cuda:0, bfloat16`: where and in what a torch model runs, as the cards and logs say it."""
    return f"{device}, {str(dtype).removeprefix('torch.')}"


def runs_on_cuda(translator, placement: Placement, version: str) -> None:
    """One decoding step on the card, which loads the CUDA libraries CTranslate2 was built against: its wheels are
    built for one CUDA major version (4.x: 12), and on a machine with another its first matrix product fails. Named
    as the device's problem here, rather than part-way through a translation."""
    try:
        translator.translate_batch([["</s>"]], max_decoding_length=1)
    except RuntimeError as error:
        reason = f"CTranslate2 {version} cannot run on this machine's CUDA ({error}); the CPU can (--device cpu)"
        raise PlacementError("device", placement.device, reason) from error
