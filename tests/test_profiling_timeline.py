"""benchmarks/profiling.py's timeline arithmetic on made-up kernel intervals (the GPU machine
feeds it a graph replay's): the leading input copies dropped, busy as the union of the
intervals (overlapping side-stream kernels counted once), idle gaps with their neighbours."""

from __future__ import annotations

from benchmarks.profiling import timeline_summary


def test_timeline_summary_unions_overlaps_and_lists_gaps():
    rows = [(0.0, 1.0, "Memcpy DtoD"), (50.0, 51.0, "Memcpy DtoD"),  # the replay's inputs, then the host
            (100.0, 110.0, "gemv"), (105.0, 108.0, "side"), (112.0, 115.0, "norm"), (114.0, 120.0, "side"),
            (121.0, 122.0, "norm")]
    result, idle, by_name = timeline_summary(rows)
    assert result == {"kernels": 5, "span_us": 22.0, "busy_us": 19.0, "idle_us": 3.0, "summed_us": 23.0}
    assert idle == [(2.0, "gemv", "norm"), (1.0, "side", "norm")]
    assert by_name == {"gemv": [1, 10.0], "side": [2, 9.0], "norm": [2, 4.0]}
    assert timeline_summary([(0.0, 1.0, "Memcpy HtoD")]) == ({}, [], {})
