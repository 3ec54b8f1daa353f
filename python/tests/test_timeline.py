"""bench/timeline.py: the per-step analysis of a GPU timeline, on a made-up trace (CPU only)."""

import pytest


@pytest.fixture(scope="module")
def timeline(load_script):
    return load_script("bench/timeline.py")


def step_events(t0):
    """One 100 us step: OpenMM's kernels, two GraphForce kernels (the second overlapping the first by 2 us), a copy."""
    return [
        {"ph": "X", "cat": "kernel", "name": "integrateVerletPart1", "ts": t0, "dur": 2.0},
        {"ph": "X", "cat": "kernel", "name": "void GraphPlugin::momentsKernel<float, 1, 1>(...)", "ts": t0 + 10, "dur": 20.0},
        {"ph": "X", "cat": "kernel", "name": "void GraphPlugin::forcesKernel<float, 1, 1>(...)", "ts": t0 + 28, "dur": 30.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": t0 + 60, "dur": 1.0},
        {"ph": "X", "cat": "kernel", "name": "integrateVerletPart2", "ts": t0 + 70, "dur": 2.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": t0 + 1, "dur": 50.0},  # not GPU activity
    ]


def test_per_step_figures(timeline):
    events = []
    for k in range(5):
        events += step_events(1000.0 + 100.0 * k)
    events = timeline.gpu_events({"traceEvents": list(reversed(events))})
    assert all(e["cat"] != "cpu_op" for e in events)
    t = timeline.analyse(events)
    assert t["steps"] == 3  # the first and the last marker's steps are left out
    assert t["span_us"] == pytest.approx(100.0)
    # busy: 2 + (20 + 30 - 2 overlap) + 1 + 2 = 53
    assert t["busy_us"] == pytest.approx(53.0)
    assert t["idle_us"] == pytest.approx(47.0)
    moments = t["kernels"]["void GraphPlugin::momentsKernel<float, 1, 1>(...)"]
    assert moments == {"count": 1.0, "us": 20.0, "gap_us": pytest.approx(8.0)}
    assert t["kernels"]["void GraphPlugin::forcesKernel<float, 1, 1>(...)"]["gap_us"] == 0.0  # overlaps the moments
    assert t["kernels"]["Memcpy DtoH (Device -> Pinned)"]["gap_us"] == pytest.approx(2.0)
    assert t["graph_us"] == pytest.approx(51.0)
    assert t["graph_gap_us"] == pytest.approx(10.0)
    assert t["openmm_us"] == pytest.approx(4.0)
    assert t["openmm_gap_us"] == pytest.approx(9.0)  # before integrateVerletPart2 (the step's first kernel has none)


def test_too_few_steps_is_an_error(timeline):
    events = timeline.gpu_events({"traceEvents": step_events(0.0) + step_events(100.0)})
    with pytest.raises(ValueError, match="2 step markers"):
        timeline.analyse(events)


def test_openmm_kernels_are_told_apart(timeline):
    assert timeline.is_openmm("clearTwoBuffers")
    assert timeline.is_openmm("integrateVerletPart2")
    assert not timeline.is_openmm("void GraphPlugin::(anonymous namespace)::denseSmallKernel<float, true>(...)")


def test_evaluation_markers(timeline):
    """--evaluations: each getState is marked by PyTorch's fill kernel, which delimits the spans and is in no total."""
    marker = timeline.EVALUATION_MARKER + "<4, at::native::FillFunctor<float>, ...>(...)"
    events = []
    for k in range(4):
        t0 = 1000.0 + 200.0 * k
        events += [
            {"ph": "X", "cat": "kernel", "name": marker, "ts": t0, "dur": 1.0},
            {"ph": "X", "cat": "kernel", "name": "clearTwoBuffers", "ts": t0 + 5, "dur": 2.0},
            {"ph": "X", "cat": "kernel", "name": "void GraphPlugin::forcesKernel<float, 1, 1>(...)", "ts": t0 + 10, "dur": 100.0},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": t0 + 150, "dur": 10.0},
        ]
    t = timeline.analyse(timeline.gpu_events({"traceEvents": events}), timeline.EVALUATION_MARKER)
    assert t["steps"] == 2
    assert t["span_us"] == pytest.approx(200.0)
    assert t["busy_us"] == pytest.approx(113.0)
    assert t["graph_us"] == pytest.approx(110.0)  # the kernel and the copy, not the marker
    assert t["openmm_us"] == pytest.approx(2.0)
    assert t["kernels"][marker[:90]]["us"] == pytest.approx(1.0)  # names are cut at 90 characters
