"""The roofline time model: a step's duration built per operator from the model, the GPU, the
tensor-parallel degree and a calibration fitted on measured kernels.

Each operator costs the slower of its compute (FLOPs / achieved FLOPS) and its memory traffic
(bytes / achieved bandwidth), achieved = datasheet peak x calibrated efficiency, plus a fixed cost
per kernel; a GEMM's compute counts whole tiles of token rows (the calibration's `gemm_tile`).
Per layer: four GEMMs (qkv, o, gate+up, down: 2 x parameters x tokens FLOPs against the
weights' bytes), five element-wise kernels (two norms, rope, the activation, the residual
add), attention for the prefill chunks (chunk x (cached context + chunk) query-key pairs: the
measured kernels cost as much as the full square, causal mask or not) and
for the decodes (reading their KV context), and two all-reduces when tp > 1 (latency + ring
bytes / bandwidth). Once per step: the LM head on the rows that sample a token, and swaps over
the host link. All times in seconds.

Weights in `weight_dtype` (bf16, or fp8: the layers' GEMMs read half the weight bytes and, on a
GPU with fp8 Tensor Cores, compute at its fp8 peak times the same calibrated efficiency; the LM
head stays bf16, as vLLM's fp8 leaves it) and KV in `kv_cache_dtype` (auto: bf16, or fp8: the
attention reads half the KV bytes, and a swapped block moves half). Activations stay bf16.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvsched.timing.hardware import (
    KV_DTYPE_BYTES,
    WEIGHT_DTYPE_BYTES,
    Calibration,
    Gpu,
    Model,
    load_calibration,
    load_gpu,
    load_model,
)

DTYPE_BYTES = 2  # bf16 activations (and weights and KV cache unless fp8)


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one step computes: prefill chunks as (chunk_tokens, cached_context_tokens) pairs,
    the number of decoding requests, the KV tokens those decodes read (the sum of their
    contexts), and blocks swapped between device and host."""

    prefill_chunks: tuple[tuple[int, int], ...] = ()
    num_decodes: int = 0
    decode_kv_tokens: int = 0
    swapped_blocks: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens through the dense layers: every prefill token and one per decode."""
        tokens = self.num_decodes
        for chunk, _ in self.prefill_chunks:  # (a loop, not sum() of a generator: per step)
            tokens += chunk
        return tokens


@dataclass(frozen=True, slots=True)
class _Gemm:
    """One GEMM of a tp shard: weights k x n (FLOPs and bytes per token precomputed)."""

    weight_bytes: float
    flops_per_token: float
    bytes_per_token: float
    p: float  # the soft maximum's exponent (the knee) for this GEMM's size
    inv_p: float


@dataclass(frozen=True, slots=True)
class RooflineStep:
    """Step durations of `model` on `tp` GPUs of type `gpu`, calibrated by `calibration`
    (default: the shipped fit for that GPU), weights in `weight_dtype` (bf16, fp8) and KV in
    `kv_cache_dtype` (auto, fp8). Satisfies `kvsched.timing.TimeModel`: the four
    pre-summed integers are read as one prefill chunk without cached context."""

    model: Model | str
    gpu: Gpu | str
    tp: int = 1
    calibration: Calibration | None = None
    block_size: int = 16
    unit: str = "s"
    whole_steps: bool = False
    weight_dtype: str = "bf16"
    kv_cache_dtype: str = "auto"
    _layer_cache: dict[int, float] = field(default_factory=dict, init=False, repr=False,
                                           compare=False)
    _head_cache: dict[int, float] = field(default_factory=dict, init=False, repr=False,
                                          compare=False)

    # constants derived in __post_init__ (seconds, or seconds per token, byte or pair)
    _gemms: list[_Gemm] = field(init=False, repr=False, compare=False)
    _head: _Gemm = field(init=False, repr=False, compare=False)
    _kernel: float = field(init=False, repr=False, compare=False)
    _tile: int = field(init=False, repr=False, compare=False)
    _ew_per_token: float = field(init=False, repr=False, compare=False)
    _ew_fixed: float = field(init=False, repr=False, compare=False)
    _attn_fixed: float = field(init=False, repr=False, compare=False)
    _kv_per_token: float = field(init=False, repr=False, compare=False)
    _kv_coef: float = field(init=False, repr=False, compare=False)
    _ar_per_token: float = field(init=False, repr=False, compare=False)
    _ar_fixed: float = field(init=False, repr=False, compare=False)
    _swap_per_block: float = field(init=False, repr=False, compare=False)
    _block_bytes: float = field(init=False, repr=False, compare=False)
    _costs: StepCosts = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        model, gpu = load_model(self.model), load_gpu(self.gpu)
        set_ = object.__setattr__
        set_(self, "model", model)
        set_(self, "gpu", gpu)
        if self.calibration is None:
            set_(self, "calibration", load_calibration(gpu))
        cal = self.calibration
        assert cal is not None
        tp = self.tp
        if not isinstance(tp, int) or tp < 1:
            raise ValueError(f"tp must be an integer >= 1, got {tp}")
        if (problem := model.tp_problem(tp)) is not None:
            raise ValueError(problem)
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.weight_dtype not in WEIGHT_DTYPE_BYTES:
            raise ValueError(f"weight_dtype must be one of {', '.join(WEIGHT_DTYPE_BYTES)}, "
                             f"got {self.weight_dtype!r}")
        if self.kv_cache_dtype not in KV_DTYPE_BYTES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_DTYPE_BYTES)}, "
                             f"got {self.kv_cache_dtype!r}")
        h, hd, b = model.hidden, model.head_dim, DTYPE_BYTES
        wb, kvb = WEIGHT_DTYPE_BYTES[self.weight_dtype], KV_DTYPE_BYTES[self.kv_cache_dtype]
        heads, kv_heads = model.heads / tp, max(model.kv_heads / tp, 1.0)  # KV heads replicate
        flops = gpu.peak_flops * cal.linear_compute_eff
        # fp8 GEMMs at the fp8 peak where the GPU has one; else (Ampere) weight-only, bf16 math
        fp8_peak = gpu.fp8_peak_flops if self.weight_dtype == "fp8" else 0.0
        layer_flops = fp8_peak * cal.linear_compute_eff if fp8_peak else flops
        bandwidth = gpu.memory_bw * cal.linear_memory_eff
        shapes = [(h, (heads + 2 * kv_heads) * hd), (heads * hd, h),
                  (h, 2 * model.intermediate / tp), (model.intermediate / tp, h)]
        def gemm(k: float, n: float, weight_bytes: int, peak: float) -> _Gemm:
            # the knee is a function of the GEMM's shape (fitted on bf16 kernels), not its dtype
            p = max(1.0, cal.knee + cal.knee_per_decade * float(np.log10(k * n * b / 1e8)))
            return _Gemm(k * n * weight_bytes / bandwidth, 2 * k * n / peak,
                         (k + n) * b / bandwidth, p, 1.0 / p)

        set_(self, "_gemms", [gemm(k, n, wb, layer_flops) for k, n in shapes])
        set_(self, "_head", gemm(h, model.vocab / tp, b, flops))
        set_(self, "_kernel", cal.kernel_overhead)
        set_(self, "_tile", int(cal.gemm_tile))
        # element-wise bytes per token: 2 norms (read+write h), rope (q and k in place),
        # the activation (read gate and up, write one), the residual add (read 2, write 1)
        ew_bytes = (2 * 2 * h + 2 * (heads + kv_heads) * hd + 3 * model.intermediate / tp
                    + 3 * h) * b
        set_(self, "_ew_per_token", ew_bytes / (gpu.memory_bw * cal.elementwise_memory_eff))
        set_(self, "_ew_fixed", 5 * cal.elementwise_overhead)
        attn_flops = gpu.peak_flops * cal.attn_prefill_compute_eff
        attn_bw = gpu.memory_bw * cal.attn_decode_memory_eff
        set_(self, "_attn_fixed", cal.attn_overhead)
        # a decode reads each token's K and V once; its FLOPs rarely bind but are kept honest
        per_kv = max(4 * heads * hd / (gpu.peak_flops * cal.attn_prefill_compute_eff),
                     2 * kv_heads * hd * kvb / attn_bw)
        set_(self, "_kv_per_token", per_kv)
        set_(self, "_kv_coef", model.layers * per_kv)
        if tp > 1:
            ring = 2 * (tp - 1) / tp * h * b  # bytes a rank sends per token per all-reduce
            set_(self, "_ar_per_token", 2 * ring / (gpu.interconnect_bw / 2 * cal.allreduce_bw_eff))
            set_(self, "_ar_fixed", 2 * cal.allreduce_latency)
        else:
            set_(self, "_ar_per_token", 0.0)
            set_(self, "_ar_fixed", 0.0)
        block_bytes = model.layers * kv_heads * hd * 2 * kvb * self.block_size
        set_(self, "_swap_per_block", block_bytes / gpu.host_bw)
        set_(self, "_block_bytes", block_bytes)
        # A step's prices, held where the typed step formulas read them (StepCosts)
        costs = StepCosts(model, gpu, tp, self._kv_coef, wb, kvb, fp8_peak)
        costs.step_fixed = cal.step_overhead
        costs.decode_fixed = model.layers * cal.attn_overhead
        costs.swap_per_block = self._swap_per_block
        costs.attn_pair = 4 * heads * hd / attn_flops  # seconds per (query, key) pair
        costs.attn_kv_byte = 2 * kv_heads * hd * kvb / attn_bw  # a token of K and V
        costs.attn_q_byte = 2 * heads * hd * b / attn_bw  # per query (read q, write o)
        costs.attn_fixed = self._attn_fixed
        costs.layer_cache, costs.head_cache = self._layer_cache, self._head_cache
        costs.gemms, costs.head, costs.kernel, costs.tile = (
            self._gemms, self._head, self._kernel, self._tile)
        costs.ew_fixed, costs.ew_per_token = self._ew_fixed, self._ew_per_token
        costs.ar_fixed, costs.ar_per_token = self._ar_fixed, self._ar_per_token
        set_(self, "_costs", costs)

    @property
    def block_bytes(self) -> float:
        """KV bytes of one block on each GPU (what a swap or a host-tier load moves)."""
        return self._block_bytes

    # -- operators ---------------------------------------------------------------------

    def _gemm(self, gemm: _Gemm, tokens: int) -> float:
        """Soft maximum of compute and memory time, plus the kernel's fixed cost
        (`StepCosts.gemm_time`)."""
        return self._costs.gemm_time(gemm, tokens)

    def gemm_times(self, tokens: int) -> tuple[float, ...]:
        """One layer's four GEMMs at `tokens` tokens: qkv, o, gate+up, down."""
        return tuple(self._gemm(gemm, tokens) for gemm in self._gemms)

    def elementwise_time(self, tokens: int) -> float:
        """One layer's five element-wise kernels (norms, rope, activation, residual add)."""
        return self._costs.elementwise_time(tokens)

    def allreduce_time(self, tokens: int) -> float:
        """One layer's two tensor-parallel all-reduces of `tokens` x hidden activations."""
        return self._costs.allreduce_time(tokens)

    def decode_attention_time(self, kv_tokens: int) -> float:
        """One layer's decode attention reading `kv_tokens` tokens of KV (one kernel)."""
        return self._attn_fixed + self._kv_per_token * kv_tokens

    def layer_time(self, tokens: int) -> float:
        """One layer's dense part at `tokens` tokens: GEMMs, element-wise, all-reduces."""
        return self._costs.layer_time(tokens)

    def head_time(self, rows: int) -> float:
        """The LM head on the `rows` that sample a token this step."""
        return self._costs.head_time(rows)

    def prefill_attention_time(self, chunks: Sequence[tuple[int, int]]) -> float:
        """One layer's attention over the prefill chunks (one varlen kernel)."""
        return self._costs.prefill_attention(chunks)

    # -- the time model ----------------------------------------------------------------

    def duration_shape(self, shape: BatchShape) -> float:
        """Seconds one step of this batch takes."""
        return self._costs.duration(shape.prefill_chunks, shape.num_decodes,
                                    shape.decode_kv_tokens, shape.swapped_blocks)

    # The engine's calls, once a step or a decode stretch, are StepCosts' own methods,
    # bound: the engine calls the compiled method without a call of this class in between
    # (whose attribute read and Python call cost R1 as much as the pricing itself).

    @property
    def step_duration(self) -> Callable[[Sequence[tuple[int, int]], int, int, int], float]:
        """(prefill_chunks, num_decodes, decode_kv_tokens, swapped_blocks) -> seconds:
        `duration_shape` of the batch of those fields, without making its `BatchShape` (a
        frozen dataclass made and read a step cost 0.4 us of R1's 1.2 a step of pricing)."""
        return self._costs.duration

    def duration(self, prefill_tokens: int, num_decodes: int, kv_read_tokens: int,
                 swapped_blocks: int) -> float:
        """`TimeModel.duration`: the prefill tokens as one chunk with no cached context
        (the engine prices its steps by `step_duration`; a gate's estimate asks this)."""
        chunks = ((prefill_tokens, 0),) if prefill_tokens else ()
        return self._costs.duration(chunks, num_decodes, kv_read_tokens, swapped_blocks)

    @property
    def stretch_durations(self) -> Callable[[int, int, int], list[float]]:
        """(num_decodes, kv_tokens_start, num_steps) -> durations of `num_steps` pure-decode
        steps where each of `num_decodes` requests reads one more token per step; element k
        equals `duration(0, n, kv_start + k * n, 0)`."""
        return self._costs.stretch_durations

    # -- accounting ----------------------------------------------------------------------

    def memory_bytes(self, shape: BatchShape) -> float:
        """Bytes one GPU must move in the step at least (for memory-bandwidth utilisation):
        its shard of the weights, LM head included, and the KV the attention reads."""
        return self._costs.batch_bytes(shape.prefill_chunks, shape.decode_kv_tokens)

    def utilisation(self, shape: BatchShape, seconds: float) -> tuple[float, float]:
        """(MFU, memory-bandwidth utilisation) of one GPU over a step of `seconds`: useful
        FLOPs / (seconds x peak FLOPS) and bytes moved / (seconds x peak bandwidth), against
        the datasheet peaks (not the calibrated achievable ones; the fp8 peak for fp8 weights
        on a GPU that has one)."""
        return self._costs.utilisation(shape.prefill_chunks, shape.num_decodes,
                                       shape.decode_kv_tokens, seconds)

    @property
    def step_utilisation(self) -> Callable[[Sequence[tuple[int, int]], int, int, float],
                                           tuple[float, float]]:
        """(prefill_chunks, num_decodes, decode_kv_tokens, seconds) -> (MFU, MBU):
        `utilisation` of the batch of those fields, without making its `BatchShape`."""
        return self._costs.utilisation

    @property
    def stretch_utilisation(self) -> Callable[[int, int, list[float]],
                                              tuple[list[float], list[float]]]:
        """(num_decodes, kv_tokens_start, durations) -> (MFU list, MBU list): `utilisation`
        of each step of a decode stretch (step k reads `kv_tokens_start + k * num_decodes`
        tokens of KV and lasts `durations[k]`): element for element the floats
        `utilisation` gives, through the same formulas."""
        return self._costs.decode_utilisation

    def flops(self, shape: BatchShape) -> float:
        """Useful FLOPs of the step on one GPU (for MFU): dense layers, attention, LM head."""
        return self._costs.batch_flops(shape.prefill_chunks, shape.num_decodes,
                                       shape.decode_kv_tokens)


class StepCosts:
    """A step's duration (from the model's constants and its cached layer and LM-head
    times), useful FLOPs and bytes on one GPU, with the constants multiplied out once (in
    the order the formulas multiply them, so the floats are the formulas'), and a decode
    stretch's durations and utilisation step by step (typed loops in the compiled build,
    kvsched/timing/roofline.pxd). A step's batch is read from its fields: its prefill chunks
    as (chunk tokens, cached context) pairs, its decodes and the KV they read."""

    __slots__ = ("layers", "dense_per_token", "attention_per_pair", "head_per_row",
                 "weight_bytes", "kv_bytes_per_token", "kv_coef", "peak_flops", "memory_bw",
                 "step_fixed", "decode_fixed", "swap_per_block", "attn_pair", "attn_kv_byte",
                 "attn_q_byte", "attn_fixed", "layer_cache", "head_cache", "decode_cache",
                 "gemms", "head", "kernel", "tile", "ew_fixed", "ew_per_token",
                 "ar_fixed", "ar_per_token")

    def __init__(self, model: Model, gpu: Gpu, tp: int, kv_coef: float,
                 weight_dtype_bytes: int = DTYPE_BYTES, kv_dtype_bytes: int = DTYPE_BYTES,
                 peak_flops: float = 0.0) -> None:
        self.layers = model.layers
        self.dense_per_token = 2 * (model.layer_params / tp)  # 2 FLOPs a weight a token
        self.attention_per_pair = 4 * model.heads / tp * model.head_dim
        self.head_per_row = 2 * model.hidden * model.vocab / tp
        # bytes: the layers' weights in their dtype and the LM head in bf16; K and V a token
        self.weight_bytes = (model.layers * model.layer_params * weight_dtype_bytes
                             + model.vocab * model.hidden * DTYPE_BYTES) / tp
        self.kv_bytes_per_token = (model.layers * max(model.kv_heads / tp, 1.0) * model.head_dim
                                   * 2 * kv_dtype_bytes)
        self.kv_coef = kv_coef  # seconds per token of KV a decode reads
        self.peak_flops = peak_flops or gpu.peak_flops  # the GEMMs' (fp8 or bf16) datasheet peak
        self.memory_bw = gpu.memory_bw
        # The duration's constants and the layer and LM-head caches: set by the RooflineStep.
        self.step_fixed = self.decode_fixed = self.swap_per_block = 0.0
        self.attn_pair = self.attn_kv_byte = self.attn_q_byte = self.attn_fixed = 0.0
        self.layer_cache: dict[int, float] = {}  # layer (head) time by tokens (rows)
        self.head_cache: dict[int, float] = {}
        self.decode_cache: dict[int, float] = {}  # a decode step's base by its decodes
        # The RooflineStep's operator constants (set by it): a layer or LM-head size the
        # caches miss is priced here, in typed code in the compiled build (R1 misses ~1.9k
        # sizes an hour, R5 as many for each replica's own time model).
        self.gemms: list[_Gemm] = []
        self.head: _Gemm | None = None
        self.kernel = self.ew_fixed = self.ew_per_token = self.ar_fixed = self.ar_per_token = 0.0
        self.tile = 0

    def gemm_time(self, gemm: _Gemm, tokens: int) -> float:
        """Soft maximum of compute and memory time, plus the kernel's fixed cost. The compute
        counts whole tiles of token rows (when the calibration has a `gemm_tile`). Python
        arithmetic in both builds: `tokens` may be any real (a test's crossover point)."""
        tile = self.tile
        compute = gemm.flops_per_token * (-(-tokens // tile) * tile if tile else tokens)
        memory = gemm.weight_bytes + gemm.bytes_per_token * tokens
        p = gemm.p  # (the powers on Python floats: `float.__pow__`, as the formula was fitted)
        return (compute ** p + memory ** p) ** gemm.inv_p + self.kernel

    def elementwise_time(self, tokens: int) -> float:
        return self.ew_fixed + self.ew_per_token * tokens

    def allreduce_time(self, tokens: int) -> float:
        return self.ar_fixed + self.ar_per_token * tokens

    def layer_time(self, tokens: int) -> float:
        """`RooflineStep.layer_time`: cached by size."""
        cached = self.layer_cache.get(tokens)
        if cached is not None:
            return cached
        value = 0.0
        if tokens:
            total = 0.0  # the four GEMMs added left to right
            for gemm in self.gemms:
                total += self.gemm_time(gemm, tokens)
            value = total + self.elementwise_time(tokens)
            value += self.allreduce_time(tokens)
        if len(self.layer_cache) < 65536:
            self.layer_cache[tokens] = value
        return value

    def head_time(self, rows: int) -> float:
        """`RooflineStep.head_time`: cached by size."""
        cached = self.head_cache.get(rows)
        if cached is None:
            head = self.head
            assert head is not None
            cached = self.gemm_time(head, rows) if rows else 0.0
            if len(self.head_cache) < 65536:
                self.head_cache[rows] = cached
        return cached

    def prefill_attention(self, chunks: Sequence[tuple[int, int]]) -> float:
        """One layer's attention over the prefill chunks (one varlen kernel)."""
        if not chunks:
            return 0.0
        pairs = 0.0
        kv_tokens = 0
        queries = 0
        for chunk, cached in chunks:
            pairs += chunk * (cached + chunk)
            kv_tokens += cached + chunk
            queries += chunk
        memory = self.attn_kv_byte * kv_tokens + self.attn_q_byte * queries
        return max(self.attn_pair * pairs, memory) + self.attn_fixed

    def base(self, tokens: int, rows: int, prefill_attention: float, num_decodes: int,
             swapped_blocks: int) -> float:
        """Everything but the decodes' KV reads."""
        cached = self.layer_cache.get(tokens)
        layer = self.layer_time(tokens) if cached is None else cached
        cached = self.head_cache.get(rows)
        head = self.head_time(rows) if cached is None else cached
        base = self.step_fixed + self.layers * (layer + prefill_attention)
        base += head
        if num_decodes:
            base += self.decode_fixed
        return base + self.swap_per_block * swapped_blocks

    def duration(self, chunks: Sequence[tuple[int, int]], num_decodes: int,
                 kv_read_tokens: int, swapped_blocks: int) -> float:
        """Seconds one step of that batch takes (`RooflineStep.duration_shape`)."""
        tokens = num_decodes  # through the dense layers: every prefill token, one a decode
        for chunk, _ in chunks:
            tokens += chunk
        base = self.base(tokens, len(chunks) + num_decodes, self.prefill_attention(chunks),
                         num_decodes, swapped_blocks)
        return base + kv_read_tokens * self.kv_coef

    def stretch_durations(self, num_decodes: int, kv_start: int,
                          num_steps: int) -> list[float]:
        """`RooflineStep.stretch_durations`: the step's base, kept by `num_decodes`, plus
        each step's KV reads."""
        base = self.decode_cache.get(num_decodes)
        if base is None:
            base = self.base(num_decodes, num_decodes, 0.0, num_decodes, 0)
            if len(self.decode_cache) < 65536:
                self.decode_cache[num_decodes] = base
        return self.decode_durations(base, num_decodes, kv_start, num_steps)

    def batch_flops(self, chunks: Sequence[tuple[int, int]], num_decodes: int,
                    kv_read_tokens: int) -> float:
        """Useful FLOPs of a step of that batch (`RooflineStep.flops`)."""
        pairs = 0.0  # causal, useful: summed left to right (a fold, written out: per step)
        tokens = num_decodes
        for c, k in chunks:
            pairs += c * (k + (c + 1) / 2)
            tokens += c
        return self.flops(tokens, pairs + kv_read_tokens, len(chunks) + num_decodes)

    def batch_bytes(self, chunks: Sequence[tuple[int, int]], kv_read_tokens: int) -> float:
        """Bytes a step of that batch moves at least (`RooflineStep.memory_bytes`)."""
        kv_tokens = kv_read_tokens
        for c, k in chunks:
            kv_tokens += c + k
        return self.memory_bytes(kv_tokens)

    def utilisation(self, chunks: Sequence[tuple[int, int]], num_decodes: int,
                    kv_read_tokens: int, seconds: float) -> tuple[float, float]:
        """(MFU, MBU) of a step of that batch lasting `seconds`."""
        return (self.batch_flops(chunks, num_decodes, kv_read_tokens)
                / (seconds * self.peak_flops),
                self.batch_bytes(chunks, kv_read_tokens) / (seconds * self.memory_bw))

    def flops(self, tokens: int, attended: float, rows: int) -> float:
        """FLOPs of `tokens` through the dense layers, `attended` (query, key) pairs of
        attention and `rows` through the LM head."""
        dense = self.dense_per_token * tokens
        attention = self.attention_per_pair * attended
        return self.layers * (dense + attention) + self.head_per_row * rows

    def memory_bytes(self, kv_tokens: int) -> float:
        """Bytes of the weights' shard and of `kv_tokens` tokens of KV."""
        return self.weight_bytes + self.kv_bytes_per_token * kv_tokens

    def decode_durations(self, base: float, num_decodes: int, kv_start: int,
                         num_steps: int) -> list[float]:
        """`base` plus the KV reads of each of `num_steps` decode steps (step k reads
        `kv_start + k * num_decodes` tokens)."""
        coef = self.kv_coef
        out = [0.0] * num_steps
        for k in range(num_steps):
            out[k] = base + (kv_start + k * num_decodes) * coef
        return out

    def decode_utilisation(self, num_decodes: int, kv_start: int,
                           durations: list[float]) -> tuple[list[float], list[float]]:
        """(MFU, MBU) of each step of a decode stretch."""
        num_steps = len(durations)
        mfu = [0.0] * num_steps
        mbu = [0.0] * num_steps
        peak, bandwidth = self.peak_flops, self.memory_bw
        for k in range(num_steps):
            kv = kv_start + k * num_decodes
            seconds = durations[k]
            mfu[k] = self.flops(num_decodes, 0.0 + kv, num_decodes) / (seconds * peak)
            mbu[k] = self.memory_bytes(kv) / (seconds * bandwidth)
        return mfu, mbu
