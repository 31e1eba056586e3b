"""What accelerate's engines change for a run. Plain DDP (and a single process) keeps the whole model on every
process. FSDP (1 and 2) and DeepSpeed ZeRO shard it, or wrap it in an engine of their own, so that:

- the engine a run trains with is the one its launch asked for, on as many processes (`check_engine`);
- FSDP2 puts the tied embedding matrix (§3.4) and every module that holds it in one group (`shard_tied_weights`);
- DeepSpeed is given the batch size and clipping it asks for (`fit_deepspeed_config`), and told which micro-batch
  ends an update (`deepspeed_boundary`);
- evaluation, averaging and the saved folder use a whole copy of the weights on each process (`whole_copy`),
  gathered as accelerate documents: `get_state_dict` on every process, whole on the main one;
- a checkpoint records the engine and the process count it was written with (`engine_record`), so that a resume
  under another engine is refused in one line;
- FSDP1's optimizer has its state before a resume loads it (`create_optimizer_state`)."""

import contextlib
import copy
import os

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, InitProcessGroupKwargs, extract_model_from_parallel

from ...modeling.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .checkpoints import load_saved_weights

ENGINE_VARIABLES = {"FSDP": "ACCELERATE_USE_FSDP", "DeepSpeed": "ACCELERATE_USE_DEEPSPEED"}


def requested_engine() -> str | None:
    """The sharding engine `accelerate launch` (its config file) asked for: "FSDP", "DeepSpeed" or None."""
    for engine, variable in ENGINE_VARIABLES.items():
        if os.environ.get(variable, "false").lower() == "true":
            return engine
    return None


def process_group_kwargs(cpu: bool) -> list:
    """accelerate's kwargs handlers for the process group. DeepSpeed on a machine without a GPU (DS_ACCELERATOR=cpu)
    needs the gloo backend named: accelerate would otherwise count each process as a run of its own."""
    if requested_engine() == "DeepSpeed" and not cpu and not torch.cuda.is_available():
        return [InitProcessGroupKwargs(backend="gloo")]
    return []


def skip_deepspeeds_inference_op() -> None:
    """Under DeepSpeed on CPU processes, before it starts its process group: DeepSpeed then compiles its shared-memory
    all-reduce, a C++ op (half a minute of two cores on its first run, and a compiler needed), which only its
    inference's tensor parallelism calls (`inference_all_reduce`), never ZeRO's training. Marked as not buildable
    here, it is skipped, as DeepSpeed skips it where it cannot build it; training reduces with torch.distributed
    either way."""
    if requested_engine() != "DeepSpeed":
        return
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":  # DS_ACCELERATOR=cpu, or no GPU
        return

    compatible = getattr(deepspeed.ops, "__compatible_ops__", None)  # DeepSpeed's own table of buildable ops
    if isinstance(compatible, dict):
        compatible["deepspeed_shm_comm"] = False


def check_engine(accelerator: Accelerator, cpu: bool) -> None:
    """A ValueError where the launch asked for another engine (an accelerate config with FSDP or DeepSpeed) or more
    processes (WORLD_SIZE) than accelerate trains with."""
    engine = requested_engine()
    running = {DistributedType.FSDP: "FSDP", DistributedType.DEEPSPEED: "DeepSpeed"}.get(accelerator.distributed_type)
    if engine and engine != running:
        if engine == "DeepSpeed":
            hint = "leave out --cpu (DeepSpeed runs on the CPU with DS_ACCELERATOR=cpu)" if cpu else "install deepspeed"
        else:
            hint = "accelerate runs FSDP on GPUs only; launch on GPUs, or on CPUs with examples/accelerate/zero3.yaml"
        asked = f"the launch's accelerate config asks for {engine}, but this run would train without it"
        raise ValueError(f"{asked}; {hint}")
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > accelerator.num_processes:
        raise ValueError(
            f"the launcher started {launched} processes, but accelerate trains with {accelerator.num_processes}, each "
            "on its own: without a GPU, pass --cpu (torchrun --nproc_per_node N -m vanilla_transformer.cli train ... "
            "--cpu)"
        )


def shards_model(accelerator: Accelerator) -> bool:
    """Whether the prepared model is sharded or wrapped by an engine (FSDP, DeepSpeed) rather than whole (DDP)."""
    return accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)


def engine_record(accelerator: Accelerator) -> dict:
    """The engine a checkpoint is written with, and over how many processes (recorded in trainer_state.json)."""
    record = {"processes": accelerator.num_processes, "engine": "DDP" if accelerator.num_processes > 1 else "none"}
    if accelerator.distributed_type == DistributedType.FSDP:
        plugin = accelerator.state.fsdp_plugin
        record.update(engine=f"FSDP{plugin.fsdp_version}", state_dict_type=plugin.state_dict_type.name)
    elif accelerator.distributed_type == DistributedType.DEEPSPEED:
        record.update(engine="DeepSpeed", zero_stage=accelerator.state.deepspeed_plugin.zero_stage)
    return record


def create_optimizer_state(accelerator: Accelerator, optimizer: torch.optim.Optimizer) -> None:
    """Before a resume under FSDP1 with sharded state dicts: give an optimizer that has not stepped its state.
    accelerate reads that checkpoint's optimizer state into the state the optimizer has (`FSDP.optim_state_dict` as
    the template, where its FSDP2 path initialises the state first), so without this Adam's moments would come back
    empty and the resumed run would go on otherwise. The state is made as torch's `get_optimizer_state_dict` makes
    it: one step on zero gradients at learning rate 0, which moves no weight; the checkpoint then overwrites it."""
    optimizer = getattr(optimizer, "optimizer", optimizer)  # the optimizer inside accelerate's wrapper
    if accelerator.distributed_type != DistributedType.FSDP:
        return
    plugin = accelerator.state.fsdp_plugin
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    sharded = plugin.fsdp_version == 1 and plugin.state_dict_type.name != "FULL_STATE_DICT"
    if not sharded or optimizer.state or any(parameter.grad is not None for parameter in parameters):
        return
    rates = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    for parameter in parameters:
        if parameter.requires_grad:
            parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate


def describe_engine(record: dict) -> str:
    """`engine_record` in words: "FSDP2 (SHARDED_STATE_DICT) on 2 processes", "one process"."""
    processes = record.get("processes", 1)
    if record.get("engine", "none") == "none":
        return "one process"
    detail = f" ({record['state_dict_type']})" if "state_dict_type" in record else ""
    detail = f" ZeRO-{record['zero_stage']}" if "zero_stage" in record else detail
    return f"{record['engine']}{detail} on {processes} processes"


def check_resume_engine(checkpoint: str, recorded: dict | None, accelerator: Accelerator) -> None:
    """Refuse a checkpoint written under another engine or process count (checkpoints without a record pass)."""
    current = engine_record(accelerator)
    if recorded is not None and recorded != current:
        raise ValueError(
            f"--resume-from {checkpoint}: the checkpoint was written by {describe_engine(recorded)}, this run trains "
            f"with {describe_engine(current)}; resume it under the launch that wrote it (the same accelerate config "
            "and process count)"
        )


def shard_tied_weights(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """FSDP2: shard the modules that hold one tied matrix (the shared embeddings and the pre-softmax projection of
    §3.4, or the target embedding and the projection alone) as one group each, before accelerate wraps the layers.
    accelerate's own wrapping puts the input embedding and the output projection in a group and leaves the other
    holders to the root, which FSDP2 refuses ("shared with a parameter already managed by another FSDP group")."""
    if not getattr(accelerator, "is_fsdp2", False):
        return
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    holders = {}  # parameter -> the modules that hold it themselves
    for module in model.modules():
        for parameter in module.parameters(recurse=False):
            holders.setdefault(id(parameter), []).append(module)
    plugin = accelerator.state.fsdp_plugin
    mesh = getattr(accelerator, "torch_device_mesh", None)
    for group in (modules for modules in holders.values() if len(modules) > 1):
        fully_shard(
            group,
            # used at the start of the forward pass (the embeddings) and at its end (the projection): kept gathered
            reshard_after_forward=False,
            mp_policy=plugin.mixed_precision_policy or MixedPrecisionPolicy(),
            offload_policy=plugin.cpu_offload,
            mesh=mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)] if mesh is not None else None,
        )


def fit_deepspeed_config(accelerator: Accelerator, clip_norm: float) -> None:
    """Under DeepSpeed, before `prepare`: the values its config leaves to the program. Token-budget batches have no
    fixed size, so each micro-batch counts as one (`train_micro_batch_size_per_gpu`, which DeepSpeed uses only for
    its logs); clipping is --clip-norm (0: none), as under DDP; ZeRO-3 gathers whole weights when asked for them; the
    communication buffers are sized from d_model."""
    if accelerator.distributed_type != DistributedType.DEEPSPEED:
        return
    if accelerator.mixed_precision != "no":
        raise ValueError(
            f"--mixed-precision {accelerator.mixed_precision} under DeepSpeed: its engine keeps the model's weights in "
            f"{accelerator.mixed_precision}, so the saved folder would be rounded; train in float32 under DeepSpeed, "
            "or use FSDP2 (examples/accelerate/fsdp2.yaml), which keeps float32 weights"
        )
    config = accelerator.state.deepspeed_plugin.deepspeed_config
    if config.get("train_micro_batch_size_per_gpu", "auto") == "auto":
        config["train_micro_batch_size_per_gpu"] = 1
    if config.get("gradient_clipping", "auto") == "auto":
        config["gradient_clipping"] = clip_norm
    zero = config.setdefault("zero_optimization", {})
    zero["stage3_gather_16bit_weights_on_model_save"] = True
    # left unset, DeepSpeed's buffers take its defaults (ZeRO-3: a bucket of 5e8 float32 numbers, 1.9 GiB, on every
    # process, whatever the model's size); "auto" lets accelerate size them from d_model, as it does for its models
    for key in ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"):
        zero.setdefault(key, "auto")


@contextlib.contextmanager
def deepspeed_boundary(accelerator: Accelerator, last: bool):
    """Under DeepSpeed, tell the engine whether this micro-batch's backward pass ends the update: its
    `accelerator.backward` steps the optimizer there (the loop's own `optimizer.step()` is then a no-op)."""
    if accelerator.distributed_type != DistributedType.DEEPSPEED:
        yield
        return
    accelerator.sync_gradients = last
    try:
        yield
    finally:
        accelerator.sync_gradients = True


def full_weights(accelerator: Accelerator, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole weights, gathered by accelerate's `get_state_dict` (called on every process): complete on
    the main process, the tied copies left out as in a saved folder."""
    weights = accelerator.get_state_dict(model) or {}  # ZeRO-3 gives None off the main process
    tied = getattr(extract_model_from_parallel(model), "all_tied_weights_keys", None) or {}
    return {name: value for name, value in weights.items() if name not in tied}


def whole_copy(accelerator: Accelerator, model: torch.nn.Module) -> VanillaTransformerForConditionalGeneration:
    """A whole, unsharded copy of a sharded model on each process, holding its current weights, for what needs every
    weight at once: beam search, averaging, `save_pretrained`. Every process must call it (it gathers). Building it
    draws nothing from the random generators, so that a resumed run's dropout masks stay those of an uninterrupted
    one; it is dropped after use, so that it takes no memory through the updates."""
    weights = full_weights(accelerator, model)
    source = extract_model_from_parallel(model)
    with torch.random.fork_rng(devices=[]):
        copied = VanillaTransformerForConditionalGeneration(copy.deepcopy(source.config))
    copied.generation_config = copy.deepcopy(source.generation_config)
    copied.to(accelerator.device)
    if accelerator.is_main_process:
        misfit = load_saved_weights(copied, weights)
        if misfit:
            raise RuntimeError(f"the gathered weights do not fit the model {misfit}")
    copied.tie_weights()
    if accelerator.num_processes > 1:  # the main process's copy to the others, tensor by tensor
        seen = set()
        for tensor in copied.state_dict().values():
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                torch.distributed.broadcast(tensor, src=0)
    return copied
