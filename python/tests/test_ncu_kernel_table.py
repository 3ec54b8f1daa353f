"""bench/ncu_kernel_table.py: Nsight Compute CSVs side by side (CPU only)."""

import pytest

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",'
          '"Section Name","Metric Name","Metric Unit","Metric Value"')


def write_csv(path, kernels):
    """An ncu --csv file (with the profiler's chatter above the header) of (kernel name, unit, value) rows."""
    lines = ["==PROF== Connected to process 1 (python3)", "small n=512: 0.1 ms per evaluation", HEADER]
    for number, (name, unit, value) in enumerate(kernels):
        lines.append(f'"{number}","1","python3","vm","{name}","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0",'
                     f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"')
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_times_are_summed_by_short_name_per_evaluation(load_script, tmp_path):
    table = load_script("bench/ncu_kernel_table.py")
    path = write_csv(tmp_path / "a.csv", [
        ("void GraphPlugin::(anonymous namespace)::momentsKernel<float, 2, GraphPlugin::(anonymous namespace)::EdgeShape<4, 16, 1>>"
         "(GraphPlugin::GraphModelParams<T1>, const T1 *)", "usecond", "10.5"),
        ("clearTwoBuffers", "ns", "2,400"),
        ("void cub::CUB_300000_SM_900_NS::DeviceRadixSortOnesweepKernel<Policy, false>(int *)", "msecond", "0.03"),
        ("void GraphPlugin::(anonymous namespace)::momentsKernel<float, 2, GraphPlugin::(anonymous namespace)::EdgeShape<4, 16, 1>>"
         "(GraphPlugin::GraphModelParams<T1>, const T1 *)", "usecond", "11.5"),
    ])
    times = table.kernel_times(path, evaluations=2)
    assert list(times) == ["momentsKernel", "clearTwoBuffers", "DeviceRadixSortOnesweepKernel"]
    assert times["momentsKernel"] == pytest.approx(11.0)
    assert times["clearTwoBuffers"] == pytest.approx(1.2)
    assert times["DeviceRadixSortOnesweepKernel"] == pytest.approx(15.0)


def test_columns_and_missing_kernels(load_script, tmp_path, capsys, monkeypatch):
    table = load_script("bench/ncu_kernel_table.py")
    a = write_csv(tmp_path / "a.csv", [("forcesKernel(int)", "us", "4"), ("statusKernel(int)", "usecond", "2")])
    b = write_csv(tmp_path / "b.csv", [("forcesKernel(int)", "usecond", "3")])
    monkeypatch.setattr("sys.argv", ["ncu_kernel_table.py", a, b, "--evaluations", "1", "--labels", "base,new"])
    table.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-2:] == ["base", "new"]
    assert lines[1].split() == ["forcesKernel", "4.00", "3.00"]
    assert lines[2].split() == ["statusKernel", "2.00", "-"]
    assert lines[3].split() == ["total", "6.00", "3.00"]


def test_bad_input_is_named(load_script, tmp_path, monkeypatch):
    table = load_script("bench/ncu_kernel_table.py")
    empty = tmp_path / "empty.csv"
    empty.write_text("==PROF== no kernels were profiled\n")
    with pytest.raises(SystemExit, match="no Nsight Compute CSV header"):
        table.kernel_times(str(empty), evaluations=1)
    odd = write_csv(tmp_path / "odd.csv", [("forcesKernel(int)", "cycle", "4")])
    with pytest.raises(SystemExit, match="unknown time unit 'cycle' for forcesKernel"):
        table.kernel_times(odd, evaluations=1)
    with pytest.raises(SystemExit, match="missing.csv: cannot read the Nsight Compute CSV"):
        table.kernel_times(str(tmp_path / "missing.csv"), evaluations=1)
    monkeypatch.setattr("sys.argv", ["ncu_kernel_table.py", odd, "--labels", "a,b"])
    with pytest.raises(SystemExit):
        table.main()
