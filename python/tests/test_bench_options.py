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
