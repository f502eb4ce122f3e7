"""``benchmarks.timing.paired_rounds``: an A/B's per-round differences (on - off), paired round by round."""

from __future__ import annotations

import pytest

from benchmarks.timing import paired_rounds


def test_paired_median_cancels_a_drift_the_sides_medians_keep():
    # the GPU slows down over the run by 0.1 ms a round; "on" is 0.005 ms faster in every round
    off = [1.70 + 0.1 * i for i in range(5)]
    on = [t - 0.005 for t in off]
    diff, faster = paired_rounds(off, on)
    assert diff == pytest.approx(-0.005) and faster == 5
    # on with one slow outlier round: the paired median holds, the count says 4 of 5
    on[2] += 1.0
    diff, faster = paired_rounds(off, on)
    assert diff == pytest.approx(-0.005) and faster == 4


def test_paired_rounds_counts_ties_as_not_faster_and_needs_pairs():
    assert paired_rounds([1.0, 2.0], [1.0, 2.5]) == (pytest.approx(0.25), 0)
    with pytest.raises(ValueError, match="rounds"):
        paired_rounds([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="rounds"):
        paired_rounds([], [])
