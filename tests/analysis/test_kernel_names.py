"""Kernel classification from names: real names from the fixtures and public conventions."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from stepscope.analysis.kernel_names import (
    CATEGORIES,
    PRECISIONS,
    KernelClass,
    classify_kernel,
    classify_names,
    signature_head,
)

# copies of ../shared/fixtures files (tests/data/PROVENANCE.md), by file name
FIXTURE_DATA = Path(__file__).resolve().parents[1] / "data"

# (name, category, tensor_cores, precision)
CASES: list[tuple[str, str, bool | None, str | None]] = [
    # --- h100/gpt_bf16_adamw (H100, bf16 autocast): the top kernels by time ---
    ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", "gemm", True, None),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", "gemm", True, None),
    ("nvjet_sm90_tst_128x160_64x5_4x1_v_bz_NTT", "gemm", True, None),
    (("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda("
     "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)"
     "#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()"
     "() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::"
     "gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const"
     "::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const"
     "::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})"), "memory", False, "bf16"),
    (("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16,"
     " at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)"
     "#1}>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::"
     "BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda("
     "float, float)#1}>, unsigned int, c10::BFloat16, 4, 4>)"), "reduction", False, "bf16"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
     "attention", True, "fp16/bf16"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "attention", True, "fp16/bf16"),
    (("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda(float)#1}, std::array<char*, 2ul>)"), "memory", False, "bf16"),
    (("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
     "(at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*>("
     "at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::"
     "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, "
     "bool, float*, float*)"), "optimizer", False, "fp32"),
    (("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, 256u, false, "
     "true, false>(long, long, float const*, float const*, float const*, float const*, float*, float*)"),
     "normalization", False, "fp32"),
    (("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >"
     "(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"), "elementwise", False, "bf16"),
    (("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, float, c10::BFloat16, at::native::"
     "(anonymous namespace)::LogSoftMaxForwardEpilogue, long, 8>(c10::BFloat16*, c10::BFloat16 const*, long)"),
     "softmax", False, "bf16"),
    (("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*, unsigned int, "
     "float const*)"), "attention", False, None),
    (("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::detail::radix::"
     "policy_hub<long, at::cuda::cub::detail::OpaqueType<8>, unsigned long long>::Policy1000>(unsigned long long*)"),
     "sort", False, None),
    (("void at::native::(anonymous namespace)::compute_grad_weight<float, long>(long const*, float const*, long const*, "
     "long, long, long const*, long const*, at::AccumulateType<float, true>::type*, long)"), "embedding", False, "fp32"),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
     "embedding", False, None),
    (("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, "
     "float const*, long const*, float const*, bool, long, long, long, long)"), "reduction", False, "fp32"),
    # --- h100/cnn_fp32_sync (fp32, TF32 off, cudnn.benchmark off): FFT convolution ---
    ("void pointwise_mult_and_sum_complex<float2, 8, 4>(float2*, float2*, float2*, int, int, int, int, int, float2)",
     "conv", False, "fp32"),
    (("sm80_xmma_gemm_cf32cf32_f32f32_cf32_nt_n_tilesize64x64x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_execute_kernel__5x_"
     "cublas"), "gemm", False, "fp32"),
    (("void DSE::regular_fft_clip<1, 2, 128, 16, 32, 1, float, float, float2>(float*, float2*, int, int3, int3, int, int3, "
     "int3, int, int, int, int, int, float, float, bool, int, cudnnActivationStruct, float*, float*)"), "conv", False, "fp32"),
    (("void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, int, int, int, int, int, "
     "cudnn::reduced_divisor, bool, int2, int, int)"), "conv", False, "fp32"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(cutlass_80_simt_sgemm_64x64_8x5_nt_align1::Params)",
     "gemm", False, "fp32"),
    (("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_"
     "cublas"), "gemm", False, "fp32"),
    (("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize256x64x8_stage3_warpsize2x2x1_g1_ffma_aligna4_"
     "alignc4_execute_kernel__5x_cudnn"), "conv", False, "fp32"),
    (("void cudnn::winograd_nonfused::winogradWgradDelta4x4<float, float>(cudnn::winograd_nonfused::WinogradDeltaParams<"
     "float, float>)"), "conv", False, "fp32"),
    (("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*, int, float*, float const*, "
     "kernel_grad_params, unsigned long long, int, float, int, int, int, int)"), "conv", False, "fp32"),
    ("void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float, int>(float const*, long const*, int, int)",
     "reduction", False, "fp32"),
    (("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, "
     "false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*)"), "gemm", False, "fp32"),
    ("void scal_kernel<float, float, 1, true, 6, 5, 5, 3>(cublasTransposeParams<float>, float const*, float*, float const*)",
     "elementwise", False, "fp32"),
    # --- hta/ (A100): TF32 CUTLASS/cuDNN, batch norm, NCCL, fbgemm embeddings ---
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "communication", False, "fp32"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "communication", False, None),
    (("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::"
     "nchw2nhwc_params_t<float>, float const*, float*)"), "memory", False, "fp32"),
    (("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float, cudnnTensorStruct, "
     "float const*)"), "normalization", False, "fp32"),
    (("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_"
     "nn_align4::Params)"), "gemm", True, "tf32"),
    (("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
     "tensor16x8x8_execute_kernel_cudnn_train"), "conv", True, "tf32"),
    (("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4>("
     "cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4::Params)"), "conv", True, "tf32"),
    (("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS"
     "_4gemm9GemmShapeILi128ELi128ELi32EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimizedINS_11MatrixShapeILi128"
     "ELi32EEENS_10tfloat32_tE"), "conv", True, "tf32"),
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "conv", False, "fp32"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "gemm", False, "fp32"),
    ("ampere_gcgemm_64x64_nt", "gemm", False, "fp32"),
    (("void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>("
     "at::GenericPackedTensorAccessor<c10::Half, 1ul, at::RestrictPtrTraits, long>)"), "embedding", False, "fp16"),
    (("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<c10::Half, float, c10::Half, "
     "2ul, 32>(at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, long>)"), "embedding", False, "fp16"),
    ("void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long, long, long)",
     "embedding", False, "fp32"),
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)", "embedding", False, None),
    (("void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, float const*, int, int,"
     " unsigned char*, bool)"), "elementwise", False, "fp8"),
    (("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(float*, at::native::"
     "(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>, int, int, int, int)"),
     "memory", False, "fp32"),
    (("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int,"
     " int, bool const*, int, bool)"), "softmax", False, "fp32"),
    ("triton_poi_fused_add_cos_sin_0", "elementwise", False, None),
    (("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA2_"
     "GRVWB2_GSUAMB_ISA90a_IU1_K1"), "gemm", True, "fp32"),
    # --- public naming conventions ---
    ("nvjet_tst_128x64_64x8_1x2_h_bz_TNN", "gemm", True, None),
    ("nvjet_sm100_tst_64x16_64x16_2x4_2cta_h_bz_splitK_TNT", "gemm", True, None),
    (("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
     "cublas"), "gemm", True, "bf16"),
    (("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_execute_kernel__5x_"
     "cublas"), "gemm", True, "tf32"),
    (("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x256x32_stage3_warpsize2x4x1_tensor16x8x16_execute_kernel__5x_"
     "cublas"), "gemm", True, "fp16"),
    ("ampere_sgemm_128x64_nn", "gemm", False, "fp32"),
    ("volta_sgemm_128x64_nn", "gemm", False, "fp32"),
    ("volta_h884gemm_128x128_ldg8_nn", "gemm", True, "fp16"),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", "gemm", True, "fp16"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "gemm", True, "fp16"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm", True, "bf16"),
    (("void cutlass::Kernel<cutlass_80_tensorop_h16816gemm_256x128_32x3_nn_align8>(cutlass_80_tensorop_h16816gemm_256x128_"
     "32x3_nn_align8::Params)"), "gemm", True, "fp16"),
    ("void cutlass::Kernel<cutlass_75_tensorop_s1688gemm_256x128_32x2_nt_align8>(Params)", "gemm", True, "fp16"),
    (("void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnt_align8_"
     "warpspecialized_cooperative_epi_tma>(Params)"), "gemm", True, "bf16"),
    (("void cutlass::device_kernel<cutlass3x_sm90_tensorop_s64x128x32gemm_e4m3_e4m3_f32_bf16_bf16_64x128x128_1x1x1_0_tnn_"
     "align16_warpspecialized_pingpong_fp8_fastaccum_epi_tma>(Params)"), "gemm", True, "fp8"),
    (("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
     "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>("
     "pytorch_flash::Flash_fwd_params)"), "attention", True, "bf16"),
    ("flash_fwd_kernel", "attention", True, "fp16/bf16"),
    (("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 2, 2, false, false, "
     "cutlass::half_t> >(Flash_bwd_params)"), "attention", True, "fp16"),
    (("fmha_cutlassF_f16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, "
     "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)"), "attention", True, "fp16"),
    ("implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>", "conv", False, "fp32"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication", False, "fp32"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication", False, "bf16"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication", False, None),
    (("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, false>(int, float, "
     "c10::Half const*)"), "normalization", False, "fp16"),
    ("void at::native::batch_norm_collect_statistics_kernel<at::native::Var, float, float, float, int>(Params)",
     "normalization", False, "fp32"),
    (("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>("
     "at::cuda::detail::TensorInfo<float, unsigned int>)"), "embedding", False, "fp32"),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::Half, float, long>(long const*)",
     "embedding", False, "fp16"),
    ("triton_red_fused__to_copy_sum_1", "reduction", False, None),
    ("triton_per_fused_native_layer_norm_0", "normalization", False, None),
    ("triton_per_fused__softmax_3", "softmax", False, None),
    ("triton_tem_fused_mm_2", "gemm", None, None),
    ("triton_tem_fused_addmm_relu_5", "gemm", None, None),
    ("triton_tem_fused_convolution_0", "conv", None, None),
    ("Memcpy DtoD (Device -> Device)", "memory", False, None),
    ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0", "gemm", True, "bf16"),
    ("void my_custom_kernel<int>(int*)", "other", None, None),
]


@pytest.mark.parametrize(("name", "category", "tc", "precision"), CASES, ids=[c[0][:60] for c in CASES])
def test_classify(name: str, category: str, tc: bool | None, precision: str | None) -> None:
    assert classify_kernel(name) == KernelClass(category, tc, precision)


def test_values_are_from_the_closed_sets() -> None:
    for name, category, _, precision in CASES:
        assert category in CATEGORIES
        assert precision is None or precision in PRECISIONS


def test_signature_head_drops_parameters_not_template_arguments() -> None:
    assert signature_head("void f<float, g(int)>(double*, int)") == "void f<float, g(int)>"
    assert signature_head("void (anonymous namespace)::k<float>(int)") == "void {anon}::k<float>"
    assert signature_head("nvjet_tst_128x64_64x8_1x2_h_bz_TNN") == "nvjet_tst_128x64_64x8_1x2_h_bz_TNN"


def test_classify_names_once_per_distinct_name() -> None:
    names = ["ampere_sgemm_128x64_nn", "flash_fwd_kernel", "ampere_sgemm_128x64_nn"]
    out = classify_names(names)
    assert [c.category for c in out] == ["gemm", "attention", "gemm"]
    assert out[0] is out[2]


@pytest.mark.parametrize("rel", ["h100/gpt_bf16_adamw.pt.trace.json.gz", "h100/cnn_fp32_sync.pt.trace.json.gz"])
def test_every_h100_fixture_kernel_is_classified(rel: str) -> None:
    """No kernel of the H100 traces is left in 'other', and matmul kernels say their TC use."""
    path = FIXTURE_DATA / Path(rel).name
    if not path.exists():
        pytest.skip(f"fixture {rel} not present")
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    time: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "kernel":
            time[e["name"]] += e["dur"]
    classes = dict(zip(time, classify_names(list(time))))
    assert all(c.category != "other" for c in classes.values())
    assert all(c.tensor_cores is not None for c in classes.values())
    by_cat: Counter[str] = Counter()
    for name, t in time.items():
        by_cat[classes[name].category] += t
    total = sum(time.values())
    if rel.startswith("h100/gpt"):
        # bf16 GPT step: nvjet GEMMs and cuDNN flash attention are the tensor-core time
        assert by_cat["gemm"] / total == pytest.approx(0.293, abs=0.001)
        assert by_cat["attention"] / total == pytest.approx(0.085, abs=0.001)
    else:
        # fp32 CNN with cuDNN FFT convolutions and no tensor cores at all
        assert by_cat["conv"] / total == pytest.approx(0.694, abs=0.001)
        assert not any(c.tensor_cores for c in classes.values())


def test_hopper_xmma_tf32_kernels_use_tensor_cores() -> None:
    # xmma names list the input types first (f32f32) and the math type after (tf32f32):
    # these are TF32 tensor-core kernels, not fp32 SIMT ones (seen on H200, TF32 enabled)
    from stepscope.analysis.kernel_names import classify_kernel

    for name, cat in (
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
         "execute_segment_k_off_kernel__5x_cublas", "gemm"),
        ("sm80_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_"
         "stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn", "conv"),
    ):
        k = classify_kernel(name)
        assert (k.category, k.tensor_cores, k.precision) == (cat, True, "tf32")
