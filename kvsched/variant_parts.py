"""The run-time parts a variant's spec names: its time model, waiting-queue policy, SLO and
admission gate. A single run (`kvsched.runner`) and a cluster (`kvsched.cluster.run`) build
them alike."""

from __future__ import annotations

from kvsched.admission import Estimator, SloAdmission
from kvsched.policies import Policy, make_policy
from kvsched.records.slo import Slo
from kvsched.scenario import Variant
from kvsched.schema import RunSpec
from kvsched.timing import TimeModel


def time_model_of(spec: RunSpec) -> TimeModel:
    """The variant's time model, as its `time:` spec builds it (`kvsched.schema.TimeSpec`)."""
    return spec.time.build(spec.engine)


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
