"""OpenBMB's MiniCPM (``minicpm``: MiniCPM-1B/2B, MiniCPM4-0.5B/8B), remote code that
transformers does not ship (``trust_remote_code``), and MiniCPM3 (``minicpm3``), which it does.

The decoder is Llama's: q/k/v/o without biases (``head_dim = hidden_size //
num_attention_heads``), a SwiGLU MLP ``gate_proj``/``up_proj``/``down_proj``, two RMSNorms per
layer and a final one. Its muP scalars (``scale_emb`` on the embedding output,
``scale_depth / sqrt(num_hidden_layers)`` on each residual branch, ``hidden_size /
dim_model_base`` before the head) multiply activations and add no tensor. The remote
``MiniCPMConfig`` ties the head to the embedding unless the config says otherwise.

vLLM: ``vllm/model_executor/models/minicpm.py`` (``MiniCPMAttention``: ``QKVParallelLinear``
and ``RowParallelLinear`` without bias; ``MiniCPMMLP``; ``MiniCPMForCausalLM`` shares
``embed_tokens`` as the head when ``tie_word_embeddings``). ``num_experts`` above 0
(MiniCPM-MoE-8x2B) puts ``MiniCPMMoE`` on every layer instead of the MLP: a router ``gate``
without bias and ``num_experts`` gated experts ``intermediate_size`` wide; 0 (the default)
builds the dense MLP.

MiniCPM3 (transformers ``models/minicpm3``; vLLM ``minicpm3.py``) keeps the dense MLP and the
muP scalars and puts DeepSeek-V2's latent attention in place of q/k/v: ``q_a_proj`` (bias as
``attention_bias``), ``q_a_layernorm``, ``q_b_proj``, ``kv_a_proj_with_mqa`` (bias as
``attention_bias``), ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``. ``MiniCPM3Config`` derives
``v_head_dim`` from ``hidden_size // num_attention_heads`` when the config gives none, and ties
the head by default. What each engine caches differs: SGLang (``MiniCPM3AttentionMLA``, an MLA
pool) and transformers 5 the latent; vLLM runs it as standard ``Attention`` over every head,
``qk_head_dim`` wide with V padded to it (``minicpm3.py``: not one of its MLA model types);
llama.cpp caches K (``qk_head_dim``) and V (``v_head_dim``) of every head
(``src/models/minicpm3.cpp``).
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen
from service.estimator.model.families.llama import LLAMA
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import OFF, Attention, Flag, Modeling, MoeSchema

__all__ = ["ARCHITECTURES", "FAMILIES"]

MINICPM = LLAMA.derive(
    "minicpm",
    mlp_bias=OFF,
    type=LlamaCppType.OTHER,
    moe=MoeSchema(width_key="intermediate_size", zero_experts_means_dense=True),
    defaults=frozen(tie_word_embeddings=True, attention_bias=False, num_experts=0),
)

MINICPM3 = Family(
    "minicpm3",
    schema=ConfigSchema(
        defaults=frozen(tie_word_embeddings=True, attention_bias=False, mlp_bias=False),
        v_head_dim_from_heads=True,
    ),
    modeling=Modeling(attention=Attention.MLA, mlp_bias=Flag.config("mlp_bias"), vllm_mla=False),
    llamacpp=LlamaCppNames(mla_latent=False),
)

FAMILIES = (MINICPM, MINICPM3)

ARCHITECTURES = {"MiniCPMForCausalLM": "minicpm", "MiniCPM3ForCausalLM": "minicpm3"}
