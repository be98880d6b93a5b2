"""vLLM's own terms: paged KV groups, rotary tables, the MLA workspace, the profiling run."""

from __future__ import annotations

from service.estimator.engines.vllm_kv import vllm_groups
from service.estimator.inference import InferenceRequest, stage_figures
from service.estimator.kv_cache import MlaCache, stage_kv_layouts
from service.estimator.model import Architecture, read_config
from service.estimator.weights import Placement, weight_layout
from tests.estimator.conftest import LLAMA_8B, catalog_architecture
from tests.estimator.test_kv_cache import GEMMA3


def test_vllm_groups_gemma3_70_slots() -> None:
    a = read_config(GEMMA3)
    (stage,) = stage_kv_layouts(a, 2, 1, 1, MlaCache.LATENT)
    assert (stage.full_layers, stage.sliding_layers) == (10, 52)
    g = vllm_groups(stage, 16)
    assert (g.group_size, g.full_groups, g.sliding_groups, g.slots) == (10, 1, 6, 70)
    # at max_model_len 8192 <= window - 1 + 8192 a window saves nothing but costs a block:
    assert g.blocks_per_request(8192, 8192) == 512 + 6 * 513
    # a long context: the window layers stop at min(1023 + 8192, len) tokens + 1 block
    assert g.blocks_per_request(65536, 8192) == 4096 + 6 * (-(-9215 // 16) + 1)


def _vllm_weights_per_gpu(arch: Architecture, tp: int) -> int:
    req = InferenceRequest(
        architecture=arch,
        engine="vllm",
        engine_options={"max_model_len": 8192},
        tensor_parallel_size=tp,
    )
    return stage_figures(req)[0].weights


def test_vllm_mla_model_holds_flashinfer_mla_workspace_on_every_gpu() -> None:
    """vLLM validates every MLA backend of the platform's list by importing it, and
    vllm/v1/attention/backends/mla/flashinfer_mla.py allocates a 128 MiB workspace at import:
    each GPU of DeepSeek-V2-Lite holds its weights, the yarn rope cache and that workspace."""
    hidden, vocab, layers, heads = 2048, 102400, 27, 16  # DeepSeek-V2-Lite's config.json
    rope_rows, rope_dim, kv_lora, moe_width, experts = 163840, 64, 512, 1408, 64
    workspace = 128 * 2**20  # vLLM's FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE
    rope = rope_rows * rope_dim * 2  # one shared bf16 cos/sin cache
    for tp in (1, 2, 4):
        attention = (
            heads * (128 + rope_dim) // tp * hidden  # q_proj, column-parallel
            + (kv_lora + rope_dim) * hidden  # kv_a_proj_with_mqa, replicated
            + heads * (128 + 128) // tp * kv_lora  # kv_b_proj, column-parallel
            + hidden * heads * 128 // tp  # o_proj, row-parallel
            + 2 * hidden
            + kv_lora  # norms
        )
        dense_mlp = 3 * 10944 // tp * hidden  # layer 0 (first_k_dense_replace 1)
        moe = experts * 3 * moe_width // tp * hidden + 3 * 2 * moe_width // tp * hidden
        bf16 = layers * attention + dense_mlp + (layers - 1) * moe + 2 * vocab // tp * hidden
        router = (layers - 1) * experts * hidden * 4  # the inventory prices the gate in fp32
        expected = 2 * (bf16 + hidden) + router + rope + workspace
        assert _vllm_weights_per_gpu(catalog_architecture("deepseek-ai/DeepSeek-V2-Lite"), tp) == (
            expected
        )
    # No MLA, no workspace: Llama-3.1-8B holds its weights and its rope cache only.
    llama = catalog_architecture(LLAMA_8B)
    rope_llama = 131072 * 128 * 2
    layout = weight_layout(llama, None, 1, 1, Placement(vocab_padding=64))
    assert _vllm_weights_per_gpu(llama, 1) == layout.per_stage[0] + rope_llama


def test_a_conv3d_towers_profiled_image_holds_its_frames() -> None:
    """The pixel values vLLM's dummy image holds, as transformers' image processors shape them:
    Qwen2-VL's (models/qwen2_vl/image_processing_qwen2_vl.py) returns one row per 14 x 14
    patch of C x temporal_patch_size x 14 x 14 values, the still image repeated over the
    patch's 2 frames; SigLIP's (Gemma 3) returns the C x side x side image once."""
    qwen = catalog_architecture("Qwen/Qwen2.5-VL-7B-Instruct").vision
    assert qwen is not None
    patches = (3584 // 14) ** 2  # the 3584-px image of max_pixels 12,845,056
    assert qwen.pixel_values_per_image == patches * (3 * 2 * 14 * 14) == 77_070_336
    gemma = catalog_architecture("google/gemma-3-12b-it").vision
    assert gemma is not None
    assert gemma.pixel_values_per_image == 3 * 896 * 896
