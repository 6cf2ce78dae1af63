"""Each router's choice, checked by hand on views made up for it; loading and refusing."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from kvsched.routers import EngineView, RouteRequest, check_router, make_router


def req(session: str | None = None, rid: str = "r", prompt_len: int = 100) -> RouteRequest:
    return RouteRequest(rid, 0.0, prompt_len, 0, None, session)


def views(*loads: tuple[int, int, int]) -> list[EngineView]:
    """One view per (waiting, running, free blocks)."""
    return [EngineView(i, 100, w, r, f) for i, (w, r, f) in enumerate(loads)]


def build(name: str, n: int = 3, seed: int = 0, **params):
    return make_router(name, params, n, np.random.default_rng(seed))


def CachedView(index: int, waiting: int, running: int, hit: int) -> EngineView:  # noqa: N802
    """A view with a prefix cache holding `hit` tokens of any prompt (kvsched has none yet)."""
    return EngineView(index, 100, waiting, running, 50, prefix=lambda request: hit)


def test_round_robin_cycles_whatever_the_load():
    router = build("round_robin")
    loaded = views((50, 8, 0), (0, 0, 100), (0, 0, 100))
    assert [router.route(req(), loaded) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_random_is_seeded_and_uniform_enough():
    a = build("random", n=4, seed=7)
    b = build("random", n=4, seed=7)
    four = views(*[(0, 0, 100)] * 4)
    picks = [a.route(req(), four) for _ in range(400)]
    assert picks == [b.route(req(), four) for _ in range(400)]
    assert set(picks) == {0, 1, 2, 3}
    assert max(picks.count(k) for k in range(4)) < 140  # about 100 each
    other = build("random", n=4, seed=8)
    assert [other.route(req(), four) for _ in range(400)] != picks


def test_least_outstanding_counts_queued_plus_running_ties_to_lowest_index():
    router = build("least_outstanding")
    assert router.route(req(), views((3, 2, 10), (1, 3, 90), (0, 5, 90))) == 1
    assert router.route(req(), views((2, 2, 10), (1, 3, 90), (0, 4, 90))) == 0
    # Ties go to the lowest index, not the first listed.
    shuffled = [EngineView(2, 100, 1, 0, 9), EngineView(1, 100, 0, 2, 9),
                EngineView(0, 100, 0, 1, 9)]
    assert router.route(req(), shuffled) == 0


def test_least_kv_takes_the_most_free_blocks():
    router = build("least_kv")
    assert router.route(req(), views((0, 0, 10), (9, 9, 60), (0, 0, 40))) == 1
    # Equal free blocks: the less loaded, then the lower index.
    assert router.route(req(), views((5, 0, 60), (1, 0, 60), (1, 0, 60))) == 1


def test_prefix_aware_without_a_cache_is_least_loaded():
    router = build("prefix_aware")
    assert router.route(req(), views((4, 4, 10), (0, 2, 90), (1, 1, 90))) == 1


def test_prefix_aware_follows_the_longest_prefix_within_the_margin():
    router = build("prefix_aware", margin=3)
    replicas = [CachedView(0, 1, 1, 0), CachedView(1, 3, 2, 64), CachedView(2, 1, 1, 32)]
    assert router.route(req(), replicas) == 1  # load 5 vs least 2: gap 3 <= margin


def test_prefix_aware_leaves_an_overloaded_cache_holder_for_the_least_loaded():
    router = build("prefix_aware", margin=3)
    replicas = [CachedView(0, 1, 1, 0), CachedView(1, 4, 2, 64), CachedView(2, 2, 1, 32)]
    assert router.route(req(), replicas) == 0  # load 6 vs least 2: gap 4 > margin
    tight = build("prefix_aware", margin=0)
    even = [CachedView(0, 1, 1, 0), CachedView(1, 1, 1, 16)]
    assert tight.route(req(), even) == 1  # same load: the hit wins even with margin 0


def test_prefix_aware_breaks_equal_hits_by_load():
    router = build("prefix_aware", margin=10)
    replicas = [CachedView(0, 5, 0, 32), CachedView(1, 1, 0, 32), CachedView(2, 0, 0, 0)]
    assert router.route(req(), replicas) == 1


def test_prefix_aware_refuses_a_negative_margin():
    with pytest.raises(ValueError, match="margin"):
        check_router("prefix_aware", {"margin": -1})


def test_session_sticks_and_places_new_sessions_on_the_least_loaded():
    router = build("session")
    assert router.route(req("a"), views((0, 0, 9), (0, 0, 9), (0, 0, 9))) == 0
    assert router.route(req("b"), views((1, 0, 9), (0, 0, 9), (0, 0, 9))) == 1
    assert router.route(req("a"), views((9, 9, 0), (0, 0, 9), (0, 0, 9))) == 0  # sticky
    assert router.route(req(None), views((9, 9, 0), (3, 0, 9), (0, 1, 9))) == 2


def test_unknown_router_names_the_close_one():
    with pytest.raises(ValueError, match="did you mean 'least_kv'"):
        check_router("least_kb", {})


def test_validation_never_imports_a_users_module(tmp_path, monkeypatch):
    module = tmp_path / "noisy_router.py"
    module.write_text("raise SystemExit('imported!')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    check_router("noisy_router:Router", {})
    assert "noisy_router" not in sys.modules
    with pytest.raises(ValueError, match="package.module:ClassName"):
        check_router("not a name:X", {})


def test_a_users_router_loads_when_it_is_a_class_with_route(tmp_path, monkeypatch):
    (tmp_path / "my_routers.py").write_text(textwrap.dedent("""
        class Last:
            def __init__(self, bias=0):
                self.bias = bias
            def route(self, request, replicas):
                return len(replicas) - 1 - self.bias

        def not_a_class(request, replicas):
            return 0

        class NoRoute:
            def __init__(self):
                raise RuntimeError("constructor must not run")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    router = build("my_routers:Last", bias=1)
    assert router.route(req(), views((0, 0, 1), (0, 0, 1), (0, 0, 1))) == 1
    with pytest.raises(ValueError, match="is not a class"):
        build("my_routers:not_a_class")
    with pytest.raises(ValueError, match="no route"):
        build("my_routers:NoRoute")
    with pytest.raises(ValueError, match="has no class"):
        build("my_routers:Missing")


def test_views_are_read_only_and_hide_the_output_length():
    view = views((1, 2, 3))[0]
    with pytest.raises(AttributeError):
        view.num_waiting = 0  # type: ignore[misc]
    assert view.num_outstanding == 3 and view.cached_prefix_len(req()) == 0
    assert not hasattr(req(), "output_len")
