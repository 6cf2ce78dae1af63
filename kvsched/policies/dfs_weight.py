"""Depth-first by subtree weight (SGLang's `dfs-weight`): requests that share a cached
prefix are served one after another, the most shared prefix first."""

from __future__ import annotations

from dataclasses import dataclass

from kvsched.kvcache.base import CacheView
from kvsched.policies.prefix_match import segments
from kvsched.prefix import Segment
from kvsched.sequence import Seq


class _Node:
    """A run of tokens within one segment of the waiting requests' matched prefixes.
    Children are keyed by their first token, (segment id, offset in it): requests that
    share their tokens up to a node share the next one exactly when these agree."""

    __slots__ = ("length", "children", "own", "weight")

    def __init__(self, length: int) -> None:
        self.length = length
        self.children: dict[tuple[int, int], _Node] = {}
        self.own: list[int] = []  # the requests whose match ends here, in queue order
        self.weight = 0


def _insert(root: _Node, path: list[Segment], request: int) -> None:
    node = root
    for seg_id, end in path:
        offset = 0
        while offset < end:
            key = (seg_id, offset)
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node(end - offset)
            elif child.length > end - offset:  # the path stops or turns inside this run
                middle = node.children[key] = _Node(end - offset)  # keeps the child's place
                child.length -= middle.length
                middle.children[(seg_id, end)] = child
                child = middle
            offset += child.length
            node = child
    node.own.append(request)


@dataclass(frozen=True, slots=True)
class DfsWeight:
    """Requests sharing a cached prefix together, the most shared first; re-ranked every step.

    Each request sits where its cached prefix ends in the cache's tree; the tree is walked
    depth first, heavier subtrees first, a node's own requests after its subtrees.

    As SGLang 0.5.23 (`schedule_policy.py`: `_sort_by_dfs_weight`; the walk is
    `_dfs_weight_order` in `mem_cache/base_prefix_cache.py`): a request sits at the node
    where its match ends (`view.match(seq)` tokens along its prefix segments), a node's
    weight is the number of waiting requests in its subtree, children are visited by
    decreasing weight and a node's requests follow its children's, in queue order; the
    uncached (match 0) come last. The tree here is built from the waiting requests'
    matched prefixes, which has the same branch points and weights as the cache's own tree
    (a match ends on a node, since SGLang splits a node where a match stops). Children of
    equal weight go in the order their first request stands in the queue; SGLang takes the
    order in which the cache gained them, which the cache view does not tell.

    There is no fall-back to FCFS with many waiting (SGLang's applies to lpm and hrrn only),
    and SGLang's in-batch prefix check, though computed for dfs-weight, does not enter its
    sort, so there are no parameters. Without prefix caching it is FCFS, as in SGLang.
    """

    def order(self, seqs: list[Seq], now: float, view: CacheView | None) -> list[Seq]:
        if view is None:
            return seqs
        root = _Node(0)
        for i, seq in enumerate(seqs):
            _insert(root, segments(seq, view.match(seq)), i)
        # Weights bottom up, then the walk (explicit stacks: a chain of turns nests deep).
        nodes, stack = [], [root]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node.children.values())
        for node in reversed(nodes):
            node.weight = len(node.own) + sum(c.weight for c in node.children.values())
        out: list[int] = []
        walk: list[tuple[_Node, bool]] = [(root, False)]
        while walk:
            node, expanded = walk.pop()
            if expanded:
                out.extend(node.own)
                continue
            walk.append((node, True))
            heavy_first = sorted(node.children.values(), key=lambda c: -c.weight)
            walk.extend((child, False) for child in reversed(heavy_first))
        return [seqs[i] for i in out]
