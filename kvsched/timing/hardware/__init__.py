"""The hardware catalogue: model shapes by Hugging Face id, GPUs by name, and the calibrated
efficiencies of the roofline time model, all read from the data files beside this module.

    model = load_model("meta-llama/Llama-3.1-8B")   # or the path of a local config.json
    gpu = load_gpu("H100-SXM")                      # names match case-insensitively
    calibration = load_calibration(gpu)             # fitted by tools/calibrate.py

Units: bytes, bytes per second, FLOPS (floating-point operations per second), seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kvsched.errors import KvschedError
from kvsched.timing.dtypes import KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES  # noqa: F401  (the units)


class UnknownHardware(KvschedError, ValueError):
    """An unknown model or GPU name, or a config.json that cannot be read: one line."""


@dataclass(frozen=True, slots=True)
class Model:
    """A decoder's shape (SwiGLU MLP, grouped-query attention), as its config.json gives it."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = False
    source: str = ""

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: q, k, v and o projections, gate, up and down."""
        qkv = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        out = self.heads * self.head_dim * self.hidden
        return qkv + out + 3 * self.hidden * self.intermediate

    @property
    def params(self) -> int:
        """All weights: the layers, the embedding and (unless tied) the LM head."""
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params + embeddings

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of all weights with the layers' linear weights in `dtype_bytes` each: the
        embedding and the LM head stay bf16 (vLLM's fp8 quantizes the linear layers only, and
        fp8 checkpoints keep `lm_head` and `embed_tokens` in bf16)."""
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params * dtype_bytes + embeddings * 2

    def tp_problem(self, tp: int) -> str | None:
        """Why this model cannot be sharded `tp` ways, or None: vLLM splits the attention
        heads and the MLP evenly, and the KV heads either evenly or by replicating them."""
        def splits(n: int) -> bool:
            kv = (n % self.kv_heads == 0) if n >= self.kv_heads else (self.kv_heads % n == 0)
            return self.heads % n == 0 and self.intermediate % n == 0 and kv

        if splits(tp):
            return None
        fits = ", ".join(str(n) for n in range(1, self.heads + 1) if splits(n))
        return (f"tp {tp} does not split {self.name}'s {self.heads} heads, {self.kv_heads} KV "
                f"heads and {self.intermediate} intermediate size evenly; expected one of {fits}")

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache bytes one token holds across all layers (K and V), on one GPU of TP 1."""
        return self.layers * self.kv_heads * self.head_dim * 2 * dtype_bytes


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU's datasheet figures: dense bf16 peak, memory, its links to peers and to the host.
    `fp8_peak_flops`: the dense fp8 Tensor Core peak, 0 for a GPU without fp8 Tensor Cores
    (Ampere: vLLM runs fp8 weights there as weight-only W8A16, the math in bf16)."""

    name: str
    peak_flops: float
    memory_bw: float
    memory: float
    interconnect: str
    interconnect_bw: float
    interconnect_latency: float
    host_bw: float
    source: str = ""
    cuda_memory: float = 0.0  # bytes CUDA reports (0: unknown, the datasheet's `memory`)
    cuda_memory_source: str = ""
    fp8_peak_flops: float = 0.0

    @property
    def device_memory(self) -> float:
        """Bytes CUDA reports: what vLLM sizes its budget from."""
        return self.cuda_memory or self.memory


@dataclass(frozen=True, slots=True)
class Calibration:
    """What a GPU achieves of its datasheet, fitted on measured operator times.

    Efficiencies are fractions of peak FLOPS or memory bandwidth; overheads are seconds per
    kernel; `knee` is the exponent p of the soft maximum (c^p + m^p)^(1/p) joining the
    compute-bound and the weight-bound regimes of a GEMM (large p: a sharp max), for a GEMM
    of 100 MB of weights; `knee_per_decade` adds to it per tenfold more weight bytes (a big
    GEMM fills every SM with tiles and hides its loads behind its math: a sharper knee).
    `gemm_tile` > 0 rounds a GEMM's token rows up to a multiple of it in the compute term (a
    kernel computes whole output tiles: 65 tokens cost what 128 do with a 64-row tile);
    0, the default for files written before the key, leaves the token count as it is."""

    linear_compute_eff: float
    linear_memory_eff: float
    knee: float
    kernel_overhead: float
    elementwise_memory_eff: float
    elementwise_overhead: float
    attn_prefill_compute_eff: float
    attn_decode_memory_eff: float
    attn_overhead: float
    allreduce_latency: float
    allreduce_bw_eff: float
    step_overhead: float = 0.0
    knee_per_decade: float = 0.0
    gemm_tile: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_eff") and not 0 < value <= 1:
                raise ValueError(f"calibration {f.name} must be in (0, 1], got {value}")
            if f.name.endswith(("_overhead", "_latency")) and value < 0:
                raise ValueError(f"calibration {f.name} must be >= 0, got {value}")
        if not self.knee >= 1:
            raise ValueError(f"calibration knee must be >= 1, got {self.knee}")
        if not (self.gemm_tile >= 0 and float(self.gemm_tile).is_integer()):
            raise ValueError(f"calibration gemm_tile must be a whole number >= 0 (0: off), "
                             f"got {self.gemm_tile}")


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: these files, shipped with the package, read as
PyYAML's own reads them (tests/test_hardware.py), in a tenth of the instructions (PyYAML's
parser spent 66M of a roofline run's start). A user's scenario keeps PyYAML's parser, which
refuses what libyaml accepts (kvsched.scenario)."""


def _read(name: str) -> dict[str, dict[str, Any]]:
    text = (resources.files("kvsched.timing.hardware") / name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=_LOADER) or {}  # (a safe loader)


@cache
def _models() -> dict[str, dict[str, Any]]:
    return _read("models.yaml")


@cache
def _gpus() -> dict[str, dict[str, Any]]:
    return _read("gpus.yaml")


@cache
def _calibrations() -> dict[str, dict[str, Any]]:
    return _read("calibration.yaml")


def known_models() -> list[str]:
    return list(_models())


def known_gpus() -> list[str]:
    return list(_gpus())


# A fine-tune keeps its base's shapes: `meta-llama/Meta-Llama-3-8B-Instruct` is looked up as
# `meta-llama/Meta-Llama-3-8B` (the longest suffix first, until none is left).
TUNE_SUFFIXES = ("-chat-hf", "-instruct-hf", "-instruct", "-chat", "-it", "-hf", "-base")


def _lookup(table: dict[str, dict[str, Any]], name: str, what: str) -> tuple[str, dict[str, Any]]:
    lowered = {key.lower(): key for key in table}
    wanted = name.strip().lower()
    tried = [wanted]
    if what == "model":
        base = wanted
        while suffix := next((s for s in TUNE_SUFFIXES if base.endswith(s)), ""):
            base = base.removesuffix(suffix)
        tried += [base, base + "-hf"]  # Llama 2's ids end in -hf, its chat model's in -chat-hf
    for candidate in tried:
        if candidate in lowered:
            return lowered[candidate], table[lowered[candidate]]
    raise UnknownHardware(f"unknown {what} '{name}'{_suggest(wanted, lowered)}; "
                          f"known: {', '.join(table)}")


def _suggest(wanted: str, lowered: dict[str, str]) -> str:
    """' (did you mean ...?)' for names that start with, contain or nearly spell `wanted`."""
    # only for a name that is not found
    import difflib

    close = [key for low, key in lowered.items() if wanted and (low.startswith(wanted)
                                                              or wanted in low)]
    close = close or [lowered[low] for low in difflib.get_close_matches(wanted, lowered, n=3)]
    return f" (did you mean {' or '.join(close[:3])}?)" if close else ""


_FLOATS = ("peak_flops", "memory_bw", "memory", "interconnect_bw", "interconnect_latency",
           "host_bw", "cuda_memory", "fp8_peak_flops")


def load_gpu(name: str | Gpu) -> Gpu:
    """The GPU of this name (case-insensitive), or `UnknownHardware` listing the known ones."""
    if isinstance(name, Gpu):
        return name
    key, entry = _lookup(_gpus(), name, "GPU")
    values: dict[str, Any] = {k: float(v) if k in _FLOATS else v for k, v in entry.items()}
    return Gpu(name=key, **values)


def load_model(name: str | Path | Model) -> Model:
    """The model of this Hugging Face id (case-insensitive), or read from the path of a local
    config.json (any name ending in .json, or an existing file, or a folder holding one)."""
    if isinstance(name, Model):
        return name
    text = str(name)
    if text.endswith(".json") or Path(text).is_file():
        return model_from_config(Path(text))
    if (Path(text) / "config.json").is_file():  # a downloaded model's folder
        return model_from_config(Path(text) / "config.json")
    key, entry = _lookup(_models(), text, "model")
    return Model(name=key, **entry)


def model_from_config(path: Path) -> Model:
    """A model from a Hugging Face config.json (Llama, Mistral, Qwen2 keys)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UnknownHardware(f"{path}: cannot read the model config: {exc}") from None
    if not isinstance(config, dict):
        raise UnknownHardware(f"{path}: a config.json holds one JSON object")
    config = config.get("text_config", config) if "num_hidden_layers" not in config else config
    required = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "vocab_size")
    missing = [key for key in required if not _whole(config.get(key))]
    if missing:
        raise UnknownHardware(f"{path}: config.json lacks integer {', '.join(missing)}")
    for key in (*required, "num_key_value_heads", "head_dim"):
        if key in config and config[key] is not None and not (_whole(config[key])
                                                              and config[key] >= 1):
            raise UnknownHardware(f"{path}: config.json {key}: expected a whole number >= 1, "
                                  f"got {config[key]!r}")
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    if head_dim < 1 or heads % kv_heads:
        raise UnknownHardware(f"{path}: config.json: expected num_attention_heads ({heads}) a "
                              f"multiple of num_key_value_heads ({kv_heads}) and at most "
                              f"hidden_size ({config['hidden_size']})")
    return Model(name=str(config.get("_name_or_path") or path), layers=config["num_hidden_layers"],
                 hidden=config["hidden_size"], intermediate=config["intermediate_size"],
                 heads=heads, kv_heads=kv_heads, head_dim=head_dim, vocab=config["vocab_size"],
                 tied=bool(config.get("tie_word_embeddings", False)), source=str(path))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_calibration(gpu: str | Gpu) -> Calibration:
    """The calibration fitted for this GPU, or the `default` entry for one never measured."""
    name = gpu.name if isinstance(gpu, Gpu) else load_gpu(gpu).name
    table = _calibrations()
    entry = table.get(name, table["default"])
    values: dict[str, Any] = {k: (v if k == "source" else float(v)) for k, v in entry.items()}
    return Calibration(**values)
