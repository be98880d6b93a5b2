"""What every serving engine answers, and how its options are declared and checked.

An engine is one subclass of :class:`Engine` in its own module, registered in
``engines/__init__.py``. It declares its options as data (:class:`Option`: type, bounds,
default, description, the command-line flag it mirrors) and answers, for a serving setup:
how much of the GPU its budget may use, what it places next to the weights, what its
profiling run or its kernels reserve beyond them, its memory outside the allocator, what one
sequence costs, the capacity it reports at start-up, and when it refuses to start. The
inference estimator calls these and asks no engine by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from service.estimator.engines.overhead import OverheadTerms, framework_overhead
from service.estimator.errors import InvalidRequest
from service.estimator.kv_cache import MlaCache
from service.estimator.memo import memoized
from service.estimator.parallel import ExpertLayout
from service.estimator.units import GIB, normalize_dtype
from service.estimator.weights import Placement

if TYPE_CHECKING:
    from service.estimator.checkpoint import CheckpointWeights
    from service.estimator.engines.serving import ServingSetup, Stage
    from service.estimator.formats import WeightFormat
    from service.estimator.forward import ForwardCoefficients
    from service.estimator.gpu import GpuSpec
    from service.estimator.kv_cache import KvLayout
    from service.estimator.model import Architecture
    from service.estimator.result import Capacity
    from service.estimator.weights import WeightLayout

__all__ = [
    "CliKind",
    "DataParallelPlan",
    "DecidedBy",
    "DtypeChoice",
    "Engine",
    "EngineContext",
    "EngineSettings",
    "Option",
    "StageArgs",
    "StageBuild",
    "WeightOffload",
    "WeightSplit",
    "activation_dtype",
    "estimate_options",
    "tp_sizes_dividing_widths",
]

OptionValue = float | int | bool | str


def estimate_options(declared: tuple[Option, ...]) -> tuple[Option, ...]:
    """The declared options that are engine options of an estimate (role ``option``)."""
    return tuple(o for o in declared if o.role == "option")


def activation_dtype(arch: Architecture, fmt: WeightFormat) -> str:
    """The dtype activations run in: a plain format's own; for a quantized one the 16-bit type
    the format or the checkpoint names (bf16 if none)."""
    if not fmt.quantized:
        return fmt.name
    for candidate in (fmt.dense_dtype, normalize_dtype(arch.dtype)):
        if candidate in ("bf16", "fp16"):
            return candidate
    return "bf16"


@memoized
def tp_sizes_dividing_widths(arch: Architecture, vocab_padding: int) -> tuple[int, ...]:
    """TP sizes whose column/row-parallel layers split evenly: the heads rule, plus the dense
    MLP width, the routed experts' width and the vocabulary padded to ``vocab_padding`` (the
    ``divide`` assertions of vLLM's parallel layers, which SGLang's copies keep)."""
    padded_vocab = -(-arch.vocab_size // vocab_padding) * vocab_padding
    widths = [padded_vocab]
    if arch.num_dense_layers:
        widths.append(arch.intermediate_size)
    if arch.moe is not None:
        widths.append(arch.moe.expert_intermediate_size)
    return tuple(t for t in arch.valid_tensor_parallel_sizes if all(w % t == 0 for w in widths))


@dataclass(frozen=True, slots=True)
class DecidedBy:
    """A request field the engine does not read, and what decides its memory in its place:
    ``options``, the engine's own options (empty: the engine itself, by its kernels), and
    ``why`` in words."""

    field: str
    options: tuple[str, ...]
    why: str


#: How an option is written on the engine's command line (``None``: from its type; a bool
#: is the engine's own switch form, :attr:`Engine.bool_flags`).
CliKind = Literal["int", "float", "str", "str_list", "switch", "bool_optional", "json"]
#: How the command line writes an integer: ``plain`` (``int()``), ``vllm`` (k/m/g/t decimal,
#: K/M/G/T binary), ``vllm_or_auto`` (also -1 or ``auto``), ``sglang`` (k/M/G/T SI, Ki/Mi/Gi/Ti).
IntSyntax = Literal["plain", "vllm", "vllm_or_auto", "sglang"]
#: What an option read from a command line does to the estimate: ``option`` (an engine option
#: of the estimate, ``engine_options.<name>``), ``field`` (sets the request field ``field``),
#: ``unpriced`` (read, not priced: ``note`` says what it changes), ``inert`` (no memory effect).
Role = Literal["option", "field", "unpriced", "inert"]


@dataclass(frozen=True, slots=True)
class Option:
    """One engine option, declared once: its type, range and default in the estimate, the
    command-line flags it is written with and how they read a value, the Kubernetes and chart
    fields that set it, and what it does to the estimate (``role``).

    ``default`` None means the engine derives it (from the GPU or the model): the engine's
    :meth:`Engine.defaults` fills it in. ``aliases`` are other request names accepted for it.
    ``flag`` is its canonical flag and ``flags`` every other spelling the engine's parser
    accepts; ``cli_low`` widens the range a command line may give (vLLM's ``-1`` for an
    automatic ``--max-model-len``). Options whose role is not ``option`` are read from command
    lines only and are not part of the API's ``engine_options``.
    """

    name: str
    kind: type
    description: str
    default: OptionValue | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[OptionValue, ...] = ()
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    cli_kind: CliKind | None = None
    int_syntax: IntSyntax = "plain"
    cli_low: float | None = None
    role: Role = "option"
    field: str | None = None
    note: str = ""
    chart_fields: tuple[str, ...] = ()
    # A JSON-valued flag: (path in the object, what it sets, factor) for each key the estimate
    # reads; the target is an engine option, ``speculative.<key>``, or a request field.
    json_keys: tuple[tuple[tuple[str, ...], str, float], ...] = ()
    # The environment variable the engine also reads it from (a flag given wins).
    env: str | None = None
    # The values whose memory effect is priced, when only some are (empty: all): any other
    # value is still passed to the estimate, which names what it does not price, and a
    # reader reports it ``priced: false``.
    priced_values: tuple[OptionValue, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every command-line spelling, the canonical flag first."""
        return ((self.flag,) if self.flag else ()) + self.flags

    def allowed(self) -> str:
        if self.kind is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        lo = "(" if self.low_open else "["
        return f"{self.kind.__name__} in {lo}{self.low:g}, {self.high:g}]"

    def check(self, value: Any, field: str) -> OptionValue:
        """``value`` as this option's type, or InvalidRequest naming ``field``."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise InvalidRequest(f"{self.name} must be {self.allowed()}", field=field)
            return value
        if self.kind is str:
            if not isinstance(value, str) or (self.choices and value not in self.choices):
                raise InvalidRequest(f"{self.name} must be {self.allowed()}", field=field)
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidRequest(f"{self.name} must be {self.allowed()}", field=field)
        if self.kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise InvalidRequest(f"{self.name} must be {self.allowed()}", field=field)
            number: float | int = int(value)
        else:
            number = float(value)
        if self.choices and number not in self.choices:
            raise InvalidRequest(f"{self.name} must be {self.allowed()}, got {number}", field=field)
        if self.low is not None and self.high is not None:
            below = number <= self.low if self.low_open else number < self.low
            if below or number > self.high:
                raise InvalidRequest(
                    f"{self.name} must be {self.allowed()}, got {number}", field=field
                )
        return number


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """An engine with every option resolved (hashable: it keys the setup cache).

    ``values`` maps every option of the engine to its value; ``explicit`` names those the
    request set (the rest are the engine's defaults).
    """

    engine: str
    values: tuple[tuple[str, OptionValue | None], ...]
    explicit: tuple[str, ...] = ()
    # ``values`` as a dict (the workload evaluations read options many times per request)
    # and the hash (settings key the setup cache, looked up many times per request).
    _by_name: dict[str, OptionValue | None] = field(
        init=False, repr=False, compare=False, hash=False
    )
    _hash: int | None = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", dict(self.values))
        object.__setattr__(self, "_hash", None)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((self.engine, self.values, self.explicit)))
        return self._hash  # type: ignore[return-value]

    def __getitem__(self, name: str) -> Any:
        return self._by_name[name]

    def with_values(self, **changes: OptionValue) -> EngineSettings:
        """These settings with some options changed (each as if the caller had set it)."""
        values = dict(self.values)
        for name in changes:
            if name not in values:
                raise KeyError(name)
        values.update(changes)
        explicit = tuple(sorted({*self.explicit, *changes}))
        return EngineSettings(self.engine, tuple(sorted(values.items())), explicit)

    def get(self, name: str, default: Any = None) -> Any:
        return self._by_name.get(name, default)

    def as_dict(self) -> dict[str, OptionValue | None]:
        return dict(self.values)


@dataclass(frozen=True, slots=True)
class EngineContext:
    """What an engine's defaults may depend on."""

    architecture: Architecture
    gpu_memory_bytes: int | None
    gpu: GpuSpec | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1


@dataclass(frozen=True, slots=True)
class DtypeChoice:
    """How an engine runs a checkpoint on a GPU: the dtype it computes in, the format it keeps
    the weights in when that differs from the checkpoint's (a float32 checkpoint served in
    16 bits, a quantized one dequantized where its kernels cannot run), and why the GPU cannot
    run it at all (None: it can)."""

    activation: str
    weights: str | None = None
    notes: tuple[str, ...] = ()
    unsupported: str | None = None


@dataclass(frozen=True, slots=True)
class StageBuild:
    """What an engine adds to one pipeline stage of a setup: the activation its budget
    reserves whatever the workload (a profiling run's peak, a kernel's scratch), the KV cache
    it allocates whatever the workload (llama.cpp: every cell of its context at start), what
    it holds in host memory, and its own per-stage state (vLLM's KV-cache groups)."""

    fixed_activation: int = 0
    state: Any = None
    notes: tuple[str, ...] = ()
    # Bytes the engine's kernels store beyond the checkpoint's tensors on each GPU of the
    # stage (weights repacked or padded for the kernel the GPU runs): part of its weights.
    extra_weights: int = 0
    fixed_kv: int = 0
    host_bytes: int = 0
    # A KV pool the caller fixed (None: the engine sizes it from its budget).
    kv_pool: int | None = None
    # Host memory one GPU's worker process holds for this stage (pinned offload, adapter
    # caches, swap), beside ``host_bytes`` (the engine process's own, llama.cpp).
    host_per_gpu: int = 0
    # Options read but not priced (a warning downstream, never a refusal).
    unpriced: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DataParallelPlan:
    """What data and expert parallelism change on one GPU of a replica.

    ``experts``: how the routed experts are spread (None: split by TP like the dense
    layers); ``nccl``: the communicators of the data- and expert-parallel groups beyond the
    TP and PP ones; ``all_to_all``: the buffers the MoE dispatch/combine backend allocates;
    ``moe_token_factor``: how many times a rank's own tokens a MoE layer processes (vLLM's
    all-gather backends hand every DP rank's tokens to every rank's experts).
    """

    experts: ExpertLayout | None = None
    nccl: int = 0
    all_to_all: int = 0
    moe_token_factor: int = 1
    notes: tuple[str, ...] = ()
    # What was read but is not priced (a warning, never a refusal, downstream).
    unpriced: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightOffload:
    """Weights moved off one GPU of each stage into host memory, the most of them one decoder
    layer holds, and what was done."""

    per_stage: tuple[int, ...]
    largest_layer: int
    note: str


@dataclass(frozen=True, slots=True)
class WeightSplit:
    """An engine's own placement of the weights: bytes on one GPU of each pipeline stage and
    in host memory (llama.cpp keeps layers that are not offloaded, and the token embedding, in
    CPU buffers)."""

    per_stage: tuple[int, ...]
    host_bytes: int = 0
    notes: tuple[str, ...] = ()


class Engine:
    """Base of every engine: plain PyTorch behaviour; subclasses override what differs."""

    name: ClassVar[str]
    summary: ClassVar[str]
    # The engine options of an estimate (role ``option``), and every option the engine
    # declares, command-line-only ones too (empty: the engine has no command line).
    options: ClassVar[tuple[Option, ...]] = ()
    declared: ClassVar[tuple[Option, ...]] = ()
    # How the engine's parser writes a boolean flag: ``bool_optional`` (``--x`` / ``--no-x``,
    # argparse.BooleanOptionalAction) or ``switch`` (store_true).
    bool_flags: ClassVar[Literal["bool_optional", "switch"]] = "switch"
    # The option that scales the GPU's memory into the engine's budget (None: all of it).
    budget_option: ClassVar[str | None] = None
    # The budget is a share of the memory free when the engine starts (SGLang), not of the
    # device's total (vLLM): on a shared GPU it sees what the others left.
    budget_reads_free_memory: ClassVar[bool] = False
    # Fused MoE and attention kernels: no eager score matrices, fused_moe's shared buffer.
    fused_kernels: ClassVar[bool] = False
    # The option holding the longest sequence the engine is configured for (None: none).
    context_option: ClassVar[str | None] = None
    # What each GPU holds back grows with the GPUs of one copy (TP × PP): more pipeline
    # stages can then stop fitting where fewer fit, and the fewest-GPU search may not assume
    # that the most stages fit whenever any count does.
    reserve_grows_with_gpus: ClassVar[bool] = False
    # Request fields the engine sizes nothing by, each with the option that decides instead
    # (docs/inference.md, "Fields an engine does not use"); `attention` is added for engines
    # with fused kernels (:meth:`decided_elsewhere`).
    decides_instead: ClassVar[tuple[DecidedBy, ...]] = ()

    # ---- options --------------------------------------------------------------------

    @classmethod
    def decided_elsewhere(cls) -> tuple[DecidedBy, ...]:
        """The request fields this engine does not read (:attr:`decides_instead`), with
        `attention` for fused kernels: they never materialize the score matrices, whatever
        `attention` says (the forward's eager terms apply only without them)."""
        own = cls.decides_instead
        if cls.fused_kernels and all(d.field != "attention" for d in own):
            fused = DecidedBy(
                "attention",
                (),
                f"{cls.name} runs its own fused attention kernels, which hold no score matrices",
            )
            own = (*own, fused)
        return own

    @classmethod
    def option_table(cls) -> Mapping[str, Option]:
        table = {o.name: o for o in cls.options}
        for o in cls.options:
            for alias in o.aliases:
                table[alias] = o
        return MappingProxyType(table)

    def resolve(self, given: Mapping[str, Any], ctx: EngineContext) -> EngineSettings:
        """Check the options a request set and fill in the engine's defaults."""
        table = self.option_table()
        values: dict[str, OptionValue | None] = {o.name: o.default for o in self.options}
        explicit: list[str] = []
        for name, raw in given.items():
            if raw is None:
                continue
            field = f"engine_options.{name}"
            option = table.get(name)
            if option is None:
                allowed = ", ".join(o.name for o in self.options) or "none"
                raise InvalidRequest(
                    f"engine {self.name!r} has no option {name[:40]!r}; its options: {allowed}",
                    field=field,
                )
            values[option.name] = option.check(raw, field)
            explicit.append(option.name)
        for name, value in self.defaults(values, ctx).items():
            if name not in explicit:
                values[name] = value
        return EngineSettings(self.name, tuple(sorted(values.items())), tuple(sorted(explicit)))

    def defaults(
        self, values: Mapping[str, OptionValue | None], ctx: EngineContext
    ) -> Mapping[str, OptionValue | None]:
        """Defaults that depend on the GPU or the model (none for the base engine)."""
        return {}

    def budget_fraction(self, s: EngineSettings) -> float:
        return 1.0 if self.budget_option is None else float(s[self.budget_option])

    def budget_bytes(self, setup: ServingSetup, gpu_memory_bytes: int) -> int:
        """What the engine's budget lets it use of a GPU's memory: the total × its fraction."""
        return int(gpu_memory_bytes * self.budget_fraction(setup.settings))

    def budget_note(self, setup: ServingSetup, gpu_memory_bytes: int) -> str:
        """How :meth:`budget_bytes` was reached, for the fit's assumptions."""
        if self.budget_option is None:
            return f"usable = CUDA total {gpu_memory_bytes / GIB:.2f} GiB"
        return (
            f"usable = CUDA total {gpu_memory_bytes / GIB:.2f} GiB × "
            f"{self.budget_fraction(setup.settings):g} ({self.budget_option})"
        )

    def resolve_dtype(
        self,
        arch: Architecture,
        fmt: WeightFormat,
        s: EngineSettings,
        gpu: GpuSpec | None,
        named: bool = False,
    ) -> DtypeChoice:
        """Plain PyTorch: the checkpoint's dtype (quantized formats compute in 16 bits).
        ``named``: the request named the weight format (a plain one is then the dtype to run)."""
        return DtypeChoice(activation_dtype(arch, fmt))

    def valid_tensor_parallel_sizes(self, arch: Architecture) -> tuple[int, ...]:
        """TP sizes the engine can run the model at (the heads split evenly; KV heads
        split or replicated)."""
        return arch.valid_tensor_parallel_sizes

    def default_sequence_length(self, s: EngineSettings) -> int:
        """The sequence length a request that names none is judged at."""
        return 2048

    def command_args(self, s: EngineSettings, tp: int, pp: int, kv_cache_dtype: str) -> list[str]:
        """The engine's own command-line flags for these settings (empty: no command line)."""
        return []

    # ---- setup ----------------------------------------------------------------------

    def mla_cache(self, arch: Architecture) -> MlaCache:
        """What the engine caches for latent attention: the latent (SGLang's MLA pool,
        transformers 5's cache of the compressed latent)."""
        return MlaCache.LATENT

    def placement(self, arch: Architecture, s: EngineSettings, act_bytes: float) -> Placement:
        """How weights are placed, and what every GPU holds next to them."""
        return Placement()

    def place_weights(
        self,
        arch: Architecture,
        layout: WeightLayout,
        checkpoint: CheckpointWeights | None,
        s: EngineSettings,
    ) -> WeightSplit | None:
        """The engine's own weight placement (None: the shard roles' ``layout``, scaled to the
        checkpoint's header bytes when they are known)."""
        return None

    def max_model_len(self, s: EngineSettings) -> int | None:
        """The longest sequence the engine is configured for (None: no such limit)."""
        return None

    def command_layout(self, body: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
        """Request fields the engine's own parallel options translate to beyond the one-to-one
        declarations (none for most engines: a command line's sizes are the request's)."""
        return {}

    def offload(
        self, arch: Architecture, s: EngineSettings, layout: WeightLayout, pp: int
    ) -> WeightOffload | None:
        """Weights the engine keeps in host memory instead of on the GPUs (None: none)."""
        return None

    def data_parallel(
        self,
        arch: Architecture,
        s: EngineSettings,
        tp: int,
        dp: int,
        expert_parallel: bool,
        gpu: GpuSpec | None,
    ) -> DataParallelPlan:
        """What ``dp`` replicas (and expert parallelism) change per GPU. Plain PyTorch: each
        replica is an independent copy; it has no expert parallelism."""
        if expert_parallel:
            raise InvalidRequest(
                f"engine {self.name!r} has no expert parallelism; drop expert_parallel",
                field="expert_parallel",
            )
        if dp > 1:
            return DataParallelPlan(notes=(f"{dp} data-parallel replicas, each a full copy",))
        return DataParallelPlan()

    def overheads(
        self, s: EngineSettings, tp: int, pp: int, layers_on_gpu: int, gpu: GpuSpec | None
    ) -> tuple[OverheadTerms, OverheadTerms]:
        """(charged to the budget, outside it) on ``gpu`` (None: unknown): context,
        workspaces, NCCL, graphs."""
        uses_nccl = tp * pp > 1
        return framework_overhead(tp, pp, uses_nccl=uses_nccl, gpu=gpu), OverheadTerms()

    def stage(self, args: StageArgs) -> StageBuild:
        """What the engine adds to one pipeline stage (nothing for the base engine)."""
        return StageBuild()

    def complete(self, setup: ServingSetup) -> ServingSetup:
        """The setup once its weights and stages are known: an engine that sizes what lives
        beside its budget from them (SGLang's request table) fills it in here."""
        return setup

    def setup_notes(
        self, arch: Architecture, s: EngineSettings, last_state: object
    ) -> tuple[str, ...]:
        """Assumption lines about the setup as a whole (``last_state``: the last stage's
        engine state)."""
        return ()

    # ---- workload -------------------------------------------------------------------

    def sequence_cost(
        self, setup: ServingSetup, stage: Stage, seq_len: int, prompt: int
    ) -> tuple[int, int]:
        """(KV bytes, activation bytes) one sequence adds on one GPU of ``stage``."""
        raise NotImplementedError

    def capacity(
        self, setup: ServingSetup, gpu_memory_bytes: int, seq_len: int
    ) -> tuple[Capacity, tuple[str, ...]] | None:
        """What the engine reports at start-up (its KV pool), if it sizes one."""
        return None

    def refuses(
        self, setup: ServingSetup, usable: int, required: int, kv_last: int, seq_len: int
    ) -> bool:
        """Whether the engine would refuse to start although the workload fits (``required``:
        the most loaded GPU's bytes, ``kv_last``: the workload's KV cache on the last stage)."""
        return False


@dataclass(frozen=True, slots=True)
class StageArgs:
    """What an engine sees of one pipeline stage while a setup is built."""

    arch: Architecture
    settings: EngineSettings
    kv: KvLayout
    coeffs: ForwardCoefficients
    tp: int
    is_last: bool
    weight_format_kind: str
    weight_format_bits: int
    extra: Mapping[str, Any] = field(default_factory=dict)
    gpu: GpuSpec | None = None
    act_dtype: str = "bf16"
    layers: int = 0  # decoder layers on this stage
    index: int = 0  # the stage's place in the pipeline, first 0
    pp: int = 1
    # Data and expert parallelism: how the routed experts sit, how many times a rank's own
    # tokens a MoE layer works on.
    experts: ExpertLayout | None = None
    moe_token_factor: int = 1
    # Weights the engine offloaded to host memory from this GPU, and the most of them one
    # decoder layer holds.
    offloaded_bytes: int = 0
    offloaded_layer_bytes: int = 0


#: ``--trust-remote-code``, which vLLM and SGLang both take: the model repository's own code
#: runs; no memory effect of its own.
TRUST_REMOTE_CODE = Option(
    "trust_remote_code",
    bool,
    "Run the model repository's own code.",
    default=False,
    flag="--trust-remote-code",
    role="inert",
)
