"""The module inventory of a language model: every tensor, with its roles and its count.

:func:`linear_modules` lists each projection as the family's modeling code builds it (the
layouts below are data: one tuple of projections per attention and MLP style), with the role
tensor parallelism gives it (:class:`Shard`) and the activation it reads (:class:`Reads`).
:func:`parameter_groups` lists everything else: embeddings, norms, sinks and router biases.
``service.estimator.model.parameters.count_parameters`` adds them up; the reference tests
compare that with ``model.parameters()`` of transformers built on the meta device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.estimator.model.architecture import Architecture
from service.estimator.model.modeling_traits import Attention, LinearMixer, Mlp
from service.estimator.model.shapes import LinearModule, ParameterGroup, Reads, Shard

__all__ = ["linear_modules", "parameter_groups"]


@dataclass(frozen=True)
class _Proj:
    """One projection of a layout: its name, widths (``h``: hidden, ``w``: the block's
    intermediate, ``2w``: fused pair) and roles."""

    name: str
    fan_in: str
    fan_out: str
    shard: Shard
    reads: Reads


# MLP layouts, by style: (name, in, out, shard, reads).
_MLP: dict[Mlp, tuple[_Proj, ...]] = {
    Mlp.GATED: (
        _Proj("gate_proj", "h", "w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("up_proj", "h", "w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("down_proj", "w", "h", Shard.ROW, Reads.MLP_ACT),
    ),
    Mlp.FUSED_GATE_UP: (
        _Proj("gate_up_proj", "h", "2w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("down_proj", "w", "h", Shard.ROW, Reads.MLP_ACT),
    ),
    Mlp.PLAIN: (
        _Proj("c_fc", "h", "w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("c_proj", "w", "h", Shard.ROW, Reads.MLP_ACT),
    ),
    Mlp.PLAIN_FC: (
        _Proj("fc1", "h", "w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("fc2", "w", "h", Shard.ROW, Reads.MLP_ACT),
    ),
    Mlp.PLAIN_DENSE: (
        _Proj("dense_h_to_4h", "h", "w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("dense_4h_to_h", "w", "h", Shard.ROW, Reads.MLP_ACT),
    ),
    Mlp.QWEN_W: (
        _Proj("w1", "h", "w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("w2", "h", "w", Shard.COLUMN, Reads.MLP_INPUT),
        _Proj("c_proj", "w", "h", Shard.ROW, Reads.MLP_ACT),
    ),
}


class _Builder:
    """Collects the modules of one architecture (paths from the family's module names)."""

    def __init__(self, arch: Architecture) -> None:
        self.arch = arch
        names = arch.family.targets.names
        self.all_layers = tuple(range(arch.num_layers))
        self.attn_layers = arch.attention_layers
        self.names = names
        self.base = f"{names.prefix}.{names.layers}.{{i}}"
        self.attn = f"{self.base}.{names.attn}"
        # OPT's fc1/fc2 sit on the layer itself, not in an mlp module.
        self.mlp = f"{self.base}.{names.mlp}" if names.mlp else self.base
        self.out: list[LinearModule] = []

    def add(
        self,
        name: str,
        path: str,
        component: str,
        fan_in: int,
        fan_out: int,
        bias: bool,
        shard: Shard,
        reads: Reads,
        layers: tuple[int, ...] | None = None,
        **kw: object,
    ) -> None:
        layers = self.all_layers if layers is None else layers
        if layers or component in ("lm_head", "embeddings"):
            self.out.append(
                LinearModule(
                    name,
                    path,
                    component,
                    fan_in,
                    fan_out,
                    bias,
                    layers,
                    shard,
                    reads,
                    **kw,  # type: ignore[arg-type]
                )
            )

    def mlp_block(
        self,
        style: Mlp,
        path: str,
        component: str,
        width: int,
        bias: bool,
        layers: tuple[int, ...],
        act: Reads = Reads.MLP_ACT,
    ) -> None:
        h = self.arch.hidden_size
        sizes = {"h": h, "w": width, "2w": 2 * width}
        for p in _MLP[style]:
            reads = act if p.reads is Reads.MLP_ACT else p.reads
            self.add(
                p.name,
                f"{path}.{p.name}",
                component,
                sizes[p.fan_in],
                sizes[p.fan_out],
                bias,
                p.shard,
                reads,
                layers,
            )


def _standard_attention(b: _Builder) -> None:
    """q/k/v/o per attention kind: a layer that reads another's cache has no k/v projections,
    one whose keys serve as values no v_proj (Gemma 4)."""
    a, h, o = b.arch, b.arch.hidden_size, b.names.o
    bias = a.attention_bias
    for kind in a.attention_kinds:
        q, kv = a.num_attention_heads * kind.head_dim, kind.kv_heads * kind.head_dim
        # A gated attention's q_proj also yields the output gate, one value per query channel.
        q_out = 2 * q if a.attn_output_gate else q
        at = kind.layers
        attn = f"{b.base}.cross_attn" if kind.cross else b.attn
        b.add("q_proj", f"{attn}.q_proj", "attention", h, q_out, bias, Shard.COLUMN, _AI, at)
        if kind.own_kv:
            b.add("k_proj", f"{attn}.k_proj", "attention", h, kv, bias, Shard.KV_HEADS, _AI, at)
            if not kind.k_eq_v:
                b.add("v_proj", f"{attn}.v_proj", "attention", h, kv, bias, Shard.KV_HEADS,
                      _AI, at)  # fmt: skip
        b.add(o, f"{attn}.{o}", "attention", q, h, a.attention_out_bias, Shard.ROW, _AO, at)


def _fused_qkv_attention(b: _Builder) -> None:
    a, h, n = b.arch, b.arch.hidden_size, b.names
    q, kv = a.q_proj_size, a.kv_proj_size
    at = b.attn_layers
    b.add(
        n.qkv, f"{b.attn}.{n.qkv}", "attention", h, q + 2 * kv, a.attention_bias,
        Shard.QKV_HEADS, _AI, at,
    )  # fmt: skip
    b.add(n.o, f"{b.attn}.{n.o}", "attention", q, h, a.attention_out_bias, Shard.ROW, _AO, at)


def _qwen_c_attn(b: _Builder) -> None:
    a, h = b.arch, b.arch.hidden_size
    q = a.q_proj_size
    b.add(
        "c_attn",
        f"{b.attn}.c_attn",
        "attention",
        h,
        3 * q,
        a.attention_bias,
        Shard.COLUMN,
        Reads.ATTN_INPUT,
    )
    b.add(
        "c_proj",
        f"{b.attn}.c_proj",
        "attention",
        q,
        h,
        a.attention_out_bias,
        Shard.ROW,
        Reads.ATTN_OUTPUT,
    )


def _mla_attention(b: _Builder) -> None:
    """DeepSeek's latent attention on the attention layers (Kimi-Linear interleaves it with
    linear attention): q (or its low-rank pair), the KV latent with the shared rope key, its
    up-projection and o."""
    a, h = b.arch, b.arch.hidden_size
    mla = a.mla
    assert mla is not None
    heads, bias, at = a.num_attention_heads, a.attention_bias, b.attn_layers
    col, rep = Shard.COLUMN, Shard.REPLICATED
    qk = heads * mla.qk_head_dim
    if mla.q_lora_rank is None:
        b.add("q_proj", f"{b.attn}.q_proj", "attention", h, qk, False, col, _AI, at)
    else:
        r = mla.q_lora_rank
        b.add("q_a_proj", f"{b.attn}.q_a_proj", "attention", h, r, bias, rep, _AI, at)
        b.add("q_b_proj", f"{b.attn}.q_b_proj", "attention", r, qk, False, col, Reads.Q_LATENT,
              at)  # fmt: skip
    b.add("kv_a_proj_with_mqa", f"{b.attn}.kv_a_proj_with_mqa", "attention", h,
          mla.latent_width, bias, rep, _AI, at)  # fmt: skip
    b.add("kv_b_proj", f"{b.attn}.kv_b_proj", "attention", mla.kv_lora_rank,
          heads * (mla.qk_nope_head_dim + mla.v_head_dim), False, col, Reads.KV_LATENT,
          at)  # fmt: skip
    b.add("o_proj", f"{b.attn}.o_proj", "attention", heads * mla.v_head_dim, h,
          a.attention_out_bias, Shard.ROW, _AO, at)  # fmt: skip
    idx = a.indexer
    if idx is not None and mla.q_lora_rank is not None:
        # DeepSeek sparse attention's indexer (vLLM: wq_b column-parallel, wk and weights_proj
        # fused and replicated).
        at, rep, path = idx.layers, Shard.REPLICATED, f"{b.attn}.indexer"
        b.add("wq_b", f"{path}.wq_b", "attention", mla.q_lora_rank, idx.n_heads * idx.head_dim,
              False, Shard.COLUMN, Reads.Q_LATENT, at)  # fmt: skip
        b.add("wk", f"{path}.wk", "attention", h, idx.head_dim, False, rep, _AI, at)
        b.add("weights_proj", f"{path}.weights_proj", "attention", h, idx.n_heads, False, rep,
              _AI, at)  # fmt: skip


def _kda(b: _Builder) -> None:
    """Kimi Delta Attention (Kimi-Linear's linear layers, under ``self_attn``): q/k/v, the
    forget gate's low-rank pair, the beta projection, the output gate's low-rank pair and o
    (vLLM: the wide projections split by output, o by input, the low-rank inputs replicated)."""
    lin, h = b.arch.linear_attention, b.arch.hidden_size
    assert lin is not None
    at, attn = b.arch.linear_attention_layers, b.attn
    qkv, d = lin.value_dim, lin.value_head_dim
    col, rep = Shard.COLUMN, Shard.REPLICATED
    for name, path, fan_in, fan_out, shard in (
        ("q_proj", f"{attn}.q_proj", h, qkv, col),
        ("k_proj", f"{attn}.k_proj", h, qkv, col),
        ("v_proj", f"{attn}.v_proj", h, qkv, col),
        ("f_a_proj", f"{attn}.forget_gate.f_a_proj", h, d, rep),
        ("f_b_proj", f"{attn}.forget_gate.f_b_proj", d, qkv, col),
        ("b_proj", f"{attn}.b_proj", h, lin.num_value_heads, col),
        ("g_a_proj", f"{attn}.g_a_proj", h, d, rep),
        ("g_b_proj", f"{attn}.g_b_proj", d, qkv, col),
    ):
        b.add(name, path, "attention", fan_in, fan_out, False, shard, _AI, at)
    b.add("o_proj", f"{attn}.o_proj", "attention", qkv, h, False, Shard.ROW, _AO, at)


def _linear_attention(b: _Builder) -> None:
    """Gated DeltaNet (Qwen3-Next's ``linear_attn``): q/k/v/z and b/a input projections
    split by head under TP, the output projection by its input (vLLM's layer)."""
    lin, h = b.arch.linear_attention, b.arch.hidden_size
    assert lin is not None
    layers = b.arch.linear_attention_layers
    path = f"{b.base}.linear_attn"
    inputs: tuple[tuple[str, int], ...]
    if b.arch.family.modeling.linear_attention_split:  # Qwen3.5: one projection per output
        inputs = (
            ("in_proj_qkv", 2 * lin.key_dim + lin.value_dim),
            ("in_proj_z", lin.value_dim),
            ("in_proj_b", lin.num_value_heads),
            ("in_proj_a", lin.num_value_heads),
        )
    else:
        inputs = (
            ("in_proj_qkvz", 2 * lin.key_dim + 2 * lin.value_dim),
            ("in_proj_ba", 2 * lin.num_value_heads),
        )
    for name, width in inputs:
        b.add(name, f"{path}.{name}", "attention", h, width, False, Shard.COLUMN, _AI, layers)
    b.add("out_proj", f"{path}.out_proj", "attention", lin.value_dim, h, False, Shard.ROW, _AO,
          layers)  # fmt: skip


_AI, _AO = Reads.ATTN_INPUT, Reads.ATTN_OUTPUT

_ATTENTION: dict[Attention, Callable[[_Builder], None]] = {
    Attention.STANDARD: _standard_attention,
    Attention.FUSED_QKV: _fused_qkv_attention,
    Attention.QWEN_C_ATTN: _qwen_c_attn,
    Attention.MLA: _mla_attention,
}


def _experts(b: _Builder) -> None:
    a, moe, schema = b.arch, b.arch.moe, b.arch.family.modeling.moe
    assert moe is not None and schema is not None
    h = a.hidden_size
    sparse = moe.layers
    router = schema.router_name
    where = b.mlp if schema.in_mlp else b.base
    b.add(
        router,
        f"{where}.{router}",
        "router",
        h,
        moe.num_experts,
        moe.router_bias,
        Shard.REPLICATED,
        Reads.MLP_INPUT,
        sparse,
        is_nn_linear=schema.router_is_nn_linear,
        dtype=moe.router_dtype,
    )
    e, k, w = moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size
    for name, fan_in, fan_out, shard, reads in (
        ("experts.gate_up_proj", h, 2 * w, Shard.COLUMN, Reads.MLP_INPUT),
        ("experts.down_proj", w, h, Shard.ROW, Reads.EXPERT_ACT),
    ):
        b.add(
            name,
            f"{where}.{name}",
            "experts",
            fan_in,
            fan_out,
            moe.expert_bias,
            shard,
            reads,
            sparse,
            per_layer=e,
            active_per_layer=k,
            is_nn_linear=False,
        )
    if moe.shared_expert_intermediate_size:
        bias = a.mlp_bias and schema.shared_bias_follows_mlp_bias
        b.mlp_block(
            Mlp.GATED,
            f"{b.mlp}.{schema.shared_path}",
            "shared_experts",
            moe.shared_expert_intermediate_size,
            bias,
            sparse,
            act=Reads.SHARED_ACT,
        )
    if moe.shared_expert_gate:
        b.add(
            "shared_expert_gate",
            f"{b.mlp}.shared_expert_gate",
            "router",
            h,
            1,
            False,
            Shard.REPLICATED,
            Reads.MLP_INPUT,
            sparse,
        )


def _per_layer_embeddings(b: _Builder) -> None:
    """Gemma 4's per-layer embeddings: a projection of the token embedding into every layer's
    slot, and per layer a gate from the hidden state and a projection back (vLLM: the first
    column-parallel, the per-layer ones replicated)."""
    a = b.arch
    h, p = a.hidden_size, a.per_layer_input
    prefix = a.family.targets.names.prefix
    b.add("per_layer_model_projection", f"{prefix}.per_layer_model_projection", "embeddings",
          h, a.num_layers * p, False, Shard.COLUMN, _AI, ())  # fmt: skip
    rep = Shard.REPLICATED
    b.add("per_layer_input_gate", f"{b.base}.per_layer_input_gate", "mlp", h, p, False, rep,
          Reads.MLP_INPUT)  # fmt: skip
    b.add("per_layer_projection", f"{b.base}.per_layer_projection", "mlp", p, h, False, rep,
          Reads.MLP_ACT)  # fmt: skip


def linear_modules(arch: Architecture) -> tuple[LinearModule, ...]:
    """Every linear projection of the language model, lm_head last."""
    b = _Builder(arch)
    _ATTENTION[arch.family.modeling.attention](b)
    if arch.linear_attention is not None:
        if arch.family.modeling.linear_mixer is LinearMixer.KDA:
            _kda(b)
        else:
            _linear_attention(b)
    mlp, width, bias = arch.family.modeling.mlp, arch.intermediate_size, arch.mlp_bias
    wide = frozenset(arch.wide_mlp_layers)
    normal = tuple(i for i in arch.dense_mlp_layers if i not in wide)
    b.mlp_block(mlp, b.mlp, "mlp", width, bias, normal)
    if wide:  # Gemma 4 E2B: the KV-shared layers' MLP is twice as wide
        b.mlp_block(mlp, b.mlp, "mlp", 2 * width, bias, tuple(sorted(wide)))
    if arch.per_layer_input:
        _per_layer_embeddings(b)
    if arch.moe is not None:
        _experts(b)
    if arch.embed_width != arch.hidden_size:
        # OPT-350m: the embedding's width differs from the decoder's; two projections map it.
        base = f"{arch.family.targets.names.prefix}"
        e, h = arch.embed_width, arch.hidden_size
        rep = Shard.REPLICATED
        b.add("project_in", f"{base}.project_in", "embeddings", e, h, False, rep, _AI, ())
        b.add("project_out", f"{base}.project_out", "lm_head", h, e, False, rep, Reads.FINAL, ())
    b.add(
        "lm_head",
        "lm_head",
        "lm_head",
        arch.embed_width,
        arch.vocab_size,
        arch.lm_head_bias,
        Shard.VOCAB,
        Reads.FINAL,
        (),
        tied=arch.tie_word_embeddings,
    )
    return tuple(b.out)


def parameter_groups(arch: Architecture) -> tuple[ParameterGroup, ...]:
    """Every non-linear tensor: embeddings, norms, sinks, router correction biases."""
    names = arch.family.targets.names
    all_layers = tuple(range(arch.num_layers))
    base = f"{names.prefix}.{names.layers}.{{i}}"
    attn = f"{base}.{names.attn}"
    h = arch.hidden_size
    norm_numel = h * (2 if arch.norm_bias else 1)
    weighted = arch.family.modeling.norm_weights
    out = [
        ParameterGroup(
            "embed_tokens",
            f"{names.prefix}.{names.embed}.weight",
            "embeddings",
            arch.embedding_rows * arch.embed_width,
            vocab_rows=arch.embedding_rows,
        )
    ]
    if arch.position_embeddings:
        # A learned absolute position table, whole on every rank (vLLM's OPT: nn.Embedding).
        out.append(
            ParameterGroup(
                "embed_positions",
                f"{names.prefix}.embed_positions.weight",
                "embeddings",
                arch.position_embeddings * h,
            )
        )
    for name in (arch.layer_norm_names or arch.family.modeling.layer_norms) if weighted else ():
        out.append(ParameterGroup(name, f"{base}.{name}", "norms", norm_numel, all_layers))
    qk = arch.family.modeling.qk_norm
    if arch.qk_norm is not None and qk is not None:
        per_head = arch.qk_norm == "per_head"
        q_name, k_name = qk.names
        cross_only = arch.family.modeling.cross_attention
        for kind in arch.attention_kinds:
            if cross_only and not kind.cross:
                continue  # Llama 3.2 Vision: only the cross-attention layers norm q and k
            attn = f"{base}.cross_attn" if kind.cross else f"{base}.{names.attn}"
            widths = (2 if qk.bias else 1) * (kind.head_dim if per_head else 1)
            q_numel = widths if per_head else widths * arch.num_attention_heads * kind.head_dim
            k_numel = widths if per_head else widths * kind.kv_heads * kind.head_dim
            at = kind.layers
            out.append(ParameterGroup(q_name, f"{attn}.{q_name}", "norms", q_numel, at))
            if kind.own_kv:  # a layer reading another's cache has no k_norm (Gemma 4)
                out.append(ParameterGroup(k_name, f"{attn}.{k_name}", "norms", k_numel, at))
    if arch.cross_attention_layers:
        out.append(
            ParameterGroup(
                "cross_attn_gates", base, "attention", 1, arch.cross_attention_layers, per_layer=2
            )
        )
    if arch.per_layer_input:
        p = arch.per_layer_input
        out.append(
            ParameterGroup(
                "embed_tokens_per_layer",
                f"{names.prefix}.embed_tokens_per_layer.weight",
                "embeddings",
                arch.per_layer_vocab * arch.num_layers * p,
                vocab_rows=arch.per_layer_vocab,
            )
        )
        out.append(
            ParameterGroup(
                "per_layer_projection_norm", f"{names.prefix}.per_layer_projection_norm", "norms", p
            )
        )
        out.append(
            ParameterGroup(
                "post_per_layer_input_norm",
                f"{base}.post_per_layer_input_norm",
                "norms",
                h,
                all_layers,
            )
        )
    lin = arch.linear_attention
    if lin is not None and arch.family.modeling.linear_mixer is LinearMixer.KDA:
        lin_layers = arch.linear_attention_layers
        for name, component, numel, dtype in (
            ("conv1d", "attention", 3 * lin.value_dim * lin.conv_kernel, None),  # q, k, v convs
            ("forget_gate.dt_bias", "attention", lin.value_dim, "float32"),
            ("forget_gate.A_log", "attention", lin.num_value_heads, None),
            ("o_norm", "norms", lin.value_head_dim, None),  # gated RMSNorm over one head
        ):
            out.append(
                ParameterGroup(name, f"{attn}.{name}", component, numel, lin_layers, dtype=dtype)
            )
    elif lin is not None:
        lin_layers = arch.linear_attention_layers
        path = f"{base}.linear_attn"
        for name, component, numel in (
            ("conv1d", "attention", lin.conv_dim * lin.conv_kernel),  # depthwise, no bias
            ("dt_bias", "attention", lin.num_value_heads),
            ("A_log", "attention", lin.num_value_heads),
            ("norm", "norms", lin.value_head_dim),  # gated RMSNorm over one value head
        ):
            out.append(ParameterGroup(name, f"{path}.{name}", component, numel, lin_layers))
    if arch.mla is not None:
        if arch.mla.q_lora_rank is not None:
            out.append(
                ParameterGroup(
                    "q_a_layernorm",
                    f"{attn}.q_a_layernorm",
                    "norms",
                    arch.mla.q_lora_rank,
                    arch.attention_layers,
                )
            )
        out.append(
            ParameterGroup(
                "kv_a_layernorm",
                f"{attn}.kv_a_layernorm",
                "norms",
                arch.mla.kv_lora_rank,
                arch.attention_layers,
            )
        )
    if arch.indexer is not None and arch.mla is not None and arch.mla.q_lora_rank is not None:
        out.append(
            ParameterGroup(
                "indexer.k_norm", f"{attn}.indexer.k_norm", "norms", 2 * arch.indexer.head_dim,
                arch.indexer.layers,
            )
        )  # fmt: skip
    if arch.attention_sinks:
        out.append(
            ParameterGroup(
                "sinks", f"{attn}.sinks", "attention", arch.num_attention_heads, all_layers
            )
        )
    schema = arch.family.modeling.moe
    if arch.moe is not None and schema is not None and schema.router_scales:
        where = f"{base}.{names.mlp}" if schema.in_mlp else base
        e, moe_layers = arch.moe.num_experts, arch.moe.layers
        out.append(ParameterGroup("router.scale", f"{where}.router.scale", "router", h, moe_layers))
        out.append(
            ParameterGroup(
                "router.per_expert_scale",
                f"{where}.router.per_expert_scale",
                "router",
                e,
                moe_layers,
            )
        )
    if arch.moe is not None and arch.moe.e_score_correction_bias:
        out.append(
            ParameterGroup(
                "e_score_correction_bias",
                f"{base}.{names.mlp}.gate.e_score_correction_bias",
                "router",
                arch.moe.num_experts,
                arch.moe.layers,
                is_buffer=True,
                dtype="float32",
            )
        )
    if weighted and arch.final_norm:
        final = names.final_norm
        out.append(ParameterGroup(final, f"{names.prefix}.{final}", "norms", norm_numel))
    return tuple(out)
