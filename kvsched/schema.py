"""The scenario file's schema: typed models, unknown keys refused, defaults from the engine.

Shorthands are expanded before validation so that every field has one type: `policy: spf`
means `{name: spf}`, a length given as a number means `{kind: constant, value: N}`.

Annotations are objects, not strings (no `from __future__ import annotations`): pydantic
would evaluate each string when the module is imported, on every run.
"""


from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from kvsched.admission import Estimator
from kvsched.backpressure import Action
from kvsched.config import (
    ENGINE_DEFAULTS,
    KNOB_TYPES,
    KNOBS,
    MAX_COUNT,
    MAX_FLOAT,
    EngineConfig,
    effective_step_order,
    one_of,
)
from kvsched.engine_keys import ENGINE_ALIASES, written_engine_keys  # noqa: F401  (re-exported)
from kvsched.errors import KvschedError
from kvsched.paths import name_problem, scenario_name_problem
from kvsched.policies import check_policy_name, is_user_policy, make_policy
from kvsched.presets import PRESETS
from kvsched.presets import expand as expand_preset
from kvsched.timing import ConstantStep, LinearStep, StepClock, TimeModel
from kvsched.timing.dtypes import KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES
from kvsched.timing.serve_defaults import USAGES, with_defaults
from kvsched.trace_formats import FORMATS

MAX_SYNTHETIC_REQUESTS = 10_000_000
# Bounds on every number, so that extreme values are refused with the bound in the message
# instead of overflowing numpy or the engine: lengths in tokens, counts and sizes, times in
# the run's unit (steps or s), rates per time unit.
MAX_TOKENS = 10_000_000
MAX_TIME = MAX_FLOAT  # times in the run's unit: the engine's bound on its factors and times
MIN_RATE, MAX_RATE = 1e-9, 1e9
MIN_CV, MAX_CV = 1e-3, 1e3
MAX_SIGMA = 10.0
MAX_PRIORITY = 10**9
MAX_REPLICAS = 10_000  # a cluster's replicas, each a full engine (10,000 start in ~5 s)
PositiveInt = Annotated[int, Field(ge=1, le=MAX_COUNT)]
TokenLen = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Time = Annotated[float, Field(ge=0, le=MAX_TIME)]
Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE)]
Interval = Annotated[float, Field(ge=1 / MAX_RATE, le=1 / MIN_RATE)]
Priority = Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]


def _folder_name(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def _scenario_folder_name(name: str) -> str:
    problem = scenario_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


# A name becomes a folder: one safe path component (see kvsched.paths).
Name = Annotated[str, Field(min_length=1), AfterValidator(_folder_name)]
ScenarioName = Annotated[str, Field(min_length=1), AfterValidator(_scenario_folder_name)]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_COUNT)]
PositiveFloat = Annotated[float, Field(gt=0, le=MAX_TIME)]
NonNegativeFloat = Annotated[float, Field(ge=0, le=MAX_TIME)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


# -- engine, policy, time ---------------------------------------------------------------


class KvOffloadSpec(Strict):
    """`engine.kv_offload:` a host-memory tier under the prefix cache: `host_blocks` blocks
    of host memory that evicted cached blocks go to, loaded back at `bandwidth_gbps`
    (gigabits per second, the PCIe link); `block_bytes` (default: the roofline model's, per
    GPU) is one block's KV."""

    host_blocks: PositiveInt
    bandwidth_gbps: PositiveFloat
    block_bytes: PositiveFloat | None = None


class _EngineKeys(Strict):
    """`engine:` — each knob of `kvsched.config.EngineConfig` as a key (made from its
    declaration by `_knob_fields`), and the keys that configure something else than the
    engine's rules (`_OTHER_KEYS`); `preset` (`kvsched.presets`) fills in the rest. vLLM's
    spellings `enable_chunked_prefill` and `preemption_mode`, and SGLang's
    `max_running_requests`, are accepted for `chunked_prefill`, `preemption` and
    `max_num_seqs`; SGLang's `chunked_prefill_size: N` means `chunked_prefill: true,
    max_num_batched_tokens: N` (-1: `chunked_prefill: false`)."""

    if TYPE_CHECKING:  # the keys are made at import (below): mypy sees them as Any
        def __getattr__(self, name: str) -> Any: ...

    @model_validator(mode="after")
    def _offload_needs_a_cache(self) -> Self:
        if self.kv_offload is not None and not self.enable_prefix_caching:
            raise ValueError("kv_offload: a host tier holds blocks the prefix cache evicts: "
                             "it needs enable_prefix_caching: true")
        return self

    @model_validator(mode="before")
    @classmethod
    def _preset_and_aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, name in ENGINE_ALIASES.items():
            if alias in data:
                value = data.pop(alias)
                if name in data and data[name] != value:
                    raise ValueError(f"'{alias}' and '{name}' are the same key and disagree")
                data[name] = value
        if "chunked_prefill_size" in data:  # SGLang's flag: the chunk size, -1 = no chunking
            size = data.pop("chunked_prefill_size")
            if size == -1:
                implied: dict[str, Any] = {"chunked_prefill": False}
            elif isinstance(size, int) and not isinstance(size, bool) and size > 0:
                implied = {"chunked_prefill": True, "max_num_batched_tokens": size}
            else:
                raise ValueError(f"chunked_prefill_size must be a positive token count or -1 "
                                 f"(no chunking), got {size!r}")
            for name, value in implied.items():
                if name in data and data[name] != value:
                    raise ValueError(f"'chunked_prefill_size' and '{name}' disagree")
                data[name] = value
        return expand_preset(data)

    def to_config(self) -> EngineConfig:
        offload = self.kv_offload
        host: dict[str, Any] = {} if offload is None else {
            "kv_offload_blocks": offload.host_blocks, "kv_offload_gbps": offload.bandwidth_gbps,
            "kv_offload_block_bytes": offload.block_bytes}
        return EngineConfig(**self.model_dump(exclude=set(_OTHER_KEYS)), **host)


def _knob_annotation(knob: Any) -> Any:
    """A knob's key type: its enum's values or its choices as a `Literal`, else its Python
    type with the knob's bounds as pydantic constraints (None allowed where the knob's is)."""
    kind = KNOB_TYPES[knob.name]
    if isinstance(kind, type) and issubclass(kind, Enum):
        return one_of(kind)
    if knob.metadata["choices"]:
        return one_of(knob.metadata["choices"])
    members = [t for t in get_args(kind) if t is not type(None)] or [kind]
    values = knob.metadata["range"]
    base = members[0] if values is None else Annotated[
        members[0], Field(ge=values.ge, gt=values.gt, le=values.le, lt=values.lt)]
    return base | None if len(members) < len(get_args(kind)) else base


def _knob_fields() -> dict[str, Any]:
    """`engine:`'s keys in order: `preset`, each knob written in a scenario (its default as
    written there: an enum's value), the pool's GPU keys after `num_blocks`, `kv_offload`
    last."""
    out: dict[str, Any] = {"preset": _OTHER_KEYS["preset"]}
    for knob in KNOBS:
        if not knob.metadata["scenario"]:
            continue
        default = knob.default.value if isinstance(knob.default, Enum) else knob.default
        also = knob.metadata["also"]
        out[knob.name] = (_knob_annotation(knob), Field(
            default, description=knob.metadata["doc"],
            json_schema_extra={"also": also} if also else None))
        if knob.name == "num_blocks":
            out.update({key: _OTHER_KEYS[key] for key in POOL_KEYS})
    out["kv_offload"] = _OTHER_KEYS["kv_offload"]
    return out


POOL_KEYS = ("gpu_memory_utilization", "kv_cache_dtype", "enforce_eager", "usage")
"""The keys that size the pool in GPU memory (`num_blocks: auto`) or pick the GPU's defaults:
read by the loader, not the engine."""

_OTHER_KEYS: dict[str, Any] = {
    "preset": (Literal[tuple(PRESETS)], Field(
        "lesson", description="a named bundle of the keys below and above, one per engine "
        "version (see [Engine presets](presets.md#engine-presets)); keys written beside it "
        "override it")),
    "gpu_memory_utilization": (Annotated[float, Field(gt=0, le=1)] | None, Field(
        None, description="with `num_blocks: auto`: the share of the GPU memory CUDA reports "
        "that the engine may use (none: vLLM 0.33's default, 0.92)")),
    "kv_cache_dtype": (one_of(KV_DTYPE_BYTES), Field(
        "auto", description="`auto` (the model's bf16) or `fp8`: half the bytes per token, so "
        "twice the blocks with `num_blocks: auto`, and half the KV bytes a roofline step reads "
        "(decode and prefill attention, swaps)")),
    "enforce_eager": (bool, Field(
        False, description="with `num_blocks: auto`: no CUDA graphs, so none in the pool's "
        "budget (vLLM's flag)")),
    "usage": (one_of(USAGES), Field(
        "serve", description="whose GPU defaults a preset takes where it has them (`vllm_v1`): "
        "`serve` (`vllm serve`) or `offline` (vLLM's `LLM` class); see "
        "[`vllm_v1`](presets.md#vllm_v1-vllm-0330-v1-engine-checked-against-the-real-scheduler)")),
    "kv_offload": (KvOffloadSpec | None, Field(
        None, description="`{host_blocks, bandwidth_gbps, block_bytes}`: a host-memory tier "
        "under the prefix cache: blocks the cache evicts go to `host_blocks` blocks of host "
        "memory, loaded back over `bandwidth_gbps` (gigabits per second) instead of computed "
        "(see [Prefix caching](engine.md#prefix-caching)); `block_bytes` defaults to the "
        "roofline model's; needs `enable_prefix_caching` and a time model in seconds")),
}
"""The `engine:` keys that are not knobs of the engine, each declared once here."""

if TYPE_CHECKING:
    EngineSpec = _EngineKeys
else:
    EngineSpec = create_model("EngineSpec", __base__=_EngineKeys, __module__=__name__,
                              __doc__=_EngineKeys.__doc__, **_knob_fields())


def replica_engines(spec: "RunSpec") -> list[EngineSpec]:
    """The engine of each `cluster.replicas` entry: the variant's, with the keys the entry
    gives (its preset's included) replacing the variant's."""
    assert spec.cluster is not None
    out = []
    for entry in spec.cluster.replicas:
        engine = spec.engine
        if entry.engine is not None:
            given = {key: getattr(entry.engine, key) for key in entry.engine.model_fields_set}
            engine = EngineSpec.model_validate({**spec.engine.model_dump(), **given})
        out.append(engine)
    return out


def engine_values(engine: EngineSpec) -> dict[str, Any]:
    """Every engine key's value, `step_order` as the engine runs it (for `kvsched.compat`)."""
    values = engine.model_dump()
    values["step_order"] = effective_step_order(engine.step_order, engine.mix_prefill_decode)
    return values


class PolicySpec(BaseModel):
    """`policy:` a name, or `{name, <params>}` / `{name, params: {...}}`."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, allow_inf_nan=False)
    name: str
    params: dict[str, Any] = {}

    def all_params(self) -> dict[str, Any]:
        return {**self.params, **(self.model_extra or {})}

    @model_validator(mode="after")
    def _known_policy(self) -> Self:
        # ValueError names what is wrong. A user's class is only checked for its shape here:
        # validating a file must never import (run) the user's code.
        if is_user_policy(self.name):
            check_policy_name(self.name)
        else:
            make_policy(self.name, **self.all_params())
        return self


# -- time models: each a `kind`, its keys, and `build` (the model it makes); `TimeSpec`
# lists them


class StepsTime(Strict):
    """One time unit per step (`kvsched.timing.StepClock`)."""

    kind: Literal["steps"]

    def build(self, engine: "EngineSpec") -> TimeModel:
        return StepClock()


class ConstantTime(Strict):
    kind: Literal["constant"]
    step_time: PositiveFloat

    def build(self, engine: "EngineSpec") -> TimeModel:
        return ConstantStep(self.step_time)


class LinearTime(Strict):
    kind: Literal["linear"]
    base: PositiveFloat = 0.005
    per_prefill_token: NonNegativeFloat = 0.0001
    per_decode: NonNegativeFloat = 0.0001
    per_kv_token: NonNegativeFloat = 0.0
    per_swapped_block: NonNegativeFloat = 0.0

    def build(self, engine: "EngineSpec") -> TimeModel:
        return LinearStep(self.base, self.per_prefill_token, self.per_decode,
                          self.per_kv_token, self.per_swapped_block)


def _known_model(cls: type, name: str) -> str:
    # (the hardware catalogue and the pool sizing, here and below: loaded when a scenario
    # names a model or a GPU; a run that names none, the lesson's, would pay 3 ms a start)
    from kvsched.timing.hardware import load_model

    load_model(name)  # ValueError: one line listing the known names
    return name


def _known_gpu(cls: type, name: str) -> str:
    # (loaded late: see _known_model)
    from kvsched.timing.hardware import load_gpu

    load_gpu(name)
    return name


def _maybe_known_gpu(cls: type, name: str | None) -> str | None:
    return None if name is None else _known_gpu(cls, name)


def _model_splits(cls: type, tp: int, info: ValidationInfo) -> int:
    """`tp` must shard the model (checked once `model` has been; its own error otherwise)."""
    # (loaded late: see _known_model)
    from kvsched.timing.hardware import load_model

    try:
        model = load_model(info.data["model"])
    except (KeyError, ValueError):
        return tp  # the model's own check names it
    if (problem := model.tp_problem(tp)) is not None:
        raise ValueError(problem)
    return tp


class RooflineTime(Strict):
    """Step times from the model and the GPU (`kvsched.timing.roofline`); `model` is a Hugging
    Face id of the catalogue or the path of a config.json."""

    kind: Literal["roofline"]
    model: str
    gpu: str
    tp: PositiveInt = 1
    # the decoder layers' linear weights: bf16, or fp8 (an fp8 checkpoint or vLLM's
    # `--quantization fp8`): half the bytes read per step and held, fp8 GEMMs where the GPU
    # has fp8 Tensor Cores; the embedding and LM head stay bf16, as in vLLM
    weight_dtype: one_of(WEIGHT_DTYPE_BYTES) = "bf16"  # type: ignore[valid-type]

    _model = field_validator("model")(_known_model)
    _gpu = field_validator("gpu")(_known_gpu)
    _tp = field_validator("tp")(_model_splits)

    def build(self, engine: "EngineSpec") -> TimeModel:
        # (loaded when built: the roofline's catalogues and tables cost every other run)
        from kvsched.timing.roofline import RooflineStep

        try:
            return RooflineStep(self.model, self.gpu, self.tp, block_size=engine.block_size,
                                weight_dtype=self.weight_dtype,
                                kv_cache_dtype=engine.kv_cache_dtype)
        except ValueError as exc:  # tp that does not divide the heads
            raise KvschedError(f"time.tp: {exc}") from None


class ProfiledTime(Strict):
    """Step times replayed from operator profiles in Vidur's CSV format (`kvsched.timing.profiled`);
    `gpu`, the GPU they were measured on, is optional: a preset's GPU defaults need it."""

    kind: Literal["profiled"]
    profiles: str
    model: str
    tp: PositiveInt = 1
    gpu: str | None = None

    _model = field_validator("model")(_known_model)
    _gpu = field_validator("gpu")(_maybe_known_gpu)
    _tp = field_validator("tp")(_model_splits)

    def build(self, engine: "EngineSpec") -> TimeModel:
        # (loaded when built: the profiles are read with pandas)
        from kvsched.timing.profiled import ProfiledStep

        return ProfiledStep(Path(self.profiles), self.model, self.tp)


TimeSpec = Annotated[StepsTime | ConstantTime | LinearTime | RooflineTime | ProfiledTime,
                     Field(discriminator="kind")]
"""The time models a scenario's `time:` may name, each by its `kind`: the registry (a new
model is its module in `kvsched/timing/`, its spec class above with `build`, and its name
here)."""

MAX_PLAUSIBLE_STEP_TIME = 10.0  # seconds: a forward pass longer than this is a unit slip
MAX_PLAUSIBLE_SLO = {"ttft": 60.0, "tpot": 2.0, "e2e": 3600.0}
"""Seconds: a first token promised after more than a minute, a token every 2 s or an answer
after more than an hour is a target written in milliseconds (vLLM's benchmark unit)."""


def derived_pool(resolved: dict[str, Any], spec: "RunSpec") -> str | None:
    """'num_blocks: auto = N blocks ...' for the variant and each fleet entry whose pool was
    sized from its GPU."""
    engine = resolved.get("engine")
    auto = isinstance(engine, dict) and engine.get("num_blocks") == "auto"
    parts = []
    if auto:
        time = spec.time
        assert isinstance(time, RooflineTime)
        tokens = int(spec.engine.num_blocks) * spec.engine.block_size
        parts.append(f"engine.num_blocks: auto = {spec.engine.num_blocks:,} blocks ({tokens:,} "
                     f"tokens of KV) for {time.model} on {time.tp} x {time.gpu} "
                     f"({_breakdown(time, spec.engine)})")
    cluster = resolved.get("cluster")
    entries = cluster.get("replicas") if isinstance(cluster, dict) else None
    if isinstance(entries, list) and spec.cluster is not None:
        for index, (raw, entry) in enumerate(zip(entries, spec.cluster.replicas, strict=False)):
            if (_sizes_own_pool(raw, auto) and entry.engine is not None
                    and isinstance(entry.time, RooflineTime)):
                parts.append(f"cluster.replicas[{index}]: {entry.engine.num_blocks:,} blocks "
                             f"for {entry.time.model} on {entry.time.tp} x {entry.time.gpu}")
    return "; ".join(parts) or None


def unit_warnings(spec: "RunSpec") -> list[str]:
    """Values that are valid but likely in the wrong unit, one line each naming the field:
    a step time over 10 s, or (on a clock in seconds) an SLO over `MAX_PLAUSIBLE_SLO`."""
    time = spec.time
    out = []
    if isinstance(time, ConstantTime) and time.step_time > MAX_PLAUSIBLE_STEP_TIME:
        out.append(f"time.step_time: {time.step_time:g} s per step is over "
                   f"{MAX_PLAUSIBLE_STEP_TIME:g} s; did you mean milliseconds "
                   f"({time.step_time / 1000:g})?")
    if isinstance(time, LinearTime):
        full = time.base + time.per_prefill_token * spec.engine.max_num_batched_tokens
        if time.base > MAX_PLAUSIBLE_STEP_TIME:
            out.append(f"time.base: {time.base:g} s per step is over "
                       f"{MAX_PLAUSIBLE_STEP_TIME:g} s; did you mean milliseconds?")
        elif full > MAX_PLAUSIBLE_STEP_TIME:
            out.append(f"time.per_prefill_token: {time.per_prefill_token:g} s makes a full "
                       f"{spec.engine.max_num_batched_tokens}-token step last {full:g} s, over "
                       f"{MAX_PLAUSIBLE_STEP_TIME:g} s; did you mean milliseconds?")
    if not isinstance(time, StepsTime):  # on the step clock SLOs are counted in steps
        targets = [(f"slo.{name}", name, getattr(spec.slo, name)) for name in MAX_PLAUSIBLE_SLO
                   ] if spec.slo is not None else []
        if spec.admission is not None:
            targets.append(("admission.ttft_slo", "ttft", spec.admission.ttft_slo))
        out += [f"{field}: {value:g} s is over {_seconds_text(MAX_PLAUSIBLE_SLO[kind])}; did "
                f"you mean milliseconds ({value / 1000:g} s)?" for field, kind, value in targets
                if value is not None and value > MAX_PLAUSIBLE_SLO[kind]]
    fleet = [(f"cluster.replicas[{i}].", entry.time, engine) for i, (entry, engine)
             in enumerate(zip(spec.cluster.replicas, replica_engines(spec), strict=True))
             if entry.time is not None] if spec.cluster is not None else []
    for where, roofline, engine in [("", time, spec.engine), *fleet]:
        if isinstance(roofline, RooflineTime) and (problem := _does_not_fit(roofline, engine)):
            out.append(f"{where}time: {problem}, yet engine.num_blocks gives it a pool of "
                       f"{engine.num_blocks:,} blocks")
    return out


def _breakdown(time: RooflineTime, engine: "EngineSpec") -> str:
    """vLLM's memory budget behind a derived pool, term by term."""
    # (loaded late: see _known_model)
    from kvsched.timing.kvpool import DEFAULT_UTILIZATION, pool_breakdown

    return pool_breakdown(time.model, time.gpu, time.tp, engine.block_size,
                          engine.gpu_memory_utilization or DEFAULT_UTILIZATION,
                          engine.max_num_batched_tokens, engine.max_num_seqs,
                          engine.kv_cache_dtype, time.weight_dtype,
                          enforce_eager=engine.enforce_eager).text()


def _seconds_text(seconds: float) -> str:
    return {3600.0: "an hour", 60.0: "a minute"}.get(seconds, f"{seconds:g} s")


def _does_not_fit(time: RooflineTime, engine: "EngineSpec") -> str | None:
    """Why the model's weights leave its GPUs no room for KV cache, or None."""
    # (loaded late: see _known_model)
    from kvsched.timing.kvpool import DEFAULT_UTILIZATION, PoolDoesNotFit, kv_pool_blocks

    try:
        kv_pool_blocks(time.model, time.gpu, time.tp, engine.block_size,
                       engine.gpu_memory_utilization or DEFAULT_UTILIZATION,
                       engine.max_num_batched_tokens, engine.max_num_seqs,
                       engine.kv_cache_dtype, time.weight_dtype,
                       enforce_eager=engine.enforce_eager)
    except PoolDoesNotFit as exc:
        return str(exc).split("; raise")[0]
    return None


# -- workloads --------------------------------------------------------------------------


class ConstantLen(Strict):
    kind: Literal["constant"]
    value: TokenLen


class UniformLen(Strict):
    """Integers from `low` to `high`, both included."""

    kind: Literal["uniform"]
    low: TokenLen
    high: TokenLen

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class LognormalLen(Strict):
    """exp(Normal(ln median, sigma)), rounded, clipped to [min, max]."""

    kind: Literal["lognormal"]
    median: Annotated[float, Field(ge=1, le=MAX_TOKENS)]
    sigma: Annotated[float, Field(ge=0, le=MAX_SIGMA)]
    min: TokenLen = 1
    max: TokenLen | None = None  # default: MAX_TOKENS

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class EmpiricalLen(Strict):
    """Sampled with replacement from one column of a CSV or JSONL file."""

    kind: Literal["empirical"]
    path: str
    column: str


LengthSpec = Annotated[ConstantLen | UniformLen | LognormalLen | EmpiricalLen,
                       Field(discriminator="kind")]


def _expand_length(value: Any) -> Any:
    return {"kind": "constant", "value": value} if isinstance(value, int) and not isinstance(
        value, bool) else value


class AllAtOnce(Strict):
    kind: Literal["all_at_once"]
    at: Time = 0.0


class Poisson(Strict):
    kind: Literal["poisson"]
    rate: Rate


class Gamma(Strict):
    """Inter-arrival times with mean 1/rate and coefficient of variation `cv` (>1: bursty)."""

    kind: Literal["gamma"]
    rate: Rate
    cv: Annotated[float, Field(ge=MIN_CV, le=MAX_CV)]


class Fixed(Strict):
    kind: Literal["fixed"]
    interval: Interval


ArrivalSpec = Annotated[AllAtOnce | Poisson | Gamma | Fixed, Field(discriminator="kind")]


class RequestClass(Strict):
    """One class of a synthetic mix: its share and its length distributions."""

    name: Annotated[str, Field(min_length=1)]
    weight: PositiveFloat
    prompt_len: LengthSpec
    output_len: LengthSpec
    priority: Priority = 0

    @field_validator("prompt_len", "output_len", mode="before")
    @classmethod
    def expand_lengths(cls, value: Any) -> Any:
        return _expand_length(value)


MAX_HASH_ID = (1 << 56) - 1  # a block id is a segment's local id (kvsched.workload)
HashId = Annotated[int, Field(ge=0, le=MAX_HASH_ID)]


class InlineRequest(Strict):
    """One request. `prefix_group`/`prefix_len`: requests of a group share their first
    `prefix_len` tokens (`prefix_len: 0` with no or an empty group: no shared prefix).
    `hash_ids`: one block id per `hash_block_tokens` tokens of the prompt's start (at most
    ceil(prompt_len / hash_block_tokens) ids; the last may be a partial block), instead of a
    group. `after`: the id of an earlier request (a conversation's previous turn); this one
    arrives `think_time` after that one ends (`arrival` is then not given)."""

    id: str | int | None = None
    arrival: Time = 0.0
    prompt_len: TokenLen
    output_len: TokenLen
    priority: Priority = 0
    class_: str | None = Field(default=None, alias="class")
    session: str | int | None = None
    prefix_group: str | int | None = None
    prefix_len: Annotated[int, Field(ge=0, le=MAX_TOKENS)] | None = None
    hash_ids: Annotated[list[HashId], Field(max_length=MAX_TOKENS)] | None = None
    after: str | int | None = None
    think_time: NonNegativeFloat = 0.0

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              allow_inf_nan=False)

    def group(self) -> str | None:
        """The prefix group's name, or None (no group, an empty one, or `prefix_len: 0`
        with no group: what a dataframe writes for a row without one)."""
        return None if self.prefix_group in (None, "") else str(self.prefix_group)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.group() is None:
            if self.prefix_len:
                raise ValueError("give prefix_group and prefix_len together")
        elif self.prefix_len is None:
            raise ValueError("give prefix_group and prefix_len together")
        elif self.prefix_len == 0:
            raise ValueError(f"prefix_group {str(self.prefix_group)!r} has prefix_len 0; "
                             f"expected 1..prompt_len (a prefix_len of 0 goes with no "
                             f"prefix_group: no shared prefix)")
        if self.group() is not None and self.hash_ids is not None:
            raise ValueError("give hash_ids or prefix_group/prefix_len, not both")
        if self.prefix_len is not None and self.prefix_len > self.prompt_len:
            raise ValueError(f"prefix_len ({self.prefix_len}) must be <= prompt_len "
                             f"({self.prompt_len})")
        if self.after is None and "think_time" in self.model_fields_set:
            raise ValueError("think_time is for a turn that comes after another (after: ID)")
        if self.after is not None and "arrival" in self.model_fields_set:
            raise ValueError("a turn with after arrives think_time after that request ends; "
                             "give no arrival")
        return self


class InlineWorkload(Strict):
    """`hash_block_tokens`: the tokens each request's `hash_ids` entry stands for."""

    kind: Literal["inline"]
    requests: Annotated[list[InlineRequest], Field(min_length=1)]
    hash_block_tokens: TokenLen = 512


MAX_GROUPS = 1_000_000
MAX_TURNS = 1_000


class SystemPrompts(Strict):
    """Shared system prompts: a `share` of the requests (of the conversations, with
    `sessions`) start with the prompt of one of `groups` groups, chosen uniformly. Each
    group's prompt has `prefix_len` tokens (drawn once per group) and is put before the
    prompt drawn from `prompt_len`. With `classes`, only requests of those `mix` classes
    may have one (the share applies within them)."""

    groups: Annotated[int, Field(ge=1, le=MAX_GROUPS)]
    prefix_len: LengthSpec
    share: Annotated[float, Field(ge=0, le=1)] = 1.0
    classes: Annotated[list[str], Field(min_length=1)] | None = None

    @field_validator("prefix_len", mode="before")
    @classmethod
    def expand_lengths(cls, value: Any) -> Any:
        return _expand_length(value)


class ExponentialTime(Strict):
    kind: Literal["exponential"]
    mean: NonNegativeFloat


class Sessions(Strict):
    """Multi-turn conversations. The arrival process (with `num_requests` or `duration`)
    gives each conversation's first turn, drawn as any request; the conversation has
    `turns` turns in all. A later turn's prompt is the previous prompt + its answer +
    `user_len` new tokens, its answer drawn from `output_len` (the class's, with a `mix`);
    it arrives `think_time` after the previous answer finished (a number, or
    `{kind: exponential, mean: M}`)."""

    turns: LengthSpec
    user_len: LengthSpec
    think_time: NonNegativeFloat | ExponentialTime = 0.0

    @field_validator("turns", "user_len", mode="before")
    @classmethod
    def expand_lengths(cls, value: Any) -> Any:
        return _expand_length(value)


class SyntheticWorkload(Strict):
    """`num_requests` or `duration`; lengths from `prompt_len`/`output_len` or a `mix`;
    optional shared `system_prompts` and multi-turn `sessions`."""

    kind: Literal["synthetic"]
    num_requests: Annotated[int, Field(ge=1, le=MAX_SYNTHETIC_REQUESTS)] | None = None
    duration: PositiveFloat | None = None
    arrival: ArrivalSpec
    prompt_len: LengthSpec | None = None
    output_len: LengthSpec | None = None
    priority: Priority = 0
    mix: Annotated[list[RequestClass], Field(min_length=1)] | None = None
    system_prompts: SystemPrompts | None = None
    sessions: Sessions | None = None

    @model_validator(mode="after")
    def _system_prompt_classes(self) -> Self:
        prompts = self.system_prompts
        if prompts is None or prompts.classes is None:
            return self
        names = [c.name for c in self.mix or ()]
        unknown = [name for name in prompts.classes if name not in names]
        if unknown:
            known = ", ".join(names) if names else "none: give a mix"
            raise ValueError(f"system_prompts.classes: no mix class {unknown[0]!r} "
                             f"(classes: {known})")
        return self

    @field_validator("prompt_len", "output_len", mode="before")
    @classmethod
    def expand_lengths(cls, value: Any) -> Any:
        return _expand_length(value)

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if (self.num_requests is None) == (self.duration is None):
            raise ValueError("give exactly one of num_requests or duration")
        if self.duration is not None and self.arrival.kind == "all_at_once":
            raise ValueError("all_at_once arrivals need num_requests, not duration")
        if self.mix is None and (self.prompt_len is None or self.output_len is None):
            raise ValueError("give prompt_len and output_len, or a mix of classes")
        if self.mix is not None and (self.prompt_len is not None or self.output_len is not None):
            raise ValueError("give either prompt_len/output_len or a mix, not both")
        return self


class TraceColumns(Strict):
    """Column names of a trace in another format; `arrival_unit` scales its times to seconds.
    Without `arrival_time` the file holds lengths only, and the workload's `arrival` process
    gives the times."""

    arrival_time: str | None = None
    prompt_len: str
    output_len: str
    priority: str | None = None
    class_: str | None = Field(default=None, alias="class")
    request_id: str | None = None
    session: str | None = None
    prefix_group: str | None = None
    prefix_len: str | None = None
    hash_ids: str | None = None
    after: str | None = None
    think_time: str | None = None
    arrival_unit: Literal["s", "ms", "us", "datetime"] = "s"

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_prefix_source(self) -> Self:
        if (self.prefix_group is None) != (self.prefix_len is None):
            raise ValueError("give prefix_group and prefix_len together")
        if self.hash_ids is not None and self.prefix_group is not None:
            raise ValueError("give hash_ids or prefix_group/prefix_len, not both")
        return self


class TraceWorkload(Strict):
    """Replay a CSV or JSONL file. Window `[start, start + duration)` in trace seconds, then
    `limit` rows; `time_scale` multiplies arrival times (0.5 replays twice as fast).
    A length-only file (`format: lengths`, or `columns` without `arrival_time`) keeps each
    row's (prompt, output) pair, in file order, and takes its times from `arrival` (seeded).
    `hash_block_tokens`: the tokens each `hash_ids` entry stands for (Mooncake: 512)."""

    kind: Literal["trace"]
    path: str
    format: one_of(FORMATS) | None = None  # type: ignore[valid-type]
    columns: TraceColumns | None = None
    arrival: ArrivalSpec | None = None
    limit: PositiveInt | None = None
    start: NonNegativeFloat = 0.0
    duration: PositiveFloat | None = None
    time_scale: Annotated[float, Field(ge=1e-6, le=1e6)] = 1.0
    hash_block_tokens: TokenLen = 512

    @model_validator(mode="after")
    def _one_layout(self) -> Self:
        if (self.format is None) == (self.columns is None):
            raise ValueError(f"give exactly one of format ({', '.join(FORMATS)}) or columns")
        lengths_only = self.format == "lengths" or (
            self.columns is not None and self.columns.arrival_time is None)
        if lengths_only and self.arrival is None:
            raise ValueError("a length-only trace needs an arrival process, e.g. arrival: "
                             "{kind: poisson, rate: 2}")
        if not lengths_only and self.arrival is not None:
            raise ValueError("arrival is for length-only traces (format: lengths, or columns "
                             "without arrival_time); this trace has its own arrival times")
        return self


WorkloadSpec = Annotated[InlineWorkload | SyntheticWorkload | TraceWorkload,
                         Field(discriminator="kind")]


# -- the scenario -----------------------------------------------------------------------

OPS = (">", ">=", "<", "<=", "==", "!=")


class Expectation(Strict):
    """A claim on a variant's summary: `metric op value`. With `per`, the metric is first
    divided by another metric of the same variant (`num_starved_long per num_requests_long`);
    with `ratio_to`, the figure is divided by the same figure of another variant."""

    variant: str
    metric: str
    op: Literal[">", ">=", "<", "<=", "==", "!="]
    value: float
    ratio_to: str | None = None
    per: str | None = None
    note: str | None = None


class SloSpec(Strict):
    """`slo:` targets that goodput is measured against (in the run's time unit); a request
    counts when it finishes within every target given."""

    ttft: PositiveFloat | None = None
    e2e: PositiveFloat | None = None
    tpot: PositiveFloat | None = None


class AdmissionSpec(Strict):
    """`admission:` reject at arrival when the estimated TTFT exceeds `ttft_slo`."""

    ttft_slo: PositiveFloat | None = None  # default: slo.ttft
    estimator: one_of(Estimator) = Estimator.TOKENS.value  # type: ignore[valid-type]
    window: PositiveInt = 200


class BackpressureSpec(Strict):
    """`backpressure:` the thrash signal's window (steps), thresholds, and what it does
    while up: none (only recorded), pause (admit nothing) or reserve (admit only what the pool
    can carry to the end)."""

    window: PositiveInt = 100
    threshold: NonNegativeFloat = 0.2
    release: NonNegativeFloat = 0.1
    act: one_of(Action) = Action.NONE.value  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.release > self.threshold:
            raise ValueError(f"release ({self.release}) must be <= threshold ({self.threshold})")
        return self


class DiagnosisSpec(Strict):
    """`diagnosis:` detector thresholds (see kvsched.records.diagnosis) and the baseline
    variant."""

    baseline: str | None = None  # default: the scenario's first variant
    thrash_ratio: NonNegativeFloat = 0.2
    preemptions_per_request: NonNegativeFloat = 0.2
    hol_factor: PositiveFloat = 2.0
    tail_ratio: PositiveFloat = 5.0
    class_tail_ratio: PositiveFloat = 5.0
    slo_miss_share: Annotated[float, Field(ge=0, le=1)] = 0.05
    overtaken_factor: PositiveFloat = 10.0
    overtaken_by: PositiveInt = 10
    overload_ratio: PositiveFloat = 1.2
    overload_queue: NonNegativeInt = 10
    overload_wait: PositiveFloat = 1.0


class RouterSpec(BaseModel):
    """`cluster.router:` a name, or `{name, <params>}`; see `kvsched.routers`."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, allow_inf_nan=False)
    name: str

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _known_router(self) -> Self:
        # the routers (six modules and numpy): only a cluster names one
        from kvsched.routers import check_router

        check_router(self.name, self.params())  # never imports a user's module
        return self


class ReplicaSpec(Strict):
    """One entry of `cluster.replicas:` when it is a list: `count` replicas whose engine is
    the variant's with the `engine` keys given here replaced, and whose time model is `time`
    (default: the variant's)."""

    count: PositiveInt = 1
    engine: EngineSpec | None = None
    time: TimeSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _auto_pool(cls, data: Any) -> Any:
        return _auto_entry(data)


def _auto_entry(data: Any) -> Any:
    """`engine.num_blocks: auto` (given, or marked by `RunSpec`) of a fleet entry or a P/D
    pool: its own pool."""
    engine = data.get("engine") if isinstance(data, dict) else None
    if not (isinstance(engine, dict) and engine.get("num_blocks") == "auto"):
        return data
    if not _is_roofline(data.get("time")):
        raise ValueError("engine.num_blocks: auto needs time: {kind: roofline, model: ..., "
                         "gpu: ..., tp: ...} here or in the variant to size the pool")
    return {**data, "engine": _sized(engine, data["time"])}


def _expand_router(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class PoolSpec(Strict):
    """`cluster.prefill:` or `cluster.decode:` one pool of a P/D cluster: `replicas`
    instances whose engine is the variant's with the `engine` keys given here replaced, whose
    time model is `time` (default: the variant's), routed by `router` (default:
    `cluster.router`)."""

    replicas: PositiveInt = 1
    engine: EngineSpec | None = None
    time: TimeSpec | None = None
    router: RouterSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _auto_pool(cls, data: Any) -> Any:
        return _auto_entry(data)

    @field_validator("router", mode="before")
    @classmethod
    def expand_router(cls, value: Any) -> Any:
        return _expand_router(value)


class TransferSpec(Strict):
    """`cluster.transfer:` the link a split request's KV crosses (`kvsched.cluster.transfer`):
    `bandwidth_gbps` gigabits per second, shared fairly by the transfers under way;
    `latency_ms` and `per_request_ms`, paid by each transfer before its bytes flow;
    `kv_bytes_per_token` (default: the prefill pool's roofline model, K and V of every layer
    at the engine's KV dtype)."""

    bandwidth_gbps: PositiveFloat
    latency_ms: NonNegativeFloat = 0.0
    per_request_ms: NonNegativeFloat = 0.0
    kv_bytes_per_token: PositiveFloat | None = None


class PromptOver(Strict):
    """`pd_decider: {prompt_over: N}`: split only prompts longer than N tokens."""

    prompt_over: NonNegativeInt


class ClusterSpec(Strict):
    """`cluster:` N replicas behind a router (see `kvsched.cluster.replicas`). `replicas`: a
    count of replicas like the variant's engine, or a list of overrides (a mixed fleet).
    `signal_delay`: the router sees each replica as it was this long ago (time units).
    `imbalance_ttft_ratio` and `imbalance_queue`: the imbalance detector's thresholds (see
    `kvsched.records.diagnosis.imbalance`)."""

    replicas: Annotated[list[ReplicaSpec], Field(min_length=1)] = [ReplicaSpec()]
    # (made unvalidated: validating it here would import every router with the schema)
    router: RouterSpec = RouterSpec.model_construct(name="round_robin")
    signal_delay: NonNegativeFloat = 0.0
    imbalance_ttft_ratio: Annotated[float, Field(gt=1)] = 3.0
    imbalance_queue: PositiveInt = 8
    # P/D (`kvsched.cluster.pd`): two pools instead of `replicas`, a link, which requests split
    prefill: PoolSpec | None = None
    decode: PoolSpec | None = None
    transfer: TransferSpec | None = None
    pd_decider: Literal["always", "never"] | PromptOver = "always"

    @field_validator("router", mode="before")
    @classmethod
    def expand_router(cls, value: Any) -> Any:
        return _expand_router(value)

    @model_validator(mode="before")
    @classmethod
    def _pools_as_replicas(cls, data: Any) -> Any:
        """A P/D cluster's fleet is its pools: `replicas` becomes the prefill pool's entry
        then the decode pool's (the decode pool's alone under `pd_decider: never`, which
        builds today's cluster of it), so that every fleet rule reads them as entries."""
        if not isinstance(data, dict):
            return data
        pools = [key for key in ("prefill", "decode") if data.get(key) is not None]
        if not pools:
            for key in ("transfer", "pd_decider"):
                if data.get(key) is not None:
                    raise ValueError(f"{key}: only with cluster.prefill and cluster.decode "
                                     "(a P/D cluster)")
            return data
        if len(pools) == 1:
            other = "decode" if pools == ["prefill"] else "prefill"
            raise ValueError(f"a P/D cluster needs both prefill and decode; {other} is missing")
        if "replicas" in data and data["replicas"] != _pool_entries(data):
            raise ValueError("replicas: a P/D cluster has prefill.replicas and "
                             "decode.replicas instead")
        return {**data, "replicas": _pool_entries(data)}

    @model_validator(mode="after")
    def _link_needed(self) -> Self:
        if self.is_pd and self.transfer is None:
            raise ValueError("transfer: a P/D cluster needs transfer: {bandwidth_gbps: ...}")
        return self

    @property
    def is_pd(self) -> bool:
        """Requests may split: pools given and a decider other than `never`."""
        return self.prefill is not None and self.pd_decider != "never"

    @property
    def num_prefill(self) -> int:
        """Replicas of the prefill pool (the first entries of `replicas`), 0 if none run."""
        return self.prefill.replicas if self.is_pd and self.prefill is not None else 0

    @field_validator("replicas", mode="before")
    @classmethod
    def expand_replicas(cls, value: Any) -> Any:
        """`replicas: N` means `[{count: N}]`: N replicas like the variant's engine."""
        if isinstance(value, bool) or not isinstance(value, int | list):
            raise ValueError("expected a number of replicas or a list of replica overrides")
        if isinstance(value, int):
            if value < 1:
                raise ValueError(f"expected a number of replicas >= 1, got {value}")
            return [{"count": value}]
        return value

    @field_validator("replicas", mode="after")
    @classmethod
    def _bounded(cls, value: list[ReplicaSpec]) -> list[ReplicaSpec]:
        total = sum(entry.count for entry in value)
        if total > MAX_REPLICAS:
            raise ValueError(f"{total:,} replicas; a cluster may have at most "
                             f"{MAX_REPLICAS:,} (each is a full engine with its own queue, "
                             "pool and steps)")
        return value

    @property
    def num_replicas(self) -> int:
        return sum(entry.count for entry in self.replicas)


def _on_pools(data: dict, rule: Callable[[dict], dict]) -> dict:
    """`rule` (a rule over raw `cluster.replicas` entries: GPU defaults, pool sizing)
    applied to a P/D cluster's raw pools as if they were entries."""
    cluster = data.get("cluster")
    if not isinstance(cluster, dict):
        return data
    keys = [k for k in ("prefill", "decode") if isinstance(cluster.get(k), dict)]
    if not keys:
        return data
    entries = [{k: cluster[key][k] for k in ("engine", "time") if k in cluster[key]}
               for key in keys]
    done = rule({**data, "cluster": {"replicas": entries}})["cluster"]["replicas"]
    out = dict(cluster)
    for key, entry in zip(keys, done, strict=True):
        pool = {k: v for k, v in cluster[key].items() if k not in ("engine", "time")}
        out[key] = {**pool, **entry}
    return {**data, "cluster": out}


def _pool_entries(cluster: dict) -> list[dict]:
    """A raw P/D cluster's pools as `replicas` entries (the decode pool's alone under
    `pd_decider: never`)."""
    keys = ["decode"] if cluster.get("pd_decider") == "never" else ["prefill", "decode"]
    out = []
    for key in keys:
        pool = cluster.get(key)
        if not isinstance(pool, dict):
            continue  # (the pool's own validation names what is wrong with it)
        entry = {"count": pool.get("replicas", 1)}
        entry.update({k: pool[k] for k in ("engine", "time") if k in pool})
        out.append(entry)
    return out


def _is_roofline(time: Any) -> bool:
    return isinstance(time, dict) and time.get("kind") == "roofline"


def _sized(engine: dict, time: dict) -> dict:
    """`engine` with `num_blocks` the pool of `time`'s model on its GPUs (at the engine's
    block size and memory share); without it where the model or GPU is unknown or a field
    missing or mistyped: the fields' own validation names that."""
    # (loaded late: see _known_model)
    from kvsched.timing.hardware import UnknownHardware
    from kvsched.timing.kvpool import DEFAULT_UTILIZATION, kv_pool_blocks

    full = expand_preset(engine)  # the budget and seats the profile run is sized for
    try:
        blocks = kv_pool_blocks(time["model"], time["gpu"], time.get("tp", 1),
                                engine.get("block_size") or ENGINE_DEFAULTS["block_size"],
                                engine.get("gpu_memory_utilization") or DEFAULT_UTILIZATION,
                                full.get("max_num_batched_tokens",
                                         ENGINE_DEFAULTS["max_num_batched_tokens"]),
                                full.get("max_num_seqs", full.get("max_running_requests",
                                                    ENGINE_DEFAULTS["max_num_seqs"])),
                                _known(engine.get("kv_cache_dtype", "auto"), KV_DTYPE_BYTES),
                                _known(time.get("weight_dtype", "bf16"), WEIGHT_DTYPE_BYTES),
                                enforce_eager=engine.get("enforce_eager") is True)
    except (KeyError, TypeError, UnknownHardware):
        return {k: v for k, v in engine.items() if k != "num_blocks"}
    return {**engine, "num_blocks": blocks}


def _known(value: Any, table: dict) -> str:
    """`value` if it names an entry of `table`, else KeyError (the field's check names it)."""
    if not isinstance(value, str) or value not in table:
        raise KeyError(value)
    return value


def _own_engine(entry: Any) -> dict:
    """A raw `cluster.replicas` entry's `engine:` mapping ({} if none)."""
    own = entry.get("engine") if isinstance(entry, dict) else None
    return own if isinstance(own, dict) else {}


def _sizes_own_pool(entry: Any, auto: bool) -> bool:
    """Whether a raw replica entry's pool is sized from a GPU: it asks for `num_blocks:
    auto`, or has a roofline of its own and no `num_blocks` under a variant that asks."""
    own = _own_engine(entry)
    return own.get("num_blocks") == "auto" or (
        auto and "num_blocks" not in own and isinstance(entry, dict)
        and _is_roofline(entry.get("time")))


def _auto_replica_pools(data: dict, engine: dict, auto: bool) -> dict:
    """Marks `num_blocks: auto` on each `cluster.replicas` entry that asks for it, or that
    has a roofline of its own under a variant that does, with the roofline (its own, else
    the variant's) and the variant's block size and memory share beside it: `ReplicaSpec`
    sizes it, so that an error names the entry."""
    cluster = data.get("cluster")
    entries = cluster.get("replicas") if isinstance(cluster, dict) else None
    if not (isinstance(cluster, dict) and isinstance(entries, list)):
        return data
    out = []
    for entry in entries:
        if isinstance(entry, dict) and _sizes_own_pool(entry, auto):
            own, time = _own_engine(entry), entry.get("time")
            inherited = {k: engine[k] for k in ("block_size", "gpu_memory_utilization",
                                                 "kv_cache_dtype", "enforce_eager",
                                                 "max_num_batched_tokens", "max_num_seqs")
                         if k in engine and k not in own}
            entry = {**entry, "engine": {**own, **inherited, "num_blocks": "auto"}}
            if not _is_roofline(time) and _is_roofline(data.get("time")):
                entry["time"] = data["time"]  # the variant's: what the replica runs anyway
        out.append(entry)
    return {**data, "cluster": {**cluster, "replicas": out}}


def _gpu_batch_defaults(data: dict) -> dict:
    """The variant's engine and each fleet entry with a time model of its own take their
    preset's defaults for their GPU (`kvsched.timing.serve_defaults`) under the keys written."""
    engine, time = data.get("engine"), data.get("time")
    if isinstance(engine, dict):
        data = {**data, "engine": with_defaults(engine, time)}
    cluster = data.get("cluster")
    entries = cluster.get("replicas") if isinstance(cluster, dict) else None
    if not (isinstance(cluster, dict) and isinstance(entries, list)):
        return data
    base = engine if isinstance(engine, dict) else {}
    out = []
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("time"), dict):
            entry = {**entry, "engine": with_defaults(_own_engine(entry), entry["time"], base)}
            if not entry["engine"]:
                del entry["engine"]
        out.append(entry)
    return {**data, "cluster": {**cluster, "replicas": out}}


def _expand_policy(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class RunSpec(Strict):
    """What one variant runs: the base configuration with the variant's overrides applied."""

    description: str = ""
    seed: NonNegativeInt = 0
    engine: EngineSpec = EngineSpec()
    policy: PolicySpec = PolicySpec(name="fcfs")
    time: TimeSpec = StepsTime(kind="steps")
    workload: WorkloadSpec
    slo: SloSpec | None = None
    admission: AdmissionSpec | None = None
    backpressure: BackpressureSpec = BackpressureSpec()
    diagnosis: DiagnosisSpec = DiagnosisSpec()
    cluster: ClusterSpec | None = None  # None: one replica, today's records

    @model_validator(mode="before")
    @classmethod
    def _auto_pool(cls, data: Any) -> Any:
        """`engine.num_blocks: auto` becomes the KV pool of the roofline's model and GPUs;
        a fleet's replica with a roofline of its own gets its own model's pool."""
        if not isinstance(data, dict):
            return data
        data = _on_pools(_gpu_batch_defaults(data), _gpu_batch_defaults)
        engine, time = data.get("engine"), data.get("time")
        auto = isinstance(engine, dict) and engine.get("num_blocks") == "auto"
        base = engine if isinstance(engine, dict) else {}
        data = _auto_replica_pools(data, base, auto)
        data = _on_pools(data, lambda d: _auto_replica_pools(d, base, auto))
        if not auto:
            return data
        assert isinstance(engine, dict)
        if not _is_roofline(time):
            if cls is not RunSpec:  # a scenario's base may leave `time` to its variants,
                rest = {k: v for k, v in engine.items() if k != "num_blocks"}
                return {**data, "engine": rest}  # each of which is validated on its own
            raise ValueError("engine.num_blocks: auto needs time: {kind: roofline, model: ..., "
                             "gpu: ..., tp: ...} to size the pool")
        assert isinstance(time, dict)
        return {**data, "engine": _sized(engine, time)}

    @model_validator(mode="after")
    def _offload_link(self) -> Self:
        """A host tier's loads take seconds, and need the bytes of a block."""
        fleet = [("engine", self.engine, self.time)]
        if self.cluster is not None:
            fleet += [(f"cluster.replicas[{i}].engine", engine, entry.time or self.time)
                      for i, (entry, engine) in enumerate(zip(
                          self.cluster.replicas, replica_engines(self), strict=True))]
        for where, engine, time in fleet:
            offload = engine.kv_offload
            if offload is None:
                continue
            if isinstance(time, StepsTime):
                raise ValueError(f"{where}.kv_offload: a host tier needs a time model in "
                                 "seconds (its loads take time), not the step clock")
            if offload.block_bytes is None and not isinstance(time, RooflineTime):
                raise ValueError(f"{where}.kv_offload.block_bytes: needed unless the time "
                                 "model is a roofline (whose model gives it)")
        return self

    @model_validator(mode="after")
    def _pd_link(self) -> Self:
        """A P/D cluster's link counts seconds, and needs the KV bytes of a token."""
        cluster = self.cluster
        if cluster is None or not cluster.is_pd:
            return self
        assert cluster.prefill is not None and cluster.decode is not None
        prefill = cluster.prefill.time or self.time
        for key, pool in (("prefill", cluster.prefill), ("decode", cluster.decode)):
            if isinstance(pool.time or self.time, StepsTime):
                raise ValueError(f"cluster.{key}: a P/D cluster needs a time model in seconds "
                                 "(the link's bandwidth and latency are), not the step clock")
        assert cluster.transfer is not None
        if cluster.transfer.kv_bytes_per_token is None and not isinstance(prefill, RooflineTime):
            raise ValueError("cluster.transfer.kv_bytes_per_token: needed unless the prefill "
                             "pool's time is a roofline (whose model gives it)")
        return self

    @model_validator(mode="after")
    def _admission_target(self) -> Self:
        if self.admission is not None and self.admission.ttft_slo is None and (
                self.slo is None or self.slo.ttft is None):
            raise ValueError("admission needs a ttft_slo (or slo.ttft)")
        return self

    @field_validator("policy", mode="before")
    @classmethod
    def expand_policy(cls, value: Any) -> Any:
        return _expand_policy(value)


class VariantSpec(Strict):
    """A named override of the base: any of the keys in `OVERRIDABLE`."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    name: Name


class ScenarioSpec(RunSpec):
    """A whole file. The base may leave `workload` to its variants."""

    name: ScenarioName
    workload: WorkloadSpec | None = None  # type: ignore[assignment]
    variants: list[VariantSpec] = []
    expect: list[Expectation] = []


OVERRIDABLE = ("description", "seed", "engine", "policy", "time", "workload", "slo", "admission",
               "backpressure", "diagnosis", "cluster")
