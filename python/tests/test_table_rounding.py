"""bench/table_rounding.py: the fp32 table lookups' share of the force error, in the plain sum of the kernels before
v47 and in the difference form they use now (CPU emulation of their arithmetic)."""

import pytest

pytest.importorskip("torch")


def test_difference_form_removes_the_knot_cancellation_on_float32_tables(load_script):
    bench = load_script("bench/table_rounding.py")
    errors = bench.table_force_errors("silicon")
    assert errors["table_dtype"] == "float32"
    # measured: plain 1.7e-5 (beyond the 1e-5 accuracy target on its own), difference 1.2e-6
    assert errors["plain"] > 1e-5
    assert errors["difference"] < 3e-6
    assert errors["difference"] < errors["plain"] / 5


def test_difference_form_is_no_worse_on_float64_tables(load_script):
    errors = load_script("bench/table_rounding.py").table_force_errors("small", 300)
    assert errors["table_dtype"] == "float64"
    assert errors["difference"] < errors["plain"]
