"""The bytes of one element by dtype name: the values `time.weight_dtype` and
`engine.kv_cache_dtype` take. A module of their own, so that the scenario's schema can list
them without loading the hardware catalogue (`kvsched.timing.hardware`, which hands them on)."""

WEIGHT_DTYPE_BYTES = {"bf16": 2, "fp8": 1}
"""Bytes a weight of the decoder layers' linear projections takes, by `time.weight_dtype`: a
bf16 checkpoint, or fp8 (an fp8 checkpoint, or vLLM's `--quantization fp8` of a bf16 one)."""
KV_DTYPE_BYTES = {"auto": 2, "fp8": 1}
"""Bytes a K or V element takes, by `engine.kv_cache_dtype` (auto: the model's bf16)."""
