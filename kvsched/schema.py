"""The scenario file's schema: typed models, unknown keys refused, defaults from the engine.

Shorthands are expanded before validation so that every field has one type: `policy: spf`
means `{name: spf}`, a length given as a number means `{kind: constant, value: N}`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from kvsched.config import EngineConfig
from kvsched.policies import make_policy
from kvsched.presets import PRESETS
from kvsched.presets import expand as expand_preset

_ENGINE = EngineConfig()
MAX_SYNTHETIC_REQUESTS = 10_000_000
PositiveInt = Annotated[int, Field(ge=1)]


def _not_only_dots(name: str) -> str:
    if set(name) == {"."}:
        raise ValueError(f"'{name}' cannot name a folder; use letters, digits, '_', '-' or '.'")
    return name


# A name becomes a folder: letters, digits, '_', '-', '.', but not only dots ('.', '..').
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$"),
                 AfterValidator(_not_only_dots)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


# -- engine, policy, time ---------------------------------------------------------------


class EngineSpec(Strict):
    """`engine:` — see `kvsched.config.EngineConfig` for what each knob means; `preset`
    (`kvsched.presets`) fills in the rest. vLLM's spellings `enable_chunked_prefill` and
    `preemption_mode`, and SGLang's `max_running_requests`, are accepted for
    `chunked_prefill`, `preemption` and `max_num_seqs`."""

    preset: Literal[tuple(PRESETS)] = "lesson"  # type: ignore[valid-type]
    max_num_batched_tokens: PositiveInt = _ENGINE.max_num_batched_tokens
    max_num_seqs: PositiveInt = _ENGINE.max_num_seqs
    block_size: PositiveInt = _ENGINE.block_size
    # also "auto": the pool the GPUs of `time: {kind: roofline}` hold (RunSpec resolves it)
    num_blocks: PositiveInt = _ENGINE.num_blocks
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None  # auto: 0.9
    watermark: Annotated[float, Field(ge=0, lt=1)] = _ENGINE.watermark
    preemption: Literal["recompute", "swap"] = _ENGINE.preemption.value
    max_steps: PositiveInt = _ENGINE.max_steps
    victim: Literal["last_admitted", "lowest_priority", "fewest_generated", "by_policy"] = (
        _ENGINE.victim.value)
    requeue: Literal["front", "back", "by_policy"] = _ENGINE.requeue.value
    mix_prefill_decode: bool = _ENGINE.mix_prefill_decode
    admit_after_preempt: bool = _ENGINE.admit_after_preempt
    chunked_prefill: bool = _ENGINE.chunked_prefill
    long_prefill_token_threshold: NonNegativeInt = _ENGINE.long_prefill_token_threshold
    on_unschedulable: Literal["starve", "reject"] = _ENGINE.on_unschedulable.value
    step_order: Literal["decode_first", "prefill_first", "running_loop"] = (
        _ENGINE.step_order.value)
    max_model_len: Annotated[int, Field(ge=2)] | None = None
    null_block: bool = _ENGINE.null_block
    scheduler_reserve_full_isl: bool = _ENGINE.scheduler_reserve_full_isl
    preemption_warning: bool = _ENGINE.preemption_warning
    swapped_fifo: bool = _ENGINE.swapped_fifo
    delay_factor: NonNegativeFloat = _ENGINE.delay_factor
    max_queued_requests: PositiveInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _preset_and_aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, name in _ENGINE_ALIASES.items():
            if alias in data:
                value = data.pop(alias)
                if name in data and data[name] != value:
                    raise ValueError(f"'{alias}' and '{name}' are the same key and disagree")
                data[name] = value
        return expand_preset(data)

    def to_config(self) -> EngineConfig:
        return EngineConfig(**self.model_dump(exclude={"gpu_memory_utilization", "preset"}))


_ENGINE_ALIASES = {"enable_chunked_prefill": "chunked_prefill",
                   "preemption_mode": "preemption",
                   "max_running_requests": "max_num_seqs"}  # SGLang's name


class PolicySpec(BaseModel):
    """`policy:` a name, or `{name, <params>}` / `{name, params: {...}}`."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, allow_inf_nan=False)
    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    def all_params(self) -> dict[str, Any]:
        return {**self.params, **(self.model_extra or {})}

    @model_validator(mode="after")
    def _known_policy(self) -> PolicySpec:
        make_policy(self.name, **self.all_params())  # ValueError names what is wrong
        return self


class StepsTime(Strict):
    kind: Literal["steps"]


class ConstantTime(Strict):
    kind: Literal["constant"]
    step_time: PositiveFloat


class LinearTime(Strict):
    kind: Literal["linear"]
    base: PositiveFloat = 0.005
    per_prefill_token: NonNegativeFloat = 0.0001
    per_decode: NonNegativeFloat = 0.0001
    per_kv_token: NonNegativeFloat = 0.0
    per_swapped_block: NonNegativeFloat = 0.0


class RooflineTime(Strict):
    """Step times from the model and the GPU (`kvsched.roofline`); `model` is a Hugging Face id
    of the catalogue or the path of a config.json."""

    kind: Literal["roofline"]
    model: str
    gpu: str
    tp: PositiveInt = 1

    @model_validator(mode="after")
    def _known_hardware(self) -> RooflineTime:
        from kvsched.hardware import load_gpu, load_model

        load_model(self.model)  # ValueError: one line listing the known names
        load_gpu(self.gpu)
        return self


class ProfiledTime(Strict):
    """Step times replayed from operator profiles in Vidur's CSV format (`kvsched.profiled`)."""

    kind: Literal["profiled"]
    profiles: str
    model: str
    tp: PositiveInt = 1

    @model_validator(mode="after")
    def _known_model(self) -> ProfiledTime:
        from kvsched.hardware import load_model

        load_model(self.model)
        return self


TimeSpec = Annotated[StepsTime | ConstantTime | LinearTime | RooflineTime | ProfiledTime,
                     Field(discriminator="kind")]

MAX_PLAUSIBLE_STEP_TIME = 10.0  # seconds: a forward pass longer than this is a unit slip


def derived_pool(resolved: dict[str, Any], spec: RunSpec) -> str | None:
    """'num_blocks: auto = N blocks ...' when the variant's raw mapping asked for auto."""
    engine = resolved.get("engine")
    if not (isinstance(engine, dict) and engine.get("num_blocks") == "auto"):
        return None
    time = spec.time
    assert isinstance(time, RooflineTime)
    tokens = int(spec.engine.num_blocks) * spec.engine.block_size
    return (f"engine.num_blocks: auto = {spec.engine.num_blocks:,} blocks ({tokens:,} tokens of "
            f"KV) for {time.model} on {time.tp} x {time.gpu}")


def unit_warnings(spec: RunSpec) -> list[str]:
    """Values that are valid but likely in the wrong unit, one line each naming the field."""
    time = spec.time
    if isinstance(time, ConstantTime) and time.step_time > MAX_PLAUSIBLE_STEP_TIME:
        return [f"time.step_time: {time.step_time:g} s per step is over "
                f"{MAX_PLAUSIBLE_STEP_TIME:g} s; did you mean milliseconds "
                f"({time.step_time / 1000:g})?"]
    if isinstance(time, LinearTime) and time.base > MAX_PLAUSIBLE_STEP_TIME:
        return [f"time.base: {time.base:g} s per step is over {MAX_PLAUSIBLE_STEP_TIME:g} s; "
                "did you mean milliseconds?"]
    return []


# -- workloads --------------------------------------------------------------------------


class ConstantLen(Strict):
    kind: Literal["constant"]
    value: PositiveInt


class UniformLen(Strict):
    """Integers from `low` to `high`, both included."""

    kind: Literal["uniform"]
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformLen:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class LognormalLen(Strict):
    """exp(Normal(ln median, sigma)), rounded, clipped to [min, max]."""

    kind: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegativeFloat
    min: PositiveInt = 1
    max: PositiveInt | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLen:
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
    at: NonNegativeFloat = 0.0


class Poisson(Strict):
    kind: Literal["poisson"]
    rate: PositiveFloat


class Gamma(Strict):
    """Inter-arrival times with mean 1/rate and coefficient of variation `cv` (>1: bursty)."""

    kind: Literal["gamma"]
    rate: PositiveFloat
    cv: PositiveFloat


class Fixed(Strict):
    kind: Literal["fixed"]
    interval: PositiveFloat


ArrivalSpec = Annotated[AllAtOnce | Poisson | Gamma | Fixed, Field(discriminator="kind")]


class RequestClass(Strict):
    """One class of a synthetic mix: its share and its length distributions."""

    name: Annotated[str, Field(min_length=1)]
    weight: PositiveFloat
    prompt_len: LengthSpec
    output_len: LengthSpec
    priority: int = 0

    @field_validator("prompt_len", "output_len", mode="before")
    @classmethod
    def expand_lengths(cls, value: Any) -> Any:
        return _expand_length(value)


class InlineRequest(Strict):
    id: str | int | None = None
    arrival: NonNegativeFloat = 0.0
    prompt_len: PositiveInt
    output_len: PositiveInt
    priority: int = 0
    class_: str | None = Field(default=None, alias="class")

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              allow_inf_nan=False)


class InlineWorkload(Strict):
    kind: Literal["inline"]
    requests: Annotated[list[InlineRequest], Field(min_length=1)]


class SyntheticWorkload(Strict):
    """`num_requests` or `duration`; lengths from `prompt_len`/`output_len` or a `mix`."""

    kind: Literal["synthetic"]
    num_requests: Annotated[int, Field(ge=1, le=MAX_SYNTHETIC_REQUESTS)] | None = None
    duration: PositiveFloat | None = None
    arrival: ArrivalSpec
    prompt_len: LengthSpec | None = None
    output_len: LengthSpec | None = None
    priority: int = 0
    mix: Annotated[list[RequestClass], Field(min_length=1)] | None = None

    @field_validator("prompt_len", "output_len", mode="before")
    @classmethod
    def expand_lengths(cls, value: Any) -> Any:
        return _expand_length(value)

    @model_validator(mode="after")
    def _complete(self) -> SyntheticWorkload:
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
    """Column names of a trace in another format; `arrival_unit` scales its times to seconds."""

    arrival_time: str
    prompt_len: str
    output_len: str
    priority: str | None = None
    class_: str | None = Field(default=None, alias="class")
    request_id: str | None = None
    arrival_unit: Literal["s", "ms", "us", "datetime"] = "s"

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              allow_inf_nan=False)


class TraceWorkload(Strict):
    """Replay a CSV or JSONL file. Window `[start, start + duration)` in trace seconds, then
    `limit` rows; `time_scale` multiplies arrival times (0.5 replays twice as fast)."""

    kind: Literal["trace"]
    path: str
    format: Literal["kvsched", "azure", "mooncake", "vidur"] | None = None
    columns: TraceColumns | None = None
    limit: PositiveInt | None = None
    start: NonNegativeFloat = 0.0
    duration: PositiveFloat | None = None
    time_scale: PositiveFloat = 1.0

    @model_validator(mode="after")
    def _one_layout(self) -> TraceWorkload:
        if (self.format is None) == (self.columns is None):
            raise ValueError("give exactly one of format (kvsched, azure, mooncake, vidur) "
                             "or columns")
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
    """`slo:` targets that goodput is measured against (in the run's time unit)."""

    ttft: PositiveFloat | None = None
    e2e: PositiveFloat | None = None


class AdmissionSpec(Strict):
    """`admission:` reject at arrival when the estimated TTFT exceeds `ttft_slo`."""

    ttft_slo: PositiveFloat | None = None  # default: slo.ttft
    estimator: Literal["tokens", "throughput"] = "tokens"
    window: PositiveInt = 200


class BackpressureSpec(Strict):
    """`backpressure:` the thrash signal's window (steps), thresholds, and what it does
    while up: none (only recorded), pause (admit nothing) or reserve (admit only what the pool
    can carry to the end)."""

    window: PositiveInt = 100
    threshold: NonNegativeFloat = 0.2
    release: NonNegativeFloat = 0.1
    act: Literal["none", "pause", "reserve"] = "none"

    @model_validator(mode="after")
    def _ordered(self) -> BackpressureSpec:
        if self.release > self.threshold:
            raise ValueError(f"release ({self.release}) must be <= threshold ({self.threshold})")
        return self


class DiagnosisSpec(Strict):
    """`diagnosis:` detector thresholds (see kvsched.diagnosis) and the baseline variant."""

    baseline: str | None = None  # default: the scenario's first variant
    thrash_ratio: NonNegativeFloat = 0.2
    preemptions_per_request: NonNegativeFloat = 0.2
    hol_factor: PositiveFloat = 2.0
    tail_ratio: PositiveFloat = 5.0
    class_tail_ratio: PositiveFloat = 5.0
    slo_miss_share: Annotated[float, Field(ge=0, le=1)] = 0.05
    overtaken_factor: PositiveFloat = 10.0
    overtaken_by: PositiveInt = 10


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

    @model_validator(mode="before")
    @classmethod
    def _auto_pool(cls, data: Any) -> Any:
        """`engine.num_blocks: auto` becomes the KV pool of the roofline's model and GPUs."""
        if not isinstance(data, dict):
            return data
        engine, time = data.get("engine"), data.get("time")
        if not (isinstance(engine, dict) and engine.get("num_blocks") == "auto"):
            return data
        if not (isinstance(time, dict) and time.get("kind") == "roofline"):
            if cls is not RunSpec:  # a scenario's base may leave `time` to its variants,
                rest = {k: v for k, v in engine.items() if k != "num_blocks"}
                return {**data, "engine": rest}  # each of which is validated on its own
            raise ValueError("engine.num_blocks: auto needs time: {kind: roofline, model: ..., "
                             "gpu: ..., tp: ...} to size the pool")
        from kvsched.kvpool import kv_pool_blocks

        try:
            blocks = kv_pool_blocks(time["model"], time["gpu"], time.get("tp", 1),
                                    engine.get("block_size", _ENGINE.block_size),
                                    engine.get("gpu_memory_utilization") or 0.9)
        except (KeyError, TypeError):
            return data  # the fields' own validation names what is missing or mistyped
        return {**data, "engine": {**engine, "num_blocks": blocks}}

    @model_validator(mode="after")
    def _admission_target(self) -> RunSpec:
        if self.admission is not None and self.admission.ttft_slo is None and (
                self.slo is None or self.slo.ttft is None):
            raise ValueError("admission needs a ttft_slo (or slo.ttft)")
        return self

    @field_validator("policy", mode="before")
    @classmethod
    def expand_policy(cls, value: Any) -> Any:
        return _expand_policy(value)


class VariantSpec(Strict):
    """A named override of the base: any of description, seed, engine, policy, time, workload."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    name: Name


class ScenarioSpec(RunSpec):
    """A whole file. The base may leave `workload` to its variants."""

    name: Name
    workload: WorkloadSpec | None = None  # type: ignore[assignment]
    variants: list[VariantSpec] = Field(default_factory=list)
    expect: list[Expectation] = Field(default_factory=list)


OVERRIDABLE = ("description", "seed", "engine", "policy", "time", "workload", "slo", "admission",
               "backpressure", "diagnosis")
