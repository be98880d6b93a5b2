"""MiniMax's MiniMax-M2 / M2.1 (``minimax_m2``): full attention on every layer with q/k RMSNorms
over the whole projection, and every layer a mixture of 256 experts behind a sigmoid router
with a score-correction bias (a buffer, not a parameter); checkpoints add multi-token-prediction
modules (``num_mtp_modules``) that neither transformers nor vLLM's main model builds.

transformers: ``models/minimax_m2`` (``MiniMaxM2Config``'s ``attribute_map`` reads
``num_experts`` as ``num_local_experts``; each expert is ``intermediate_size`` wide); vLLM:
``vllm/model_executor/models/minimax_m2.py``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import OFF, Modeling, MoeSchema, QkNorm

__all__ = ["ARCHITECTURES", "FAMILIES"]

MINIMAX_M2 = Family(
    "minimax_m2",
    schema=ConfigSchema(
        keys=keys(num_experts=("num_local_experts",)),
        mtp_key="num_mtp_modules",
        defaults=frozen(
            tie_word_embeddings=False,
            num_key_value_heads=8,
            head_dim=128,
            num_experts=256,
            num_experts_per_tok=8,
        ),
    ),
    modeling=Modeling(
        qkv_bias=OFF,
        o_bias=OFF,
        qk_norm=QkNorm(per_head=False),
        moe=MoeSchema(width_key="intermediate_size", e_score_correction_bias=True),
    ),
)

FAMILIES = (MINIMAX_M2,)

ARCHITECTURES = {"MiniMaxM2ForCausalLM": "minimax_m2"}
