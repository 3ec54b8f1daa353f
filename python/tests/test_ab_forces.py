"""bench/ab_forces.py: results of plugin builds compared bit for bit (CPU only: the Reference platform)."""

import numpy as np
import pytest


def test_equal_results_pass_and_one_changed_bit_fails(load_script, tmp_path, capsys):
    ab = load_script("bench/ab_forces.py")
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    ab.record(["small:512"], ["mixed"], a, platform="Reference")
    ab.record(["small:512"], ["mixed"], b, platform="Reference")
    assert ab.compare([a, b]) == 0
    assert "all bitwise equal" in capsys.readouterr().out
    changed = dict(np.load(b))
    forces = changed["small:512|default|forces"]
    assert forces.shape == (512, 3) and np.abs(forces).max() > 0
    forces.view(np.uint64)[7, 1] ^= 1  # the last bit of one component
    np.savez(b, **changed)
    assert ab.compare([a, b]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT  small:512|default|forces" in out and "same  small:512|default|energy" in out


def test_other_cases_and_bad_arguments_are_reported(load_script, tmp_path, capsys):
    ab = load_script("bench/ab_forces.py")
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    np.savez(a, **{"small:512|mixed|energy": np.array([1.0])})
    np.savez(b, **{"medium:512|mixed|energy": np.array([1.0])})
    assert ab.compare([a, b]) == 1
    assert "different cases" in capsys.readouterr().out
    for bad in ["small", "small:x", "small:1", "small:512:CudaChunkRows"]:
        with pytest.raises(SystemExit, match="--cases"):
            ab.parse_case(bad)
    assert ab.parse_case("small:512:CudaChunkRows=37,CheckFinite=deferred") == (
        "small", 512, {"CudaChunkRows": "37", "CheckFinite": "deferred"})
    with pytest.raises(SystemExit, match="two or more"):
        ab.compare([a])
