"""bench/run_benchmarks.py's command-line options that need no GPU."""

import pytest


def test_force_properties_are_parsed(load_script):
    bench = load_script("bench/run_benchmarks.py")
    assert bench.parse_force_properties([]) == {}
    assert bench.parse_force_properties(["CheckFinite=deferred", "CudaFusedCluster=8"]) == {
        "CheckFinite": "deferred",
        "CudaFusedCluster": "8",
    }
    assert bench.parse_force_properties(["CudaChunkRows=a=b"]) == {"CudaChunkRows": "a=b"}
    for bad in ("CheckFinite", "=deferred"):
        with pytest.raises(SystemExit, match="KEY=VALUE"):
            bench.parse_force_properties([bad])


def test_openmm_cuda_particle_limit_keeps_each_array_under_2_gib(load_script):
    bench = load_script("bench/run_benchmarks.py")
    for precision, width in (("single", 16), ("mixed", 32), ("double", 32)):
        limit = bench.openmm_cuda_particle_limit(precision)
        assert limit % 32 == 0  # OpenMM pads the particle count to a multiple of 32
        assert limit * width <= 2**31 - 1 < (limit + 32) * width
    # v41 on an H200, mixed precision: 67,100,000 ran, 70,000,000 failed in OpenMM's upload of posDelta
    assert 67_100_000 <= bench.openmm_cuda_particle_limit("mixed") < 70_000_000


def _sizes_that_fit(largest, error="out of memory: CUDA_ERROR_OUT_OF_MEMORY"):
    """An attempt_size for search_largest: n runs up to `largest`; records the sizes tried."""
    tried = []

    def attempt(n):
        tried.append(n)
        ok = n <= largest
        return {"n": n, "ok": ok, "error": None if ok else error, "seconds": 1.0}

    return attempt, tried


def test_largest_search_doubles_then_bisects(load_script):
    bench = load_script("bench/run_benchmarks.py")
    attempt, tried = _sizes_that_fit(50_000_000)
    found = bench.search_largest(attempt, 30_000_000, largest_max=1 << 30, openmm_limit=None, bisections=3,
                                 seconds_left=lambda: 1e9)
    assert tried == [30_000_000, 60_000_000, 45_000_000, 52_500_000, 48_750_000]
    assert found["largest_n"] == 48_750_000 and found["smallest_failed_n"] == 52_500_000
    assert found["limited_by"] == "out of memory" and len(found["attempts"]) == 5


def test_largest_search_tries_openmm_limit_and_stops_there(load_script):
    bench = load_script("bench/run_benchmarks.py")
    limit = bench.openmm_cuda_particle_limit("mixed")
    attempt, tried = _sizes_that_fit(10**9)
    found = bench.search_largest(attempt, 60_000_000, largest_max=1 << 30, openmm_limit=limit, bisections=4,
                                 seconds_left=lambda: 1e9)
    assert tried == [60_000_000, limit]  # not 120,000,000: OpenMM could not upload its arrays
    assert found["largest_n"] == limit and found["smallest_failed_n"] is None
    assert found["limited_by"].startswith("OpenMM's CUDA platform")
    # the cap and the time budget still apply to the limit
    attempt, tried = _sizes_that_fit(10**9)
    found = bench.search_largest(attempt, 60_000_000, largest_max=65_000_000, openmm_limit=limit, bisections=0,
                                 seconds_left=lambda: 1e9)
    assert tried == [60_000_000] and found["limited_by"] == "cap --largest-max 65000000"
    attempt, tried = _sizes_that_fit(10**9)
    found = bench.search_largest(attempt, 60_000_000, largest_max=1 << 30, openmm_limit=limit, bisections=0,
                                 seconds_left=lambda: 2.0)
    assert tried == [60_000_000] and found["limited_by"] == "time budget"


def test_largest_search_bisects_below_openmm_limit_when_memory_runs_out(load_script):
    bench = load_script("bench/run_benchmarks.py")
    limit = bench.openmm_cuda_particle_limit("mixed")
    attempt, tried = _sizes_that_fit(64_000_000)
    found = bench.search_largest(attempt, 60_000_000, largest_max=1 << 30, openmm_limit=limit, bisections=2,
                                 seconds_left=lambda: 1e9)
    assert tried[:2] == [60_000_000, limit] and found["smallest_failed_n"] is not None
    assert 60_000_000 <= found["largest_n"] <= 64_000_000 and found["limited_by"] == "out of memory"
