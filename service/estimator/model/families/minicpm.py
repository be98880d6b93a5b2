"""OpenBMB's MiniCPM (``minicpm``: MiniCPM-1B/2B, MiniCPM4-0.5B/8B), remote code that
transformers does not ship (``trust_remote_code``).

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
"""

from __future__ import annotations

from service.estimator.model.families.base import frozen
from service.estimator.model.families.llama import LLAMA
from service.estimator.model.llamacpp_names import LlamaCppType
from service.estimator.model.modeling_traits import OFF, MoeSchema

__all__ = ["ARCHITECTURES", "FAMILIES"]

MINICPM = LLAMA.derive(
    "minicpm",
    mlp_bias=OFF,
    type=LlamaCppType.OTHER,
    moe=MoeSchema(width_key="intermediate_size", zero_experts_means_dense=True),
    defaults=frozen(tie_word_embeddings=True, attention_bias=False, num_experts=0),
)

FAMILIES = (MINICPM,)

ARCHITECTURES = {"MiniCPMForCausalLM": "minicpm"}
