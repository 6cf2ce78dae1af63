"""The decode clock's token gaps: when each pass ended, kept only as far as queries need them."""

from __future__ import annotations

from bisect import bisect_left

from kvsched.histogram import GapHistogram
from kvsched.sequence import Seq


class GapTracker:
    """End times of decode passes, kept only as far as token-gap queries need them.

    A decode run's longest gap is the largest pass-to-pass gap since its first pass. Runs
    are always closed at the latest completed pass, so a stack of decreasing gaps answers
    "largest gap since pass a" by bisection, and only first-pass end times are remembered:
    memory stays small however long the run.

    `itl` counts every inter-token gap: each pass adds its gap once per request it decoded,
    and when a run closes, its first pass's gap is swapped for the real one (from the
    request's previous token), so the Python work is per pass and per run, never per token."""

    __slots__ = ("last_end", "itl", "_ticks", "_gaps", "_wanted")

    def __init__(self) -> None:
        self.last_end = 0.0  # end time of the latest completed pass (pass 0: time 0)
        self.itl = GapHistogram()
        self._ticks: list[int] = []
        self._gaps: list[float] = []
        self._wanted: dict[int, list[Seq]] = {}

    def want(self, tick: int, seq: Seq) -> None:
        """`seq` needs the end time of pass `tick` (the first of its next run)."""
        bucket = self._wanted.get(tick)
        if bucket is None:
            self._wanted[tick] = [seq]
        else:
            bucket.append(seq)

    def complete(self, tick: int, end: float, num_decodes: int = 0) -> None:
        """Pass `tick` ended at `end`, giving `num_decodes` requests a token."""
        gap = end - self.last_end
        self.last_end = end
        self._push(tick, gap)
        self.itl.add(gap, num_decodes)
        waiting = self._wanted.pop(tick, None)
        if waiting:
            for seq in waiting:
                seq.run_first_end = end
                seq.run_first_gap = gap

    def complete_many(self, first: int, ends: list[float], k: int,
                      num_decodes: int = 0) -> None:
        """Passes `first` .. `first + k - 1` ended at `ends[1]` .. `ends[k]` (`ends[0]`: the
        start of the first, which is the end of the pass before it).

        Runs only ever start at a stretch's first pass (nothing starts inside one), so
        queries reach into a stretch from its first or second pass: its first gap and the
        largest of the others are all the stack needs."""
        end = ends[1]
        gap = end - self.last_end
        self.last_end = ends[k]
        ticks, gaps = self._ticks, self._gaps  # (_push, inlined: once per stretch)
        while gaps and gaps[-1] <= gap:
            gaps.pop()
            ticks.pop()
        ticks.append(first)
        gaps.append(gap)
        if k > 1:
            # The later gaps, their largest and smallest, in one typed loop (not map(sub),
            # max() and min(): three passes of Python float objects per stretch).
            later = [0.0] * (k - 1)
            before = ends[1]
            top = low = ends[2] - before
            for j in range(k - 1):
                here = ends[j + 2]
                later_gap = here - before
                before = here
                later[j] = later_gap
                if later_gap > top:
                    top = later_gap
                elif later_gap < low:
                    low = later_gap
            while gaps and gaps[-1] <= top:
                gaps.pop()
                ticks.pop()
            ticks.append(first + k - 1)
            gaps.append(top)
        itl = self.itl
        itl.add(gap, num_decodes)
        if k > 1:
            # (Not in one call with the first: that one often differs from the others,
            # which then miss add_gaps' one-value and one-bucket paths.)
            itl.add_gaps(later, num_decodes, top, low)
        waiting = self._wanted.pop(first, None)
        if waiting:
            for seq in waiting:
                seq.run_first_end = end
                seq.run_first_gap = gap

    def _push(self, tick: int, gap: float) -> None:
        ticks, gaps = self._ticks, self._gaps
        while gaps and gaps[-1] <= gap:
            gaps.pop()
            ticks.pop()
        ticks.append(tick)
        gaps.append(gap)

    def max_gap_since(self, tick: int) -> float | None:
        """The largest gap of the passes from `tick` to the latest one."""
        i = bisect_left(self._ticks, tick)
        return self._gaps[i] if i < len(self._gaps) else None
