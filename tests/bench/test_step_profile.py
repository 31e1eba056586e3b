"""A training step's profile, as the GPU and speed suites take it: each kernel in its group by its name (the kernels
of the H200 trace that the GPU training issue names among them), and on a CPU trace the groups and idle adding up to
the step."""

import math

import pytest

from bench.common import models
from bench.common.measure import training_batch, training_flops
from bench.common.step_profile import GROUPS, group_of, profile_step
from bench.gpu.step import Step
from bench.gpu.suite import SIZES

NAMES = {
    "triton_per_fused__to_copy_add_native_dropout_backward_native_layer_norm_backward_12": (
        "fused elementwise and normalisation"
    ),
    "triton_poi_fused_add_copy_view_3": "fused elementwise and normalisation",
    "triton_red_fused__log_softmax_backward_data_nll_loss_backward_5": "loss",
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor<float, 4>>": "optimizer",
    "void multi_tensor_apply_kernel<TensorListMetadata<1>, LpNormFunctor<float, 1>>": "optimizer",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1": "GEMM and attention",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT": "GEMM and attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x64x128": "GEMM and attention",
    "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::TensorIterator&)>": (
        "copies and casts"
    ),
    "Memcpy HtoD (Pageable -> Device)": "copies and casts",
    "aten::addmm": "GEMM and attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "GEMM and attention",
    "aten::native_layer_norm_backward": "fused elementwise and normalisation",
    "aten::_to_copy": "copies and casts",
    "aten::_fused_adam_": "optimizer",
    "aten::threshold_backward": "fused elementwise and normalisation",
    "aten::uniform_": "random numbers",
    "aten::bernoulli_": "random numbers",
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>": (
        "fused elementwise and normalisation"
    ),
    "aten::empty_strided": "other",
    # eager CUDA's log_softmax forward and backward
    "void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, (anonymous namespace)::"
    "LogSoftMaxForwardEpilogue>(float*, float const*, int)": "loss",
    "void (anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, (anonymous namespace)::"
    "LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)": "loss",
    # compiled kernels named after the aten operator they feed: fused elementwise work, not attention
    "triton_poi_fused__scaled_dot_product_efficient_attention_constant_pad_nd_7": "fused elementwise and normalisation",
    "cpp_fused__scaled_dot_product_flash_attention_for_cpu_clone_2": "fused elementwise and normalisation",
    "triton_tem_fused_addmm_4": "GEMM and attention",
}


@pytest.mark.parametrize("name", NAMES)
def test_each_kernel_goes_to_its_group_by_its_name(name):
    assert group_of(name) == NAMES[name]


def test_a_cpu_steps_groups_and_idle_add_up_to_the_step():
    size = SIZES["smoke"]
    batch = training_batch(size, (4, 8, 8), "cpu")
    flops = training_flops(models.build("vanilla", size, "sdpa", "cpu", dropout=size["dropout"]), batch)
    step = Step("vanilla", size, "cpu", batch, None)
    found = profile_step(step, "cpu", 2, flops, peak=1e12)
    assert set(found.groups) == {*GROUPS, "idle"}
    assert math.isclose(sum(found.groups.values()), found.step_ms, rel_tol=1e-6)
    for group in ("GEMM and attention", "fused elementwise and normalisation", "loss", "optimizer", "random numbers"):
        assert found.groups[group] > 0, group
    gemm_seconds = found.groups["GEMM and attention"] / 1e3
    assert found.gemm_ceiling == pytest.approx(flops / gemm_seconds / 1e12)


def test_the_ranges_mirrored_on_the_gpu_are_not_counted_as_kernel_time():
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from bench.common.step_profile import device_busy

    def event(name, microseconds, annotation=False, device=DeviceType.CUDA):
        span = SimpleNamespace(elapsed_us=lambda: microseconds)
        return SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation, time_range=span)

    events = [
        event("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 30.0),
        event("triton_poi_fused_add_copy_view_3", 5.0),
        event("CompiledFunction", 100.0, annotation=True),  # spans the two kernels above
        event("aten::mm", 40.0, device=DeviceType.CPU),
    ]
    assert device_busy(events) == {"GEMM and attention": 30.0, "fused elementwise and normalisation": 5.0}
