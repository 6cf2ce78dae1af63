"""Loading scenarios: base + variants, --set and --seed, policy forms, expectations, errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kvsched.errors import ScenarioError
from kvsched.policies import make_policy
from kvsched.runner import check_expectations
from kvsched.scenario import Scenario, load_scenario
from kvsched.schema import (
    ConstantTime,
    Expectation,
    InlineWorkload,
    StepsTime,
    SyntheticWorkload,
)

SYNTHETIC = """\
workload:
  kind: synthetic
  num_requests: 10
  arrival: {kind: poisson, rate: 1}
  prompt_len: 20
  output_len: 4
"""


def load(tmp_path: Path, *parts: str, sets: tuple[str, ...] = (),
         seed: int | None = None) -> Scenario:
    """Write the parts (each dedented) as one scenario file in tmp_path and load it."""
    path = tmp_path / "scenario.yaml"
    path.write_text("".join(textwrap.dedent(part) for part in parts), encoding="utf-8")
    return load_scenario(path, sets, seed)


def by_name(scenario: Scenario) -> dict:
    return {v.name: v for v in scenario.variants}


def policy_params(variant) -> dict:
    return variant.spec.policy.all_params()


# -- variants -----------------------------------------------------------------------------


def test_scenario_without_variants_has_one_variant_named_base(tmp_path):
    """No `variants:` means one variant, `base`, running the base configuration."""
    scenario = load(tmp_path, "name: s\nengine: {num_blocks: 77}\n", SYNTHETIC)
    assert [v.name for v in scenario.variants] == ["base"]
    assert scenario.variants[0].spec.engine.num_blocks == 77


def test_variants_keep_their_order_and_names(tmp_path):
    """Variants come out in file order, under their own names, without a `base`."""
    scenario = load(tmp_path, "name: s\n", SYNTHETIC,
                    "variants: [{name: zeta}, {name: alpha}, {name: mid}]\n")
    assert [v.name for v in scenario.variants] == ["zeta", "alpha", "mid"]


def test_variant_override_is_a_deep_merge(tmp_path):
    """A variant's `engine: {num_blocks}` changes that key and keeps the base's others."""
    scenario = load(tmp_path, """\
        name: s
        engine: {num_blocks: 180, watermark: 0.02, max_num_batched_tokens: 512}
        workload:
          kind: synthetic
          num_requests: 10
          arrival: {kind: poisson, rate: 1}
          prompt_len: 20
          output_len: 4
        variants:
          - {name: baseline}
          - {name: pool60, engine: {num_blocks: 60}}
          - {name: fewer, workload: {num_requests: 3}}
        """)
    variants = by_name(scenario)
    assert variants["baseline"].spec.engine.num_blocks == 180
    pool60 = variants["pool60"].spec.engine
    assert (pool60.num_blocks, pool60.watermark, pool60.max_num_batched_tokens) == (60, 0.02, 512)
    fewer = variants["fewer"].spec.workload
    assert isinstance(fewer, SyntheticWorkload)
    assert fewer.num_requests == 3
    assert fewer.arrival.kind == "poisson" and fewer.prompt_len.value == 20


def test_variant_with_another_workload_kind_replaces_the_base_workload(tmp_path):
    """A variant workload of another `kind` replaces the base's instead of merging into it."""
    scenario = load(tmp_path, "name: s\n", SYNTHETIC, """\
        variants:
          - {name: synth}
          - name: inline
            workload: {kind: inline, requests: [{prompt_len: 5, output_len: 2}]}
        """)
    inline = by_name(scenario)["inline"].spec.workload
    assert isinstance(inline, InlineWorkload)
    assert len(inline.requests) == 1
    assert isinstance(by_name(scenario)["synth"].spec.workload, SyntheticWorkload)


def test_variant_with_another_arrival_kind_replaces_nested_mapping(tmp_path):
    """`kind` replaces at any depth: poisson {rate} -> all_at_once keeps no `rate`."""
    scenario = load(tmp_path, "name: s\n", SYNTHETIC,
                    "variants: [{name: drain, workload: {arrival: {kind: all_at_once}}}]\n")
    arrival = scenario.variants[0].spec.workload.arrival
    assert arrival.kind == "all_at_once"
    assert "rate" not in scenario.variants[0].resolved["workload"]["arrival"]


def test_variant_with_another_time_kind_replaces_the_base_time(tmp_path):
    """time: {kind: constant, step_time} in the base, {kind: steps} in a variant: no leftovers."""
    scenario = load(tmp_path, "name: s\ntime: {kind: constant, step_time: 0.02}\n", SYNTHETIC,
                    "variants: [{name: timed}, {name: steps, time: {kind: steps}}]\n")
    assert isinstance(by_name(scenario)["timed"].spec.time, ConstantTime)
    assert isinstance(by_name(scenario)["steps"].spec.time, StepsTime)


def test_variant_with_another_policy_name_replaces_the_base_policy(tmp_path):
    """Base spf with aging; a variant `policy: fcfs` drops aging, `{aging}` keeps spf."""
    scenario = load(tmp_path, "name: s\npolicy: {name: spf, aging: 0.5}\n", SYNTHETIC, """\
        variants:
          - {name: spf}
          - {name: fcfs, policy: fcfs}
          - {name: slower, policy: {aging: 0.1}}
        """)
    variants = by_name(scenario)
    assert (variants["spf"].spec.policy.name, policy_params(variants["spf"])) == (
        "spf", {"aging": 0.5})
    assert (variants["fcfs"].spec.policy.name, policy_params(variants["fcfs"])) == ("fcfs", {})
    assert (variants["slower"].spec.policy.name, policy_params(variants["slower"])) == (
        "spf", {"aging": 0.1})


def test_variant_policy_params_merge_over_a_base_shorthand(tmp_path):
    """Base `policy: spf` (shorthand) plus a variant `{aging: 0.2}` gives spf with aging 0.2."""
    scenario = load(tmp_path, "name: s\npolicy: spf\n", SYNTHETIC,
                    "variants: [{name: aged, policy: {aging: 0.2}}]\n")
    variant = scenario.variants[0]
    assert variant.spec.policy.name == "spf"
    assert make_policy(variant.spec.policy.name, **policy_params(variant)).aging == 0.2


def test_variant_seed_and_description_override_the_base(tmp_path):
    """Scalar fields (seed, description) are replaced by a variant that gives them."""
    scenario = load(tmp_path, "name: s\nseed: 1\ndescription: base text\n", SYNTHETIC,
                    "variants: [{name: a}, {name: b, seed: 5, description: other}]\n")
    variants = by_name(scenario)
    assert (variants["a"].spec.seed, variants["a"].spec.description) == (1, "base text")
    assert (variants["b"].spec.seed, variants["b"].spec.description) == (5, "other")


def test_variant_may_supply_the_workload_the_base_leaves_out(tmp_path):
    """A base without `workload` is valid when every variant brings one."""
    scenario = load(tmp_path, """\
        name: s
        variants:
          - {name: one, workload: {kind: inline, requests: [{prompt_len: 5, output_len: 2}]}}
          - {name: two, workload: {kind: inline, requests: [{prompt_len: 6, output_len: 2},
                                                            {prompt_len: 7, output_len: 2}]}}
        """)
    assert [len(v.spec.workload.requests) for v in scenario.variants] == [1, 2]


def test_loading_does_not_change_the_base_between_variants(tmp_path):
    """One variant's override never leaks into the next variant (the merge copies)."""
    scenario = load(tmp_path, "name: s\nengine: {num_blocks: 100}\n", SYNTHETIC, """\
        variants:
          - {name: small, engine: {num_blocks: 10}, workload: {arrival: {kind: fixed, interval: 2}}}
          - {name: again}
        """)
    again = by_name(scenario)["again"]
    assert again.spec.engine.num_blocks == 100
    assert again.spec.workload.arrival.kind == "poisson"


# -- the command line: --set and --seed ----------------------------------------------------


def test_set_applies_to_every_variant_and_wins_over_the_variant(tmp_path):
    """`--set engine.num_blocks=90` beats both the base (180) and a variant's own 60."""
    scenario = load(tmp_path, "name: s\nengine: {num_blocks: 180}\n", SYNTHETIC,
                    "variants: [{name: a}, {name: b, engine: {num_blocks: 60}}]\n",
                    sets=("engine.num_blocks=90",))
    assert [v.spec.engine.num_blocks for v in scenario.variants] == [90, 90]


def test_set_values_are_parsed_as_yaml(tmp_path):
    """--set values take YAML types: floats, booleans, strings."""
    scenario = load(tmp_path, "name: s\n", SYNTHETIC, sets=(
        "engine.watermark=0.05", "engine.chunked_prefill=true", "engine.preemption=swap"))
    engine = scenario.variants[0].spec.engine
    assert (engine.watermark, engine.chunked_prefill, engine.preemption) == (0.05, True, "swap")


def test_set_a_field_the_file_does_not_mention(tmp_path):
    """--set may add a field the file leaves to its default (engine absent from the file)."""
    scenario = load(tmp_path, "name: s\n", SYNTHETIC, sets=("engine.max_num_seqs=3",))
    assert scenario.variants[0].spec.engine.max_num_seqs == 3


def test_set_policy_shorthand_replaces_the_policy(tmp_path):
    """`--set policy=fcfs` over `{name: spf, aging: 0.5}` gives plain fcfs (no stale aging)."""
    scenario = load(tmp_path, "name: s\npolicy: {name: spf, aging: 0.5}\n", SYNTHETIC,
                    sets=("policy=fcfs",))
    variant = scenario.variants[0]
    assert (variant.spec.policy.name, policy_params(variant)) == ("fcfs", {})


def test_set_policy_param_over_a_shorthand_policy(tmp_path):
    """`--set policy.aging=0.3` works when the file says just `policy: spf`."""
    scenario = load(tmp_path, "name: s\npolicy: spf\n", SYNTHETIC, sets=("policy.aging=0.3",))
    variant = scenario.variants[0]
    assert (variant.spec.policy.name, policy_params(variant)) == ("spf", {"aging": 0.3})


def test_set_is_recorded_in_the_resolved_mapping(tmp_path):
    """The resolved mapping of a variant (what run.json records) carries the --set value."""
    scenario = load(tmp_path, "name: s\n", SYNTHETIC, sets=("workload.num_requests=4",))
    assert scenario.variants[0].resolved["workload"]["num_requests"] == 4


def test_seed_overrides_every_variant_seed(tmp_path):
    """`--seed 9` sets the seed of the base and of a variant that has its own."""
    text = "name: s\nseed: 1\n" + SYNTHETIC + "variants: [{name: a}, {name: b, seed: 5}]\n"
    assert [v.spec.seed for v in load(tmp_path, text).variants] == [1, 5]
    assert [v.spec.seed for v in load(tmp_path, text, seed=9).variants] == [9, 9]


def test_seed_defaults_to_zero(tmp_path):
    """A scenario without `seed` runs with seed 0."""
    assert load(tmp_path, "name: s\n", SYNTHETIC).variants[0].spec.seed == 0


# -- policy forms -------------------------------------------------------------------------


@pytest.mark.parametrize("policy, name, params", [
    ("spf", "spf", {}),
    ("{name: spf}", "spf", {}),
    ("{name: spf, aging: 0.05}", "spf", {"aging": 0.05}),
    ("{name: spf, params: {aging: 0.05}}", "spf", {"aging": 0.05}),
    ("{name: priority, aging: 2}", "priority", {"aging": 2}),
])
def test_policy_forms(tmp_path, policy, name, params):
    """A name, `{name, <param>}` and `{name, params: {...}}` all build the same policy."""
    variant = load(tmp_path, f"name: s\npolicy: {policy}\n", SYNTHETIC).variants[0]
    assert variant.spec.policy.name == name
    assert policy_params(variant) == params
    built = make_policy(variant.spec.policy.name, **policy_params(variant))
    assert getattr(built, "aging", 0) == params.get("aging", 0)


def test_policy_defaults_to_fcfs(tmp_path):
    """Without `policy:` a scenario runs FCFS."""
    assert load(tmp_path, "name: s\n", SYNTHETIC).variants[0].spec.policy.name == "fcfs"


# -- expectations -------------------------------------------------------------------------


def expect(**fields) -> Expectation:
    return Expectation(**{"op": ">", "value": 0, **fields})


@pytest.mark.parametrize("op, value, passed", [
    (">", 4, True), (">", 5, False), (">=", 5, True), ("<", 5, False), ("<=", 5, True),
    ("==", 5, True), ("!=", 5, False), ("!=", 4, True),
])
def test_expectation_operators(op, value, passed):
    """`metric op value` on a variant's summary, for every operator."""
    [check] = check_expectations([expect(variant="a", metric="num_preemptions", op=op,
                                         value=value)], {"a": {"num_preemptions": 5}})
    assert check.passed is passed
    assert check.actual == 5


def test_expectation_ratio_to_compares_the_ratio_of_two_variants():
    """With `ratio_to`, the value is compared with metric(variant) / metric(ratio_to)."""
    summaries = {"base": {"num_preemptions": 2}, "pool60": {"num_preemptions": 12}}
    [above, below] = check_expectations(
        [expect(variant="pool60", metric="num_preemptions", op=">", value=5, ratio_to="base"),
         expect(variant="pool60", metric="num_preemptions", op=">", value=7, ratio_to="base")],
        summaries)
    assert above.actual == pytest.approx(6.0)
    assert (above.passed, below.passed) == (True, False)


def test_expectation_per_divides_by_another_metric_of_the_same_variant():
    """With `per`, the figure is metric / per (all long prompts starved: ratio 1)."""
    summary = {"num_starved_long": 7, "num_requests_long": 7, "num_finished": 3,
               "num_requests": 10}
    checks = check_expectations(
        [expect(variant="v", metric="num_starved_long", per="num_requests_long", op="==",
                value=1),
         expect(variant="v", metric="num_finished", per="num_requests", op="<", value=0.5)],
        {"v": summary})
    assert [c.actual for c in checks] == [pytest.approx(1.0), pytest.approx(0.3)]
    assert all(c.passed for c in checks)


def test_expectation_per_and_ratio_to_together():
    """`per` applies within each variant first, then `ratio_to` divides the two figures."""
    summaries = {"a": {"num_finished": 8, "num_requests": 10},
                 "b": {"num_finished": 2, "num_requests": 10}}
    [check] = check_expectations(
        [expect(variant="b", metric="num_finished", per="num_requests", ratio_to="a", op="<",
                value=0.3)], summaries)
    assert check.actual == pytest.approx(0.25)
    assert check.passed is True


def test_expectation_on_a_variant_not_run_is_skipped():
    """A check needing a variant that did not run is skipped (passed None), not failed."""
    [check] = check_expectations(
        [expect(variant="a", metric="num_finished", ratio_to="missing")],
        {"a": {"num_finished": 1}})
    assert check.passed is None


def test_expectation_on_a_metric_without_value_fails():
    """A metric that is None (e.g. no TTFT because nothing ran) fails the check."""
    [check] = check_expectations([expect(variant="a", metric="ttft_p99", op="<", value=10)],
                                 {"a": {"ttft_p99": None}})
    assert check.passed is False


def test_expectation_ratio_to_a_zero_reference_fails():
    """A ratio to a zero figure is undefined: the check fails instead of dividing by zero."""
    [check] = check_expectations(
        [expect(variant="b", metric="num_preemptions", ratio_to="a", op=">", value=5)],
        {"a": {"num_preemptions": 0}, "b": {"num_preemptions": 40}})
    assert check.passed is False


MIX = """\
    workload:
      kind: synthetic
      num_requests: 10
      arrival: {kind: all_at_once}
      mix:
        - {name: short, weight: 1, prompt_len: 10, output_len: 3}
        - {name: long, weight: 1, prompt_len: 100, output_len: 3}
    """


def test_a_per_class_metric_must_name_a_class_of_the_workload(tmp_path):
    """`ttft_p99_lnog` on a workload with classes short and long: refused, classes listed."""
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, "name: s\n", MIX, """\
            expect:
              - {variant: base, metric: ttft_p99_lnog, op: "<", value: 1}
            """)
    assert caught.value.field == "expect[0].metric"
    assert "did you mean 'ttft_p99_long'?" in caught.value.message


def test_expectations_load_from_the_file(tmp_path):
    """`expect:` entries load with their fields, per-class metrics included."""
    scenario = load(tmp_path, "name: s\n", MIX, """\
        variants: [{name: a}, {name: b}]
        expect:
          - {variant: b, metric: num_preemptions, op: ">", value: 5, ratio_to: a, note: soar}
          - {variant: a, metric: num_starved_long, per: num_requests_long, op: "==", value: 1}
        """)
    first, second = scenario.expectations
    assert (first.variant, first.metric, first.op, first.value, first.ratio_to, first.note) == (
        "b", "num_preemptions", ">", 5.0, "a", "soar")
    assert (second.metric, second.per) == ("num_starved_long", "num_requests_long")


# -- errors carry the file, the field path and the YAML line ------------------------------


def error_of(tmp_path: Path, *parts: str, sets: tuple[str, ...] = ()) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load(tmp_path, *parts, sets=sets)
    return info.value


def test_error_in_the_base_names_file_field_and_line(tmp_path):
    """A bad base value points at its field path and the YAML line it is on."""
    error = error_of(tmp_path, "name: s\nseed: 1\n\nengine:\n  num_blocks: 0\n", SYNTHETIC)
    assert error.source.endswith("scenario.yaml")
    assert (error.field, error.line) == ("engine.num_blocks", 5)
    assert "scenario.yaml:5: engine.num_blocks:" in str(error)


def test_error_in_a_variant_points_at_the_variant_and_its_line(tmp_path):
    """A bad value in `variants[1]` is reported at variants[1].<path>, on that line."""
    error = error_of(tmp_path, "name: s\n", SYNTHETIC, """\
        variants:
          - {name: ok}
          - name: bad
            engine: {watermark: 2}
        """)
    assert error.field == "variants[1].engine.watermark"
    assert error.line == 11


def test_error_in_the_base_is_blamed_on_the_base_even_with_variants(tmp_path):
    """A bad base field that no variant overrides is reported at the base, not a variant."""
    error = error_of(tmp_path, "name: s\nengine: {num_blocks: -1}\n", SYNTHETIC,
                     "variants: [{name: a}, {name: b, engine: {watermark: 0.1}}]\n")
    assert (error.field, error.line) == ("engine.num_blocks", 2)


def test_error_from_set_names_the_option(tmp_path):
    """A bad --set value is reported against the file, --set and the path, not a file line."""
    error = error_of(tmp_path, "name: s\n", SYNTHETIC, sets=("engine.num_blocks=0",))
    assert error.source.endswith("scenario.yaml") and error.line is None
    assert error.field == "--set engine.num_blocks"


def test_error_in_an_expectation_points_at_its_line(tmp_path):
    """An expectation naming an unknown metric is reported at expect[i].metric, its line."""
    error = error_of(tmp_path, "name: s\n", SYNTHETIC, """\
        expect:
          - {variant: base, metric: num_finished, op: ">", value: 0}
          - {variant: base, metric: ttft_p98, op: ">", value: 0}
        """)
    assert (error.field, error.line) == ("expect[1].metric", 10)
    assert "ttft_p99" in error.message  # the close match is suggested


def test_readme_lists_every_key_a_variant_may_override():
    """The scenario reference's sentence on variant overrides names exactly `schema.OVERRIDABLE`."""
    import re
    from pathlib import Path

    from kvsched.schema import OVERRIDABLE

    readme = (Path(__file__).parent.parent / "docs" / "scenarios.md").read_text(encoding="utf-8")
    listed = re.search(r"A variant may override `([^`]+)`", " ".join(readme.split()))
    assert listed is not None
    assert [key.strip() for key in listed.group(1).split(",")] == list(OVERRIDABLE)
