"""Tests of the PyTorch implementation (openmmgraph.torch_model) against the spec and physics."""

import math

import numpy as np
import pytest
import torch

from openmmgraph import grades
from openmmgraph.modelfile import convert_model_units, read_model
from openmmgraph.torch_model import GraphModelTorch, check_box, check_pairs, minimum_image, neighbor_pairs, pairs_of_centers

CUBIC_BOX = np.diag([1.3, 1.3, 1.3])
TRICLINIC_BOX = np.array([[1.4, 0.0, 0.0], [0.5, 1.3, 0.0], [-0.6, 0.45, 1.25]])


def tiny_model(l_max=1, l_sum=True, n_interactions=0, activation="tanh", seed=1, radial_r0=None, n_types=2):
    """A small model (M = 5, M_axis = 3, K = 40) of any shape, in nm and kJ/mol."""
    return grades.make_model(
        "small", seed=seed, l_max=l_max, descriptor_l_sum=l_sum, n_interactions=n_interactions, n_types=n_types,
        n_channels=5, n_axis=3, fitting_widths=[12, 12], radial_intervals=40, activation=activation,
        radial_r0=radial_r0,
    )


def random_system(n, box=CUBIC_BOX, seed=0, n_types=2, minimum_distance=0.08):
    """n particles uniformly in the box (fractional coordinates), no two closer than minimum_distance."""
    rng = np.random.default_rng(seed)
    positions = []
    while len(positions) < n:
        candidate = rng.uniform(0, 1, 3) @ box
        if all(np.linalg.norm(candidate - p) > minimum_distance for p in positions):
            positions.append(candidate)
    return np.array(positions), rng.integers(0, n_types, n)


SHAPES = [
    dict(l_max=0, l_sum=True, n_interactions=0),
    dict(l_max=1, l_sum=True, n_interactions=0),
    dict(l_max=1, l_sum=False, n_interactions=0, activation="silu"),
    dict(l_max=2, l_sum=False, n_interactions=0),
    dict(l_max=2, l_sum=True, n_interactions=0),
    dict(l_max=0, l_sum=False, n_interactions=1),
    dict(l_max=1, l_sum=True, n_interactions=1, activation="silu"),
    dict(l_max=2, l_sum=False, n_interactions=1),
    dict(l_max=2, l_sum=True, n_interactions=1),
]
SHAPE_IDS = [f"L{s['l_max']}-{'sum' if s['l_sum'] else 'perl'}-int{s['n_interactions']}" for s in SHAPES]


# -- a direct, loop-by-loop transcription of docs/model-format.md ----------------------


def spec_hermite(table_ab, r, r0, dr, intervals):
    """R[l][k](r) of section 3 from table_ab [L+1, K+1, 3, M]."""
    q = min(max(math.floor((r - r0) / dr), 0), intervals - 1)
    t = (r - (r0 + q * dr)) / dr
    h = [1 - 10 * t**3 + 15 * t**4 - 6 * t**5, t - 6 * t**3 + 8 * t**4 - 3 * t**5,
         (t**2 - 3 * t**3 + 3 * t**4 - t**5) / 2, (t**3 - 2 * t**4 + t**5) / 2,
         -4 * t**3 + 7 * t**4 - 3 * t**5, 10 * t**3 - 15 * t**4 + 6 * t**5]
    p0, v0, a0 = table_ab[:, q, 0], table_ab[:, q, 1] * dr, table_ab[:, q, 2] * dr**2
    p1, v1, a1 = table_ab[:, q + 1, 0], table_ab[:, q + 1, 1] * dr, table_ab[:, q + 1, 2] * dr**2
    return p0 * h[0] + v0 * h[1] + a0 * h[2] + a1 * h[3] + v1 * h[4] + p1 * h[5]


def spec_harmonics(u):
    x, y, z = u
    s = math.sqrt(3)
    return [[1.0], [x, y, z], [s * x * y, s * y * z, s * z * x, s / 2 * (x * x - y * y), (3 * z * z - 1) / 2]]


def spec_network(layers, h, activation):
    act = np.tanh if activation == "tanh" else (lambda v: v / (1 + np.exp(-v)))
    for layer in layers[:-1]:
        y = act(layer.weight @ h + layer.bias)
        if layer.residual:
            h = h + (y if layer.timestep is None else layer.timestep * y)
        else:
            h = y
    return layers[-1].weight @ h + layers[-1].bias


def spec_invariants(left, right, model):
    L, M, Ma = model.l_max, model.n_channels, model.n_axis
    per_degree = np.zeros((L + 1, M, Ma))
    for l in range(L + 1):
        for k in range(M):
            for kk in range(Ma):
                per_degree[l, k, kk] = sum(left[l][m][k] * right[l][m][kk] for m in range(2 * l + 1))
    if model.descriptor_l_sum:
        return per_degree.sum(axis=0).reshape(-1)
    return per_degree.reshape(-1)


def spec_energy(model, positions_nm, types, box_nm):
    """Energy in kJ/mol by the spec's formulas, particle by particle (numpy float64)."""
    scale = model.length_scale_nm
    x = np.asarray(positions_nm) / scale
    box = None if box_nm is None else np.asarray(box_nm) / scale
    n, L, M = len(x), model.l_max, model.n_channels
    tables = [model.tensors["radial.table"]]
    if model.n_interactions:
        tables.append(model.tensors["interaction.radial.table"])
    edges = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            d = x[j] - x[i]
            if box is not None:
                d = d - box[2] * math.floor(d[2] / box[2, 2] + 0.5)
                d = d - box[1] * math.floor(d[1] / box[1, 1] + 0.5)
                d = d - box[0] * math.floor(d[0] / box[0, 0] + 0.5)
            r = float(np.linalg.norm(d))
            if r < model.cutoff:
                edges.append((i, j, r, d / r))
    args = (model.radial_r0, model.radial_dr, model.radial_intervals)
    A = [[[np.zeros(M) for m in range(2 * l + 1)] for l in range(L + 1)] for i in range(n)]
    for i, j, r, u in edges:
        R = spec_hermite(tables[0][types[i], types[j]], r, *args)
        Y = spec_harmonics(u)
        for l in range(L + 1):
            for m in range(2 * l + 1):
                A[i][l][m] += R[l] * Y[l][m] / model.n_norm
    D = [spec_invariants(A[i], A[i], model) for i in range(n)]
    inputs = D
    if model.n_interactions:
        phi = [spec_network(model.node_layers(types[j]), D[j], model.activation) for j in range(n)]
        B = [[[np.zeros(M) for m in range(2 * l + 1)] for l in range(L + 1)] for i in range(n)]
        for i, j, r, u in edges:
            R2 = spec_hermite(tables[1][types[i], types[j]], r, *args)
            Y = spec_harmonics(u)
            for l in range(L + 1):
                for m in range(2 * l + 1):
                    B[i][l][m] += R2[l] * phi[j] * Y[l][m] / model.n_norm
        inputs = [np.concatenate((D[i], spec_invariants(B[i], A[i], model))) for i in range(n)]
    energy = 0.0
    for i in range(n):
        out = spec_network(model.fitting_layers(types[i]), inputs[i], model.activation)
        energy += out[0] + model.tensors["energy_shift"][types[i]]
    return energy * model.energy_scale_kj_per_mol


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_energy_matches_direct_transcription_of_the_spec(shape):
    model_file = tiny_model(radial_r0=0.1, **shape)
    positions, types = random_system(14, TRICLINIC_BOX, seed=4, minimum_distance=0.07)
    positions[1] = positions[0] + [0.07, 0.02, 0.0]  # below r_0: first interval with t < 0
    model = GraphModelTorch(model_file)
    energy = model.energy(torch.tensor(positions), torch.tensor(types), torch.tensor(TRICLINIC_BOX))
    expected = spec_energy(model_file, positions, types, TRICLINIC_BOX)
    assert float(energy) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_energy_without_box_matches_spec_in_other_units():
    model_file = convert_model_units(tiny_model(l_max=2, l_sum=False, n_interactions=1), "bohr", "hartree")
    positions, types = random_system(10, np.eye(3) * 0.9, seed=2)
    energy = GraphModelTorch(model_file).energy(torch.tensor(positions), torch.tensor(types))
    assert float(energy) == pytest.approx(spec_energy(model_file, positions, types, None), rel=1e-12)


# -- forces ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_forces_match_central_finite_differences(shape):
    model = GraphModelTorch(tiny_model(radial_r0=0.1, **shape))
    positions, types = random_system(24, TRICLINIC_BOX, seed=7, minimum_distance=0.06)
    positions[3] = positions[2] + [0.05, -0.03, 0.02]  # exercise the t < 0 extrapolation too
    energy, forces = model.energy_and_forces(positions, types, TRICLINIC_BOX)
    step = 1e-6
    rng = np.random.default_rng(0)
    for particle in (2, 3, *rng.choice(np.arange(4, 24), 4, replace=False)):
        for axis in range(3):
            shifted = [positions.copy(), positions.copy()]
            shifted[0][particle, axis] += step
            shifted[1][particle, axis] -= step
            plus, minus = (float(model.energy(torch.tensor(p), torch.tensor(types), torch.tensor(TRICLINIC_BOX)))
                           for p in shifted)
            numeric = -(plus - minus) / (2 * step)
            assert forces[particle, axis] == pytest.approx(numeric, rel=1e-6, abs=1e-6 * np.abs(forces).max())
    assert np.abs(forces.sum(axis=0)).max() < 1e-10 * np.abs(forces).max() * len(forces)


def test_lattice_forces_are_in_the_documented_range():
    positions, types, box = grades.lattice_system(200, n_types=2, seed=1)
    model = GraphModelTorch(grades.make_model("small", seed=0, radial_intervals=40))
    particle_energies = model.energy(torch.tensor(positions), torch.tensor(types), torch.tensor(box),
                                     particle_energies=True)
    _, forces = model.energy_and_forces(positions, types, box)
    assert 0.05 < float(particle_energies.abs().mean()) < 20
    assert 0.5 < np.sqrt((forces**2).mean()) < 100


# -- invariances -------------------------------------------------------------------------


def rotation_matrix(seed):
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


@pytest.mark.parametrize("shape", [SHAPES[3], SHAPES[8]], ids=[SHAPE_IDS[3], SHAPE_IDS[8]])
def test_translation_rotation_and_permutation_invariance(shape):
    model = GraphModelTorch(tiny_model(**shape))
    positions, types = random_system(16, np.eye(3) * 0.8, seed=3)
    energy, forces = model.energy_and_forces(positions, types)

    translated = positions + np.array([3.1, -2.2, 0.7])
    energy_t, forces_t = model.energy_and_forces(translated, types)
    assert energy_t == pytest.approx(energy, rel=1e-12)
    np.testing.assert_allclose(forces_t, forces, atol=1e-10 * np.abs(forces).max())

    rotation = rotation_matrix(5)
    energy_r, forces_r = model.energy_and_forces(positions @ rotation.T, types)
    assert energy_r == pytest.approx(energy, rel=1e-12)
    np.testing.assert_allclose(forces_r, forces @ rotation.T, atol=1e-10 * np.abs(forces).max())

    order = np.random.default_rng(1).permutation(len(types))
    energy_p, forces_p = model.energy_and_forces(positions[order], types[order])
    assert energy_p == pytest.approx(energy, rel=1e-12)
    np.testing.assert_allclose(forces_p, forces[order], atol=1e-10 * np.abs(forces).max())


def test_periodic_energy_is_invariant_under_wrapping_and_lattice_shifts():
    model = GraphModelTorch(tiny_model(l_max=2, l_sum=False, n_interactions=1))
    positions, types = random_system(20, TRICLINIC_BOX, seed=8)
    energy, forces = model.energy_and_forces(positions, types, TRICLINIC_BOX)
    rng = np.random.default_rng(2)
    images = rng.integers(-3, 4, size=(20, 3))
    shifted = positions + images @ TRICLINIC_BOX + np.array([0.3, -0.2, 0.1])
    energy_s, forces_s = model.energy_and_forces(shifted, types, TRICLINIC_BOX)
    assert energy_s == pytest.approx(energy, rel=1e-11)
    np.testing.assert_allclose(forces_s, forces, atol=1e-9 * np.abs(forces).max())


def test_pair_across_the_boundary_equals_the_same_pair_in_the_middle():
    model = GraphModelTorch(tiny_model(l_max=2, l_sum=False))
    box = np.diag([1.5, 1.4, 1.3])
    types = np.array([0, 1, 1])
    middle = np.array([[0.70, 0.65, 0.60], [0.82, 0.70, 0.55], [0.75, 0.55, 0.70]])
    across = middle - np.array([0.75, 0.65, 0.62])  # the trio now straddles the corner of the box
    across = across - np.floor(across / np.diag(box)) * np.diag(box)
    energy_middle, forces_middle = model.energy_and_forces(middle, types, box)
    energy_across, forces_across = model.energy_and_forces(across, types, box)
    assert energy_across == pytest.approx(energy_middle, rel=1e-12)
    np.testing.assert_allclose(forces_across, forces_middle, atol=1e-11 * np.abs(forces_middle).max())
    energy_free, _ = model.energy_and_forces(middle, types)
    assert energy_free == pytest.approx(energy_middle, rel=1e-12)


def test_triclinic_box_matches_explicit_images():
    """Per-particle energies in a triclinic box equal those of the central copy of an
    explicit 5x5x5 supercell of images without a box."""
    model = GraphModelTorch(tiny_model(l_max=1, l_sum=False, n_interactions=1))
    positions, types = random_system(12, TRICLINIC_BOX, seed=9)
    periodic = model.energy(torch.tensor(positions), torch.tensor(types), torch.tensor(TRICLINIC_BOX),
                            particle_energies=True)
    cells = np.array([(i, j, k) for i in range(-2, 3) for j in range(-2, 3) for k in range(-2, 3)])
    images = (positions[None, :, :] + (cells @ TRICLINIC_BOX)[:, None, :]).reshape(-1, 3)
    image_types = np.tile(types, len(cells))
    free = model.energy(torch.tensor(images), torch.tensor(image_types), particle_energies=True)
    central = int(np.flatnonzero((cells == 0).all(axis=1))[0])
    np.testing.assert_allclose(free[central * 12:(central + 1) * 12].detach().numpy(), periodic.detach().numpy(),
                               rtol=1e-11, atol=1e-12)


# -- units, precision, pairs, export -------------------------------------------------------


@pytest.mark.parametrize("units", [("angstrom", "eV"), ("bohr", "hartree"), ("angstrom", "kcal/mol")])
def test_model_in_other_units_gives_the_same_kj_per_mol(tmp_path, units):
    reference_file = tiny_model(l_max=2, l_sum=False, n_interactions=1, radial_r0=0.1)
    converted = convert_model_units(reference_file, *units)
    # the conversion, by hand for the table derivatives of one function
    factor = 0.1 if units[0] == "angstrom" else 0.052917721090
    np.testing.assert_allclose(converted.tensors["radial.table"][0, 1, 2, 5, 1],
                               reference_file.tensors["radial.table"][0, 1, 2, 5, 1] * factor, rtol=1e-15)
    path = tmp_path / "converted.safetensors"
    converted.write(path)
    positions, types = random_system(20, TRICLINIC_BOX, seed=11)
    energy, forces = GraphModelTorch(reference_file).energy_and_forces(positions, types, TRICLINIC_BOX)
    energy_c, forces_c = GraphModelTorch(path).energy_and_forces(positions, types, TRICLINIC_BOX)
    assert energy_c == pytest.approx(energy, rel=1e-11)
    np.testing.assert_allclose(forces_c, forces, rtol=1e-9, atol=1e-10 * np.abs(forces).max())


@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[8]], ids=[SHAPE_IDS[1], SHAPE_IDS[8]])
def test_float32_agrees_with_float64(shape):
    model_file = tiny_model(**shape)
    positions, types, box = grades.lattice_system(200, seed=3)
    energy64, forces64 = GraphModelTorch(model_file).energy_and_forces(positions, types, box)
    energy32, forces32 = GraphModelTorch(model_file, dtype=torch.float32).energy_and_forces(positions, types, box)
    assert energy32 == pytest.approx(energy64, rel=1e-5)
    np.testing.assert_allclose(forces32, forces64, atol=1e-4 * np.abs(forces64).max())
    # a float32 file computes the same model rounded to float32
    energy_from32 = GraphModelTorch(read_model(model_file.to_bytes(dtype="float32"))).energy_and_forces(
        positions, types, box)[0]
    assert energy_from32 == pytest.approx(energy64, rel=1e-5)
    assert energy_from32 != energy64


@pytest.mark.parametrize("grade", ["small", "medium"])
def test_float32_forces_keep_fp32_accuracy_on_fine_tables(grade):
    """The interval table holds the difference of its two knot values (formed in float64): summed as p0 h0 + p1 h5,
    the two products cancelled in float32 and the forces of the standard grades (400 intervals) were off by about
    1e-4 of their RMS (bench/NOTES.md v47); the rest of the model's float32 error is about 1e-6."""
    model_file = grades.make_model(grade, seed=0)
    positions, types, box = grades.lattice_system(512, n_types=len(model_file.type_names), seed=0)
    _, forces64 = GraphModelTorch(model_file).energy_and_forces(positions, types, box)
    _, forces32 = GraphModelTorch(model_file, dtype=torch.float32).energy_and_forces(positions, types, box)
    rms = np.sqrt(np.mean((forces32 - forces64) ** 2)) / np.sqrt(np.mean(forces64**2))
    assert rms < 1e-5, rms


def test_precomputed_pairs_with_a_skin_give_the_same_energy():
    model = GraphModelTorch(tiny_model(l_max=2, l_sum=True, n_interactions=1))
    positions, types, box = grades.lattice_system(300, seed=2)
    positions_t, box_t = torch.tensor(positions), torch.tensor(box)
    built = model.energy(positions_t, torch.tensor(types), box_t)
    pairs = neighbor_pairs(positions_t, box_t, 0.64)  # 0.04 nm skin: pairs beyond r_c contribute 0
    assert len(pairs[0]) > len(neighbor_pairs(positions_t, box_t, 0.6)[0])
    with_skin = model.energy(positions_t, torch.tensor(types), box_t, pairs=pairs)
    assert float(with_skin) == pytest.approx(float(built), rel=1e-13)


@pytest.mark.parametrize("shape", [s for s in SHAPES if not s["n_interactions"]],
                         ids=[i for s, i in zip(SHAPES, SHAPE_IDS) if not s["n_interactions"]])
def test_ranges_of_centers_give_the_systems_energies_and_forces(shape):
    # particle_energies_model_units(..., centers=(start, stop)) on the pairs of those centres: the system's
    # per-particle energies, and forces summed over the ranges' own gradients (how the benchmark runs a
    # peer in pieces when one evaluation does not fit the device's memory)
    model = GraphModelTorch(tiny_model(**shape))
    positions, types, box = grades.lattice_system(300, seed=3)
    x, t, b = torch.tensor(positions).requires_grad_(True), torch.tensor(types), torch.tensor(box)
    pairs = neighbor_pairs(x.detach(), b, model.cutoff_nm)
    whole = model.particle_energies_model_units(x, t, b, pairs)
    (whole_gradient,) = torch.autograd.grad(whole.sum(), x)
    pieces, gradient = [], torch.zeros_like(x)
    for start, stop in ((0, 97), (97, 97), (97, 250), (250, 300)):
        energies = model.particle_energies_model_units(x, t, b, pairs_of_centers(pairs, start, stop), centers=(start, stop))
        assert energies.shape == (stop - start,)
        pieces.append(energies.detach())
        if stop > start:
            gradient += torch.autograd.grad(energies.sum(), x)[0]
    torch.testing.assert_close(torch.cat(pieces), whole.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(gradient, whole_gradient, rtol=1e-12, atol=1e-12)
    assert float(whole_gradient.abs().max()) > 1e-3  # forces that are there to compare


def test_ranges_of_centers_refuse_what_they_cannot_give():
    positions, types, box = grades.lattice_system(200, seed=4)
    x, t, b = torch.tensor(positions), torch.tensor(types), torch.tensor(box)
    model = GraphModelTorch(tiny_model(l_max=1, n_interactions=0))
    pairs = neighbor_pairs(x, b, model.cutoff_nm)
    for bad in ((0, 201), (10, 5), (-1, 3), (0.0, 5), (True, 5), (1, 2, 3), 7, "0:5"):
        with pytest.raises(ValueError, match=r"centers: expected \(start, stop\) integers with 0 <= start <= stop <= 200"):
            model.particle_energies_model_units(x, t, b, pairs, centers=bad)
    assert model.particle_energies_model_units(x, t, b, pairs_of_centers(pairs, 5, 9), centers=(np.int64(5), 9)).shape == (4,)
    interacting = GraphModelTorch(tiny_model(l_max=1, n_interactions=1))
    with pytest.raises(ValueError, match="need a model without an interaction block"):
        interacting.particle_energies_model_units(x, t, b, pairs_of_centers(pairs, 0, 10), centers=(0, 10))


def test_neighbor_pairs_match_brute_force_minimum_image():
    positions, types = random_system(40, TRICLINIC_BOX, seed=12, minimum_distance=0.01)
    i, j, shifts = neighbor_pairs(torch.tensor(positions), torch.tensor(TRICLINIC_BOX), 0.6)
    found = set(zip(i.tolist(), j.tolist()))
    cells = np.array([(a, b, c) for a in range(-2, 3) for b in range(-2, 3) for c in range(-2, 3)])
    expected = set()
    for p in range(40):
        for q in range(40):
            if p != q:
                distances = np.linalg.norm(positions[q] - positions[p] + cells @ TRICLINIC_BOX, axis=1)
                if distances.min() < 0.6:
                    expected.add((p, q))
    assert found == expected
    d = positions[j.numpy()] - positions[i.numpy()] + shifts.numpy() @ TRICLINIC_BOX
    assert np.all(np.linalg.norm(d, axis=1) < 0.6)
    np.testing.assert_array_equal(shifts.numpy(), np.round(shifts.numpy()))


def test_lattice_system_has_liquid_density_and_85_neighbours():
    positions, types, box = grades.lattice_system(512, n_types=3, seed=0)
    assert box[0, 0] == pytest.approx((512 / 100.0) ** (1 / 3), rel=1e-15) and np.count_nonzero(box) == 3
    assert positions.shape == (512, 3) and set(types.tolist()) == {0, 1, 2}
    spacing = box[0, 0] / 8
    offsets = positions / spacing - 0.5 - np.stack(np.meshgrid(*[np.arange(8)] * 3, indexing="ij"), -1).reshape(-1, 3)
    assert np.abs(offsets).max() <= 0.15
    i, _, _ = neighbor_pairs(positions, box, 0.6)
    assert 80 < len(i) / 512 < 90
    partial, _, partial_box = grades.lattice_system(10, seed=0)
    assert partial.shape == (10, 3) and partial_box[0, 0] == pytest.approx(0.1 ** (1 / 3))


def test_export_round_trip_gives_the_same_energy():
    model_file = tiny_model(l_max=2, l_sum=False, n_interactions=1)
    model = GraphModelTorch(model_file)
    exported = read_model(model.to_model_file().to_bytes())
    for name, array in model_file.tensors.items():
        np.testing.assert_array_equal(exported.tensors[name], array)


def test_errors_name_the_problem():
    model = GraphModelTorch(tiny_model())
    positions, types = random_system(10, CUBIC_BOX, seed=1)
    with pytest.raises(ValueError, match="cut-off 0.6 exceeds half the smallest box height 1.0"):
        model.energy(torch.tensor(positions), torch.tensor(types), torch.tensor(np.diag([1.3, 1.0, 1.3])))
    # A cut-off one rounding above half the box (6 angstrom is 0.6000000000000001 nm) fits a box of twice 0.6.
    check_box(torch.tensor(np.diag([1.2, 1.2, 1.2])), 6.0 * 0.1)
    with pytest.raises(ValueError, match="exceeds half the smallest box height"):
        check_box(torch.tensor(np.diag([1.2, 1.2, 1.2])), 0.6 * (1 + 1e-9))
    # Non-finite input is named, not silently dropped from the graph.
    broken = positions.copy()
    broken[4, 1] = np.nan
    with pytest.raises(ValueError, match="particle 4 has a coordinate that is not finite"):
        model.energy(torch.tensor(broken), torch.tensor(types))
    with pytest.raises(ValueError, match="box: expected finite vectors"):
        model.energy(torch.tensor(positions), torch.tensor(types), torch.tensor(np.diag([2.0, 2.0, np.inf])))
    with pytest.raises(ValueError, match="types: expected integers"):
        model.energy(torch.tensor(positions), torch.tensor(types, dtype=torch.float64))
    # Two particles one box vector apart are at the same position, although the image subtraction leaves a residue.
    imaged = positions.copy()
    imaged[7] = imaged[0] + CUBIC_BOX[0]
    residue = minimum_image(torch.tensor(imaged[7] - imaged[0]), torch.tensor(CUBIC_BOX))[0]
    assert float(residue.abs().max()) > 0  # what an exact test of r = 0 would take for a real pair
    with pytest.raises(ValueError, match="particles 0 and 7 are at distance 0"):
        model.energy(torch.tensor(imaged), torch.tensor(types), torch.tensor(CUBIC_BOX))
    coincident = positions.copy()
    coincident[7] = coincident[3]
    with pytest.raises(ValueError, match="particles 3 and 7 are at distance 0"):
        model.energy(torch.tensor(coincident), torch.tensor(types))
    box = np.diag([1.5, 1.5, 1.5])
    image = positions.copy()
    image[3], image[5] = [0.25, 0.5, 0.125], [0.25, 2.0, 0.125]  # one box height apart, exactly
    with pytest.raises(ValueError, match="particles 3 and 5 are at distance 0"):
        model.energy(torch.tensor(image), torch.tensor(types), torch.tensor(box))
    with pytest.raises(ValueError, match="reduced triclinic"):
        model.energy(torch.tensor(positions), torch.tensor(types), torch.tensor(CUBIC_BOX + 0.01))
    with pytest.raises(ValueError, match="types"):
        model.energy(torch.tensor(positions), torch.tensor(types + 2))
    # Pairs given by the caller: a pair at distance 0 gave a NaN energy; bad shapes and indices are named.
    box = torch.tensor(CUBIC_BOX)
    pairs = neighbor_pairs(torch.tensor(positions), box, model.cutoff_nm)
    energy = float(model.energy(torch.tensor(positions), torch.tensor(types), box, pairs=pairs))
    assert math.isfinite(energy)
    for i, j, shift, message in ((0, 0, [0.0, 0.0, 0.0], r"pairs: pair \d+ \(0, 0, image \[0.0, 0.0, 0.0\]\) is at distance 0 "
                                                         r"\(a particle and itself\)"),
                                 (3, 7, [0.0, 0.0, 0.0], r"pair \d+ \(3, 7, .*\(two particles at the same position\)")):
        extra = (torch.cat((pairs[0], torch.tensor([i]))), torch.cat((pairs[1], torch.tensor([j]))),
                 torch.cat((pairs[2], torch.tensor([shift], dtype=pairs[2].dtype))))
        with pytest.raises(ValueError, match=message):
            model.energy(torch.tensor(coincident if i != j else positions), torch.tensor(types), box, pairs=extra)
    # The same particle in another image is a real pair (a box smaller than twice its distance is refused elsewhere).
    check_pairs((torch.tensor([0]), torch.tensor([0]), torch.tensor([[1.0, 0.0, 0.0]])), torch.tensor(positions), box, 0.6)
    with pytest.raises(ValueError, match=r"pairs: indices j must lie in \[0, 10\)"):
        model.energy(torch.tensor(positions), torch.tensor(types), box, pairs=(pairs[0], pairs[1] + 10, pairs[2]))
    with pytest.raises(ValueError, match=r"pairs: expected shapes \[P\], \[P\] and \[P, 3\]"):
        model.energy(torch.tensor(positions), torch.tensor(types), box, pairs=(pairs[0], pairs[1][:-1], pairs[2]))
    with pytest.raises(ValueError, match="pairs: expected integer indices i"):
        model.energy(torch.tensor(positions), torch.tensor(types), box, pairs=(pairs[0].double(), pairs[1], pairs[2]))
    with pytest.raises(ValueError, match=r"pairs: expected \(i \[P\], j \[P\], image counts \[P, 3\]\)"):
        model.energy(torch.tensor(positions), torch.tensor(types), box, pairs=pairs[:2])
    # A cut-off that is not a finite positive number: a negative one found the pairs of its absolute value, a NaN
    # one none.
    for cutoff in (-0.6, 0.0, math.nan, math.inf, True, "0.6"):
        with pytest.raises(ValueError, match="cutoff: expected a finite number > 0"):
            neighbor_pairs(torch.tensor(positions), None, cutoff)


def test_energy_is_continuous_at_the_cutoff():
    model = GraphModelTorch(tiny_model(l_max=2, l_sum=False, n_interactions=1))
    types = torch.tensor([0, 1])
    alone = float(model.energy(torch.tensor([[0.0, 0, 0], [5.0, 0, 0]]), types))
    near = [float(model.energy(torch.tensor([[0.0, 0, 0], [0.6 - delta, 0, 0]]), types)) for delta in (1e-2, 1e-3)]
    assert abs(near[0] - alone) < 1e-3 and abs(near[1] - alone) < 1e-6
    assert near[1] != alone


def test_isolated_particles_have_the_energy_of_a_zero_descriptor():
    model_file = tiny_model(l_max=1, l_sum=False, n_interactions=1, n_types=3)
    model = GraphModelTorch(model_file)
    energies = model.energy(torch.tensor([[0.0, 0, 0], [2.0, 0, 0]]), torch.tensor([2, 0]), particle_energies=True)
    for energy, type_index in zip(energies.tolist(), (2, 0)):
        zero = np.zeros(model_file.fitting_input_size)
        expected = spec_network(model_file.fitting_layers(type_index), zero, "tanh")[0]
        assert energy == pytest.approx(expected + model_file.tensors["energy_shift"][type_index], rel=1e-14)
    single_energy, single_forces = model.energy_and_forces(np.zeros((1, 3)), np.array([1]))
    assert single_forces.shape == (1, 3) and np.all(single_forces == 0)
