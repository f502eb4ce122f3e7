"""How the Gluon decode GEMV shares its work out (``gluon_gemv._work``; host arithmetic, no GPU):
``balanced_work`` picks the K split whose busiest lane costs least and then the fewest programs that keep it.
The expected splits below were counted by hand from the rule's cost (a lane's items times their steps + 1,
plus 3 where K is split) at V4.1's widths on 115 programs of two lanes."""

from __future__ import annotations

import pytest
import torch

from deepinfer_adapters.kernels import gluon_gemv
from deepinfer_adapters.kernels.triton_fp8_gemm import split_k


def _lanes(n_tiles, K, programs=115, lanes=2):
    return gluon_gemv.balanced_work(n_tiles, K, programs, lanes, 1.0, 3.0)


@pytest.mark.parametrize("name,n_tiles,K,split", [
    ("wq_a+wkv", 28, 5120, 8),  # 8 x 5 steps on 224 lanes (10 x 4 steps: 280 items, some lanes take two)
    ("wo_b", 80, 8192, 8),  # 640 items of 8 steps, 3 a lane: 30 (4 splits of 16 steps, 2 a lane: 37)
    ("shared_w13", 72, 5120, 3),  # 216 items of 14 steps, 1 a lane: 18 (4 x 10 steps, 2 a lane: 25)
    ("wq_b", 512, 1280, 1),  # 3 items of 10 steps a lane: 33; 2 splits tie (5 x 6 + 3) and cost a split sum
])
def test_the_lanes_rule_picks_the_cheapest_busiest_lane(name, n_tiles, K, split):
    got, k_per_split, programs = _lanes(n_tiles, K)
    assert got == split, name
    assert (got, k_per_split) == split_k(n_tiles, K, 128, n_tiles * split if split > 1 else 0)


@pytest.mark.parametrize("n_tiles,K,most,lanes", [(28, 5120, 115, 2), (512, 1280, 115, 2), (80, 8192, 115, 1),
                                                   (128, 4096, 132, 2), (432, 5120, 124, 2), (3, 256, 115, 2)])
def test_the_lanes_rule_takes_the_fewest_programs_that_keep_its_busiest_lane(n_tiles, K, most, lanes):
    split, _, programs = gluon_gemv.balanced_work(n_tiles, K, most, lanes, 1.0, 3.0)
    items = n_tiles * split
    busiest = -(-items // (most * lanes))
    assert 1 <= programs <= most
    assert -(-items // (programs * lanes)) == busiest  # as busy as on every program
    if programs > 1:
        assert -(-items // ((programs - 1) * lanes)) > busiest  # one program fewer would load a lane more


def test_work_follows_the_rule_on_the_share_of_the_sms(monkeypatch):
    monkeypatch.setattr(gluon_gemv, "_sm_count", lambda device: 132)
    cpu = torch.device("cpu")
    # 7/8 of 132 SMs: 115 programs at most
    assert gluon_gemv._work(80, 8192, 2, cpu) == _lanes(80, 8192)
    assert gluon_gemv._work(80, 8192, 2, cpu)[0] == 8
    # a quarter: 33 programs, 66 lanes; wq_a+wkv's 28 tiles of 40 steps split 2 ways (56 items, one a lane: 21 +
    # 3 = 24; unsplit 41; 4 ways two a lane: 2 x 11 + 3 = 25; 8 ways four a lane: 4 x 6 + 3 = 27), on the 28
    # programs that keep one item a lane
    assert gluon_gemv._work(28, 5120, 2, cpu, share=0.25) == (2, 2560, 28)


def test_a_dense_gemv_takes_every_sm_only_where_that_cuts_its_busiest_lane_enough(monkeypatch):
    """``WHOLE_GPU_GAIN`` (15%): wq_b's 512 tiles of 10 steps take 3 items on some of 7/8 of 132 SMs' 230 lanes (3 x
    11 = 33) and 2 on 128 of them (22: a third less), so it takes 128 programs; the shared expert's w2 (80 tiles of
    18 steps) 13 -> 10 on every SM (23%) too; wo_b's best on every SM (3 splits, 26) is 13% under its 30 and keeps
    the share; a launch given its own share (one token's experts, wo_a) keeps it."""
    monkeypatch.setattr(gluon_gemv, "_sm_count", lambda device: 132)
    cpu = torch.device("cpu")
    whole = {shape: gluon_gemv.balanced_work(*shape, 132, 2, 1.0, 3.0) for shape in ((512, 1280), (80, 2304))}
    assert whole[(512, 1280)] == (1, 1280, 128)
    assert gluon_gemv._work(512, 1280, 2, cpu) == whole[(512, 1280)]
    assert gluon_gemv._work(80, 2304, 2, cpu) == whole[(80, 2304)] != _lanes(80, 2304)
    assert gluon_gemv._work(80, 8192, 2, cpu) == _lanes(80, 8192)
    assert gluon_gemv._work(512, 1280, 2, cpu, share=0.875) == _lanes(512, 1280) == (1, 1280, 86)
    monkeypatch.setattr(gluon_gemv, "WHOLE_GPU_GAIN", 0.25)
    assert gluon_gemv._work(80, 2304, 2, cpu) == _lanes(80, 2304)
    monkeypatch.setattr(gluon_gemv, "WHOLE_GPU_GAIN", 0.1)
    assert gluon_gemv._work(80, 8192, 2, cpu) == gluon_gemv.balanced_work(80, 8192, 132, 2, 1.0, 3.0)
    monkeypatch.setattr(gluon_gemv, "WHOLE_GPU_GAIN", 1.0)
    assert gluon_gemv._work(512, 1280, 2, cpu) == (1, 1280, 86)


def test_lane_cost_counts_the_busiest_lanes_items_and_the_split_sum():
    assert gluon_gemv.lane_cost(512, 1, 1280, 230, 1.0, 3.0) == 3 * 11  # 512 items on 230 lanes: 3 on some
    assert gluon_gemv.lane_cost(512, 1, 1280, 256, 1.0, 3.0) == 2 * 11
    assert gluon_gemv.lane_cost(80, 8, 1024, 214, 1.0, 3.0) == 3 * 9 + 3  # 640 items, split sum
