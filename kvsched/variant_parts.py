"""The run-time parts a variant's spec names: its time model, waiting-queue policy, SLO and
admission gate. A single run (`kvsched.runner`) and a cluster (`kvsched.cluster.run`) build
them alike."""

from __future__ import annotations

from pathlib import Path

from kvsched.admission import Estimator, SloAdmission
from kvsched.errors import KvschedError
from kvsched.policies import Policy, make_policy
from kvsched.records.slo import Slo
from kvsched.scenario import Variant
from kvsched.schema import ConstantTime, LinearTime, ProfiledTime, RooflineTime, RunSpec
from kvsched.timing import ConstantStep, LinearStep, StepClock, TimeModel


def time_model_of(spec: RunSpec) -> TimeModel:
    time = spec.time
    if isinstance(time, ConstantTime):
        return ConstantStep(time.step_time)
    if isinstance(time, LinearTime):
        return LinearStep(time.base, time.per_prefill_token, time.per_decode, time.per_kv_token,
                          time.per_swapped_block)
    if isinstance(time, RooflineTime):
        # hardware time models only (profiled reads its tables with pandas)
        from kvsched.timing.roofline import RooflineStep

        try:
            return RooflineStep(time.model, time.gpu, time.tp,
                                block_size=spec.engine.block_size,
                                weight_dtype=time.weight_dtype,
                                kv_cache_dtype=spec.engine.kv_cache_dtype)
        except ValueError as exc:  # tp that does not divide the heads
            raise KvschedError(f"time.tp: {exc}") from None
    if isinstance(time, ProfiledTime):
        # hardware time models only (profiled reads its tables with pandas)
        from kvsched.timing.profiled import ProfiledStep

        return ProfiledStep(Path(time.profiles), time.model, time.tp)
    return StepClock()


def slo_of(spec: RunSpec) -> Slo | None:
    return Slo(spec.slo.ttft, spec.slo.e2e, spec.slo.tpot) if spec.slo is not None else None


def policy_of(variant: Variant) -> Policy:
    """The variant's policy; a user's `package.module:Class` is imported here (not when the
    file is validated), from `sys.path` or the scenario's folder."""
    spec = variant.spec.policy
    try:
        return make_policy(spec.name, search_path=[variant.scenario.base_dir],
                           **spec.all_params())
    except ValueError as exc:
        raise variant.error(("policy", "name"), str(exc)) from None


def admission_of(spec: RunSpec) -> SloAdmission | None:
    """The variant's SLO admission gate (its target defaults to `slo.ttft`), if it has one."""
    if spec.admission is None:
        return None
    target = spec.admission.ttft_slo
    if target is None:
        assert spec.slo is not None and spec.slo.ttft is not None
        target = spec.slo.ttft
    return SloAdmission(target, Estimator(spec.admission.estimator), spec.admission.window)
