"""The policy registry, user policies loaded by name, and aging."""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass

import pytest

from kvsched import EngineConfig, Request, builtin_policies, make_policy, simulate

PACKAGE = "kvsched_test_userpolicies"

USER_MODULE = '''
"""Policies a user might write: any class with key(request, enqueue_time)."""


class LongestFirst:
    """Longest prompt first; `reverse=True` flips it to shortest first."""

    def __init__(self, reverse: bool = False) -> None:
        self.reverse = reverse

    def key(self, request, enqueue_time):
        length = request.prompt_len if self.reverse else -request.prompt_len
        return (length, enqueue_time)


class NoKey:
    """Not a policy: it cannot order anything."""
'''


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """A package `kvsched_test_userpolicies.ordering` importable from a temporary directory."""
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ordering.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{PACKAGE}.ordering"
    for name in (PACKAGE, f"{PACKAGE}.ordering"):
        sys.modules.pop(name, None)


def service_order(result) -> list[str]:
    """Request ids by the time they were first scheduled (ties: input order)."""
    scheduled = [r for r in result.requests if r.first_scheduled_time is not None]
    return [r.request_id for r in sorted(scheduled, key=lambda r: r.first_scheduled_time)]


# One request at a time (max_num_seqs=1): the waiting queue's order is the service order.
SERIAL = EngineConfig(max_num_seqs=1)


# -- registry --------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "class_name"), [
    ("fcfs", "Fcfs"), ("spf", "ShortestPromptFirst"), ("priority", "PriorityFirst")])
def test_make_policy_by_name_with_params(name, class_name):
    """make_policy builds each built-in by name and passes its parameters."""
    policy = make_policy(name, aging=2.5)
    assert type(policy).__name__ == class_name
    assert policy.aging == 2.5
    assert make_policy(name).aging == 0.0


def test_make_policy_defaults_to_fcfs():
    """make_policy() with no name is fcfs."""
    assert type(make_policy()).__name__ == "Fcfs"


def test_unknown_policy_names_the_valid_ones_and_suggests_a_close_match():
    """An unknown name is a ValueError listing the built-ins and suggesting 'spf' for 'spff'."""
    with pytest.raises(ValueError, match=r"did you mean 'spf'") as info:
        make_policy("spff")
    message = str(info.value)
    assert "spff" in message
    for name in ("fcfs", "spf", "priority"):
        assert name in message
    assert "package.module:ClassName" in message


def test_unknown_policy_without_close_match_has_no_suggestion():
    """A name close to nothing still lists the valid names, without a guess."""
    with pytest.raises(ValueError, match=r"fcfs, spf, priority") as info:
        make_policy("round_robin_xyz")
    assert "did you mean" not in str(info.value)


def test_unknown_parameter_is_rejected():
    """A parameter a policy does not have is a ValueError naming it and the accepted ones."""
    with pytest.raises(ValueError, match=r"agin.*did you mean 'aging'"):
        make_policy("spf", agin=1.0)
    with pytest.raises(ValueError, match=r"no parameter 'boost'.*aging"):
        make_policy("priority", boost=3)


def test_builtin_policies_list_names_and_aging_param():
    """builtin_policies names fcfs, spf, priority, lof, random, each with its `aging`
    (default 0; random also takes its `seed`), then the cache-aware lpm, dfs-weight, hrrn
    (their parameters: test_policies_cache_aware)."""
    infos = builtin_policies()
    assert [info.name for info in infos] == ["fcfs", "spf", "priority", "lof", "random",
                                             "lpm", "dfs-weight", "hrrn"]
    for info in infos[:5]:
        expected = {"seed": 0, "aging": 0.0} if info.name == "random" else {"aging": 0.0}
        assert info.params == expected
        assert info.summary  # a one-line description for `kvsched policies`
        assert make_policy(info.name, **info.params).aging == 0.0


# -- ordering of the built-ins ------------------------------------------------------------


def test_builtin_orders():
    """fcfs serves by arrival, spf by prompt length, priority by lowest value; ties by input."""
    # r0 holds the single slot for steps 0-3; the others queue behind it.
    requests = [Request("r0", 0, 5, 4), Request("long", 1, 30, 1, priority=2),
                Request("mid", 2, 20, 1, priority=0), Request("short", 2, 10, 1, priority=1),
                Request("short2", 2, 10, 1, priority=0)]
    orders = {name: service_order(simulate(requests, SERIAL, make_policy(name)))
              for name in ("fcfs", "spf", "priority")}
    assert orders == {
        "fcfs": ["r0", "long", "mid", "short", "short2"],
        "spf": ["r0", "short", "short2", "mid", "long"],
        "priority": ["r0", "mid", "short2", "short", "long"],
    }


# -- user policies --------------------------------------------------------------------------


def test_user_policy_loaded_by_module_path_changes_the_order(user_package):
    """A user's class, named `package.module:ClassName`, is used by simulate."""
    requests = [Request("r0", 0, 5, 3), Request("a", 1, 10, 1), Request("b", 1, 40, 1),
                Request("c", 1, 20, 1)]
    policy = make_policy(f"{user_package}:LongestFirst")
    assert type(policy).__name__ == "LongestFirst"
    assert service_order(simulate(requests, SERIAL, policy)) == ["r0", "b", "c", "a"]
    assert service_order(simulate(requests, SERIAL, make_policy("fcfs"))) == [
        "r0", "a", "b", "c"]
    flipped = make_policy(f"{user_package}:LongestFirst", reverse=True)
    assert service_order(simulate(requests, SERIAL, flipped)) == ["r0", "a", "c", "b"]


def test_user_policy_errors(user_package):
    """A wrong parameter, a missing class, a missing module or a class without `key` is a
    ValueError."""
    with pytest.raises(ValueError, match="reverso"):
        make_policy(f"{user_package}:LongestFirst", reverso=True)
    with pytest.raises(ValueError, match="Missing"):
        make_policy(f"{user_package}:Missing")
    with pytest.raises(ValueError, match="no_such_module_xyz"):
        make_policy("no_such_module_xyz:Policy")
    with pytest.raises(ValueError, match="key"):
        make_policy(f"{user_package}:NoKey")


# -- aging ----------------------------------------------------------------------------------

# r0 (5 tokens) is served first and holds the only slot for steps 0-9. L (50 tokens) has
# waited since 0 when the slot frees at step 10; s1 and s2 (10 tokens) arrived at 5 and 6.
# spf key = prompt_len + aging * enqueue_time: L 50, s1 10 + 5 * aging, s2 10 + 6 * aging,
# so L goes first once aging > 8 tokens per step.
AGING_WORKLOAD = [Request("r0", 0, 5, 10), Request("L", 0, 50, 1), Request("s1", 5, 10, 1),
                  Request("s2", 6, 10, 1)]


@pytest.mark.parametrize(("aging", "order", "ttft_long"), [
    (0.0, ["r0", "s1", "s2", "L"], 13),
    (5.0, ["r0", "s1", "s2", "L"], 13),
    (10.0, ["r0", "L", "s1", "s2"], 11),
])
def test_spf_aging_serves_a_long_waiter_before_fresh_short_ones(aging, order, ttft_long):
    """spf + aging: a long prompt that waited long enough is served before short newcomers."""
    result = simulate(AGING_WORKLOAD, SERIAL, make_policy("spf", aging=aging))
    assert service_order(result) == order
    long = next(r for r in result.requests if r.request_id == "L")
    assert long.ttft == ttft_long
    assert all(r.status == "finished" for r in result.requests)


@pytest.mark.parametrize(("aging", "order"), [
    (0.0, ["r0", "hi", "lo"]),
    (1.0, ["r0", "lo", "hi"]),
])
def test_priority_aging_lets_a_low_priority_waiter_through(aging, order):
    """priority + aging: effective priority = priority - aging * waiting time."""
    # At step 10: lo (priority 5, waiting since 0) vs hi (priority 0, arrived at 6):
    # keys 5 + 0 vs 0 + 6 * aging.
    requests = [Request("r0", 0, 5, 10), Request("lo", 0, 5, 1, priority=5),
                Request("hi", 6, 5, 1, priority=0)]
    result = simulate(requests, SERIAL, make_policy("priority", aging=aging))
    assert service_order(result) == order


def test_fcfs_aging_changes_nothing():
    """fcfs already serves the longest waiter first: aging does not change its order."""
    plain = simulate(AGING_WORKLOAD, SERIAL, make_policy("fcfs"))
    aged = simulate(AGING_WORKLOAD, SERIAL, make_policy("fcfs", aging=10.0))
    assert service_order(plain) == service_order(aged) == ["r0", "L", "s1", "s2"]
    assert plain.requests == aged.requests


@pytest.mark.parametrize("name", ["fcfs", "spf", "priority"])
def test_negative_aging_is_refused(name):
    """Negative aging would favour the newest arrivals: refused with the parameter named."""
    with pytest.raises(ValueError, match="aging must be >= 0"):
        make_policy(name, aging=-1)


def test_the_registry_loads_each_policy_when_named_and_takes_new_ones():
    """BUILTIN maps names to classes, importing a policy's module when it is first asked for;
    a class put in it is made by name, and the classes stay importable from the package."""
    import kvsched.policies as policies
    from kvsched.policies.spf import ShortestPromptFirst

    assert list(policies.BUILTIN)[:3] == ["fcfs", "spf", "priority"]
    assert policies.BUILTIN["spf"] is ShortestPromptFirst is policies.ShortestPromptFirst
    assert {"DfsWeight", "Fcfs", "make_policy"} <= set(dir(policies))
    with pytest.raises(AttributeError):
        policies.NoSuchPolicy  # noqa: B018

    @dataclass(frozen=True)
    class Newest:
        aging: float = 0.0

        def key(self, request, enqueue_time):
            return (-request.arrival_time,)

    policies.BUILTIN["newest"] = Newest
    try:
        assert type(make_policy("newest")) is Newest
    finally:
        del policies.BUILTIN["newest"]
    assert "newest" not in policies.BUILTIN
