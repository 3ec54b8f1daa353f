"""bench/nve_drift.py: the drift fit on a known series, and a short Reference run (CPU only)."""

import json
import math

import numpy as np
import pytest


@pytest.fixture(scope="module")
def nve(load_script):
    return load_script("bench/nve_drift.py")


def test_fit_of_a_linear_series(nve):
    times = np.linspace(0.0, 0.02, 1001)  # ns
    slope, start = 37.5, -2.1e5  # kJ/mol/ns, kJ/mol: a drift that is small next to the energy
    fit = nve.fit_drift(times, start + slope * times, n_atoms=512, temperature_k=1000.0)
    assert fit["drift_kj_per_mol_per_ns"] == pytest.approx(slope, rel=1e-6)
    assert fit["intercept_kj_per_mol"] == pytest.approx(start, rel=1e-12)
    assert fit["fluctuation_rms_kj_per_mol"] < 1e-6
    assert fit["max_abs_deviation_kj_per_mol"] == pytest.approx(slope * 0.02, rel=1e-6)
    kb = 0.00831446261815324  # kJ/mol/K
    assert fit["drift_kt_per_ns_per_atom"] == pytest.approx(slope / (kb * 1000.0 * 512), rel=1e-6)
    # 1 kJ/mol/ns = 1/96.485 meV/ps
    assert fit["drift_mev_per_atom_per_ps"] == pytest.approx(slope / (96.48533212331 * 512), rel=1e-6)


def test_fit_with_an_oscillation(nve):
    # A whole number of periods of a cosine (even about the middle, so uncorrelated with t) about the line:
    # the slope is unchanged, the RMS about the fit is A/sqrt(2).
    times = np.linspace(0.0, 0.01, 4001)
    amplitude = 0.3
    energies = 5.0 - 12.0 * times + amplitude * np.cos(2 * np.pi * 20 * times / 0.01)
    fit = nve.fit_drift(times, energies)
    assert fit["drift_kj_per_mol_per_ns"] == pytest.approx(-12.0, abs=1e-3)
    assert fit["fluctuation_rms_kj_per_mol"] == pytest.approx(amplitude / math.sqrt(2), rel=0.01)
    assert "drift_kt_per_ns_per_atom" not in fit  # no atom count given
    with pytest.raises(ValueError):
        nve.fit_drift([0.0], [1.0])


def test_identical_initial_velocities(nve):
    masses = np.full(64, 28.0855)
    a = nve.maxwell_boltzmann(masses, 1000.0, seed=3)
    assert np.array_equal(a, nve.maxwell_boltzmann(masses, 1000.0, seed=3))
    assert np.allclose((masses[:, None] * a).sum(0), 0.0, atol=1e-10)
    temperature = (masses[:, None] * a ** 2).sum() / ((3 * 64 - 3) * 0.00831446261815324)
    assert temperature == pytest.approx(1000.0, rel=1e-9)


def test_short_reference_run(nve, tmp_path, capsys):
    out = tmp_path / "nve.json"
    assert nve.main(["--platforms", "Reference", "--atoms", "64", "--steps", "40", "--report-every", "10",
                     "--seed", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "kT/ns/atom" in printed and "Reference" in printed
    document = json.loads(out.read_text())
    header = document["header"]
    assert header["openmm_version"] and header["atoms"] == 64 and header["timestep_fs"] == 1.0
    assert "git_revision" in header and "gpu_name" in header
    (run,) = document["runs"]
    assert run["platform"] == "Reference" and run["precision"] == "double"
    assert run["steps"] == 40 and run["reports"] == 5 and run["error"] is None
    for key in ("drift_kj_per_mol_per_ns", "drift_kt_per_ns_per_atom", "drift_mev_per_atom_per_ps",
                "fluctuation_rms_kj_per_mol", "max_abs_deviation_kj_per_mol", "steps_per_s", "time_ns",
                "initial_total_energy_kj_per_mol", "mean_kinetic_temperature_k"):
        assert math.isfinite(run[key]), key
    assert run["time_ns"] == pytest.approx(40e-6)
    assert run["series"]["step"] == [0, 10, 20, 30, 40]
    # 64 atoms at 1 fs: the total energy stays within a few kJ/mol over 40 fs.
    assert run["max_abs_deviation_kj_per_mol"] < 5.0


def test_compare_with_a_run_of_the_same_length_only(nve, tmp_path, capsys):
    first = tmp_path / "first.json"
    base = ["--platforms", "Reference", "--atoms", "64", "--report-every", "10", "--seed", "2", "--no-series"]
    assert nve.main(base + ["--steps", "40", "--out", str(first)]) == 0
    second = tmp_path / "second.json"
    assert nve.main(base + ["--steps", "40", "--out", str(second), "--compare", str(first)]) == 0
    assert "|drift| 1x, |second-half drift| 1x (no worse)" in capsys.readouterr().out  # the same trajectory
    (run,) = json.loads(second.read_text())["runs"]
    assert run["compared_with"]["abs_drift_ratio"] == 1.0 and run["compared_with"]["steps"] == 40
    for changed, message in ((["--steps", "60"], "it ran 40 steps, this run --steps 60"),
                             (["--steps", "40", "--seed", "3"], "its seed is 2, this run's 3")):
        assert nve.main(base + changed + ["--out", "", "--compare", str(first)]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    (["--platforms", "NoSuchPlatform"], "unknown or unavailable platform"),
    (["--steps", "0"], "positive number of steps"),
    (["--reference-steps", "-5"], "positive number of steps"),
    (["--atoms", "100"], "8 x cells^3"),
])
def test_bad_input_is_one_line(nve, capsys, arguments, message):
    assert nve.main(arguments + ["--out", ""]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err


def test_summary_over_starts(nve, tmp_path, capsys):
    base = ["--platforms", "Reference", "--atoms", "64", "--report-every", "10", "--no-series", "--steps", "40"]
    compared = []
    for seed in ("2", "3"):
        stored = tmp_path / f"stored{seed}.json"
        assert nve.main(base + ["--seed", seed, "--out", str(stored)]) == 0
        compared.append(tmp_path / f"run{seed}.json")
        assert nve.main(base + ["--seed", seed, "--out", str(compared[-1]), "--compare", str(stored)]) == 0
    capsys.readouterr()
    assert nve.main(["--summarize"] + [str(p) for p in compared]) == 0
    out = capsys.readouterr().out
    assert "mean |drift| over 2 starts" in out and "(1x)" in out and "no worse than the stored runs" in out
    assert nve.main(["--summarize", str(tmp_path / "stored2.json")]) == 2  # not a compared run
    assert "not a run made with --compare" in capsys.readouterr().err


def test_rescored_run_on_reference_reads_out_exactly(nve, tmp_path, capsys):
    # Reference rescored on Reference: the same potential, so the readout is exactly zero and the rescored drift
    # is the run's own; the summary then carries the rescored lines.
    base = ["--platforms", "Reference", "--atoms", "64", "--report-every", "10", "--seed", "2", "--steps", "40"]
    stored = tmp_path / "stored.json"
    assert nve.main(base + ["--no-series", "--out", str(stored)]) == 0
    out = tmp_path / "rescored.json"
    assert nve.main(base + ["--rescore", "double", "--out", str(out), "--compare", str(stored)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["rescore_precision"] == "double"
    assert run["series"]["rescored_potential_kj_per_mol"] == run["series"]["potential_kj_per_mol"]
    assert run["readout_mean_kj_per_mol"] == 0.0 and run["readout_rms_kj_per_mol"] == 0.0
    assert run["rescored_drift_kj_per_mol_per_ns"] == pytest.approx(run["drift_kj_per_mol_per_ns"], rel=1e-12)
    assert "rescored in double: |drift| 1x" in capsys.readouterr().out
    assert nve.main(["--summarize", str(out)]) == 0
    summary = capsys.readouterr().out
    assert "rescored in double: mean |drift|" in summary and "readout (own - rescored potential): rms 0" in summary


def test_rescored_fit_separates_readout_from_dynamics(nve):
    # A conserved total energy read out with a potential that drifts by 3 kJ/mol/ns: the run's drift is the
    # readout's, the rescored drift is zero.
    t = np.linspace(0.0, 0.2, 401)
    kinetic = 100.0 + 5.0 * np.sin(40 * t)
    rescored = -1000.0 - kinetic + 0.0
    potential = rescored + 0.5 + 3.0 * t
    fit = nve.rescored_fit(t, kinetic, potential, rescored, None, None)
    assert fit["rescored_drift_kj_per_mol_per_ns"] == pytest.approx(0.0, abs=1e-9)
    assert fit["rescored_second_half_drift_kj_per_mol_per_ns"] == pytest.approx(0.0, abs=1e-8)
    assert fit["readout_drift_kj_per_mol_per_ns"] == pytest.approx(3.0)
    assert fit["readout_mean_kj_per_mol"] == pytest.approx(0.8)
    assert nve.rescored_fit(t[:3], kinetic[:3], potential[:3], rescored[:3], None, None) == dict(
        rescored_error="fewer than 4 finite frames")


def test_native_forces_control(nve, tmp_path, capsys):
    # --forces native: Stillinger-Weber (the potential the bundled model was trained on) as OpenMM's own custom
    # forces; its runs name their forces in the header and never compare with a GraphForce run.
    base = ["--platforms", "Reference", "--atoms", "64", "--report-every", "10", "--seed", "2", "--steps", "20",
            "--no-series"]
    native, graph = tmp_path / "native.json", tmp_path / "graph.json"
    assert nve.main(base + ["--forces", "native", "--out", str(native)]) == 0
    assert nve.main(base + ["--out", str(graph)]) == 0
    native_doc, graph_doc = json.loads(native.read_text()), json.loads(graph.read_text())
    assert native_doc["header"]["model"] == nve.NATIVE_FORCES
    assert graph_doc["header"]["model"] == "examples/models/silicon-sw.safetensors"
    # The same crystal; the model's energy at the lattice sites is SW's to 0.3% (-4.322 against -4.3366 eV/atom).
    e_native = native_doc["runs"][0]["initial_potential_energy_kj_per_mol"]
    e_graph = graph_doc["runs"][0]["initial_potential_energy_kj_per_mol"]
    assert e_native < 0 and abs(e_graph - e_native) < 5e-3 * abs(e_native)
    capsys.readouterr()
    assert nve.main(base + ["--forces", "native", "--out", "", "--compare", str(graph)]) == 2
    assert "its model is 'examples/models/silicon-sw.safetensors'" in capsys.readouterr().err


def test_energy_wander_sees_slow_changes_not_the_fast_oscillation(nve):
    t = np.arange(0, 20001) * 1e-5  # ns: 0.2 ns sampled every 0.01 ps
    oscillation = 0.18 * np.sqrt(2) * np.sin(2 * np.pi * t * 1e3 / 0.07)  # Verlet's fast part, 0.07 ps period
    flat = nve.energy_wander(t, -1000.0 + oscillation)
    assert set(flat) == {"10ps", "50ps", "100ps"} and max(flat.values()) < 2e-3
    drifting = nve.energy_wander(t, -1000.0 + oscillation + 3.0 * t)  # 3 kJ/mol/ns
    for lag, value in drifting.items():
        assert value == pytest.approx(3.0 * float(lag[:-2]) * 1e-3, rel=0.02, abs=2e-3)
    assert nve.energy_wander(t[:500], -1000.0 + oscillation[:500]) == {}  # 5 ps: too short for any lag


def test_summary_pools_the_wander(nve, tmp_path, capsys):
    def document(path, wander, compared_with=None):
        run = dict(platform="X", precision="mixed", steps=100, drift_kj_per_mol_per_ns=0.1,
                   second_half_drift_kj_per_mol_per_ns=0.2, wander_rms_kj_per_mol=wander)
        if compared_with:
            run["compared_with"] = dict(file=str(compared_with))
        header = dict(compared_with=str(compared_with), seed=int(path.stem[1:])) if compared_with else {}
        path.write_text(json.dumps(dict(header=header, runs=[run])))
        return path

    stored = [document(tmp_path / f"s{i}.json", {"10ps": 0.03, "50ps": w}) for i, w in enumerate((0.04, 0.02))]
    runs = [document(tmp_path / f"r{i}.json", {"10ps": 0.03, "50ps": w}, stored[i]) for i, w in enumerate((0.08, 0.04))]
    assert nve.main(["--summarize"] + [str(p) for p in runs]) == 0
    out = capsys.readouterr().out
    assert "at 10ps (RMS change of the 10-ps mean energy) over 2 starts: 0.03 against 0.03 kJ/mol (1x)" in out
    assert "at 50ps (RMS change of the 10-ps mean energy) over 2 starts: 0.06325 against 0.03162 kJ/mol (2x)" in out
    assert "interval" not in out  # two starts: too few to resample


def test_bootstrap_ratio(nve):
    theirs = np.array([0.1, 0.4, 0.2, 0.3, 0.25])
    assert nve.bootstrap_ratio(theirs, theirs) == (1.0, 1.0)  # identical runs: the ratio is 1 in every draw
    low, high = nve.bootstrap_ratio(2.0 * theirs, theirs)  # paired: every draw gives exactly 2
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)
    assert nve.bootstrap_ratio(theirs[:2], theirs[:2]) is None
    # Noisy starts: |drift| of two sets of 200 starts whose true mean |drift| differ by 1.5x. The interval holds 1.5
    # and excludes 1; with 5 starts of the same spread it is wider.
    rng = np.random.default_rng(7)
    mine, base = 1.5 * np.abs(rng.normal(size=200)), np.abs(rng.normal(size=200))
    low, high = nve.bootstrap_ratio(mine, base)
    assert 1.0 < low < 1.5 < high < 2.5
    low5, high5 = nve.bootstrap_ratio(mine[:5], base[:5])
    assert high5 - low5 > high - low
    # The statistic is the one given: in every draw the RMS of the stored values is at least their mean, so the
    # ratio of RMS values is at most the ratio of means (equal only for a draw of one value).
    flat, spread = np.full(6, 2.0), np.array([1.0, 1.0, 1.0, 4.0, 4.0, 4.0])
    by_mean, by_rms = nve.bootstrap_ratio(flat, spread), nve.bootstrap_ratio(flat, spread, nve.root_mean_square)
    assert by_rms[0] <= by_mean[0] and by_rms[1] < by_mean[1]
    # A stored value of 0: a draw of only that start has the ratio inf, and 1 draw in 27 is one (3 starts), more
    # than the 2.5% above the upper end, so the interval has no upper bound. 0 / 0 says nothing.
    assert nve.bootstrap_ratio([0.3, 0.1, 0.2], [0.0, 0.1, 0.2])[1] == math.inf
    assert nve.bootstrap_ratio([0.3, 0.1, 0.2], [0.0, 0.0, 0.0]) == (math.inf, math.inf)
    assert nve.bootstrap_ratio([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]) is None


def test_window_drifts(nve):
    t = np.arange(0, 2001) * 1e-4  # ns: 0.2 ns sampled every 0.1 ps
    steady = nve.window_drifts(t, -1000.0 - 3.0 * t)
    assert steady["windows"] == 21 and steady["window_ns"] == pytest.approx(0.0994, abs=1e-3)
    assert steady["window_drift_mean_abs_kj_per_mol_per_ns"] == pytest.approx(3.0)
    assert steady["window_drift_rms_kj_per_mol_per_ns"] == pytest.approx(3.0)
    # A wander: up by 0.05 kJ/mol over the first half, back down over the second. The whole run's fitted drift is
    # zero by symmetry; the second-half drift is one window (-1 kJ/mol/ns), the mean over all windows smaller.
    bump = -1000.0 + 0.05 * (1.0 - np.abs(t - 0.1) / 0.1)
    assert nve.fit_drift(t, bump)["drift_kj_per_mol_per_ns"] == pytest.approx(0.0, abs=1e-9)
    windows = nve.window_drifts(t, bump)
    assert 0.2 < windows["window_drift_mean_abs_kj_per_mol_per_ns"] < 0.9
    assert nve.window_drifts(t[:15], bump[:15]) == {}


def test_summary_against_stored_runs_by_seed(nve, tmp_path, capsys):
    # Runs made without --compare (the control's CUDA runs) against stored runs of the same starts, paired by seed
    # whatever order the files come in.
    def document(path, seed, drift, steps=200000, model="examples/models/silicon-sw.safetensors"):
        header = dict(atoms=512, seed=seed, timestep_fs=1.0, temperature_k=1000.0, model=model)
        run = dict(platform="X", precision="mixed", steps=steps, drift_kj_per_mol_per_ns=drift,
                   second_half_drift_kj_per_mol_per_ns=2 * drift)
        path.write_text(json.dumps(dict(header=header, runs=[run])))
        return str(path)

    stored = [document(tmp_path / f"ref{seed}.json", seed, drift) for seed, drift in ((1, 0.1), (2, -0.3), (3, 0.2))]
    runs = [document(tmp_path / f"run{seed}.json", seed, drift) for seed, drift in ((3, -0.4), (1, 0.2), (2, 0.6))]
    assert nve.main(["--summarize"] + runs + ["--against"] + stored) == 0
    out = capsys.readouterr().out
    assert "mean |drift| over 3 starts: 0.4 against 0.2 kJ/mol/ns (2x, 95% interval over the starts 2-2)" in out
    assert "worse than the stored runs" in out
    # Starts whose ratios differ: another order of the files gives the same intervals (the draws are of starts,
    # not of file positions).
    drifts = np.random.default_rng(3).normal(size=(2, 8))
    more = [document(tmp_path / f"more_ref{seed}.json", seed, d) for seed, d in enumerate(drifts[0], 10)]
    more_runs = [document(tmp_path / f"more_run{seed}.json", seed, d) for seed, d in enumerate(drifts[1], 10)]
    assert nve.main(["--summarize"] + more_runs + ["--against"] + more) == 0
    first = capsys.readouterr().out
    assert nve.main(["--summarize"] + more_runs[::-1] + ["--against"] + more[3:] + more[:3]) == 0
    assert capsys.readouterr().out == first and "95% interval over the starts" in first
    # Stored drifts of 0: the ratio and the interval's upper end are unbounded, not an exception.
    zeros = [document(tmp_path / f"zero{seed}.json", seed, 0.0) for seed in (1, 2, 3)]
    assert nve.main(["--summarize"] + runs + ["--against"] + zeros) == 0
    assert "(unboundedx, 95% interval over the starts unbounded-unbounded)" in capsys.readouterr().out
    # A run of a seed with no stored run, a stored seed twice, a run's seed twice, no seed, a different length or
    # model, nothing after --against or no runs before it: one line each.
    no_seed = tmp_path / "noseed.json"
    no_seed.write_text(json.dumps(dict(header=dict(atoms=512), runs=[dict(
        platform="X", steps=200000, drift_kj_per_mol_per_ns=0.1, second_half_drift_kj_per_mol_per_ns=0.1)])))
    for arguments, against, message in (
            (runs + [document(tmp_path / "run9.json", 9, 0.1)], stored, "no --against run of its seed 9"),
            (runs[:1], stored + [stored[0]], f"a second run of seed 1 (the first: {stored[0]})"),
            (runs + runs[:1], stored, "a second X run of seed 3"),
            ([str(no_seed)], stored, "its header has no seed (it is None)"),
            ([document(tmp_path / "short.json", 1, 0.1, steps=1000)], stored, "it ran 200000 steps, "),
            ([document(tmp_path / "other.json", 1, 0.1, model="other")], stored, "its model is 'examples/models/"),
            (runs, [], "--against: give the stored runs after it"),
            ([], stored, "--summarize: give the runs to summarize"),
    ):
        assert nve.main(["--summarize"] + arguments + ["--against"] + against) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
