"""openmm-graph convert-deepmd against DeePMD-kit itself.

Tiny se_e2_a models are trained with DeePMD-kit's PyTorch backend (`dp --pt
train`, 60 steps) on generated Morse data of two types, converted, and the
Reference platform and GraphModelTorch are compared with DeePMD-kit's own
inference (DeepPot) on periodic configurations where no sel cap is hit.
Skipped when deepmd-kit is not installed (scripts/requirements.txt has it).
"""

import copy
import json
import os
import subprocess
import sys

import numpy as np
import openmm
import pytest
import torch

pytest.importorskip("deepmd")

import openmmgraph  # noqa: E402
from openmmgraph.cli import main  # noqa: E402
from openmmgraph.convert.deepmd import DeepmdConversionError, _ensure_deepmd_pytorch, convert_deepmd, load_deepmd  # noqa: E402
from openmmgraph.modelfile import read_model  # noqa: E402
from openmmgraph.torch_model import GraphModelTorch  # noqa: E402

EV = 96.48533212331  # kJ/mol
RCUT = 4.5
SEL = [24, 24]
_DP = ("import sys; from openmmgraph.convert.deepmd import _ensure_deepmd_pytorch; _ensure_deepmd_pytorch(); "
       "from deepmd.main import main; sys.argv = ['dp'] + sys.argv[1:]; main()")
_ENV = dict(os.environ, OMP_NUM_THREADS="1", DP_INTRA_OP_PARALLELISM_THREADS="1", DP_INTER_OP_PARALLELISM_THREADS="1")


def _lattice(seed, spacing=2.5, n=4, jitter=0.35):
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.arange(n)] * 3, indexing="ij"), -1).reshape(-1, 3) * spacing
    positions = grid + rng.uniform(-jitter, jitter, grid.shape)
    return positions, rng.integers(0, 2, len(positions)), np.eye(3) * spacing * n


def _morse_data(path, frames=20):
    """Two-type Morse energies and forces (eV, Angstrom) in DeePMD-kit's npy format."""
    depth = np.array([[0.3, 0.4], [0.4, 0.2]])
    r_min = np.array([[2.2, 2.0], [2.0, 1.9]])
    coords, energies, forces, boxes = [], [], [], []
    for frame in range(frames):
        x, types, box = _lattice(100 + frame, spacing=2.3, n=3, jitter=0.4)
        types = np.array([0, 1] * 13 + [0])[: len(x)]
        d = x[None, :, :] - x[:, None, :]
        d -= box[0, 0] * np.round(d / box[0, 0])
        r = np.linalg.norm(d, axis=-1) + np.eye(len(x)) * 100.0
        pair = (types[:, None], types[None, :])
        e = np.exp(-1.5 * (r - r_min[pair]))
        inside = r < RCUT
        energies.append(0.5 * (depth[pair] * (e * e - 2 * e) * inside).sum())
        dv = depth[pair] * (-3.0 * e * e + 3.0 * e) * inside
        forces.append(((dv / r)[:, :, None] * d).sum(1))
        coords.append(x)
        boxes.append(box.ravel())
    os.makedirs(path / "set.000")
    np.save(path / "set.000" / "coord.npy", np.array(coords).reshape(frames, -1))
    np.save(path / "set.000" / "box.npy", np.array(boxes))
    np.save(path / "set.000" / "energy.npy", np.array(energies))
    np.save(path / "set.000" / "force.npy", np.array(forces).reshape(frames, -1))
    np.savetxt(path / "type.raw", types, fmt="%d")
    (path / "type_map.raw").write_text("A\nB\n")


def _train(directory, descriptor, fitting, steps=60):
    config = {
        "model": {"type_map": ["A", "B"],
                  "descriptor": {"type": "se_e2_a", "sel": SEL, "rcut_smth": 3.0, "rcut": RCUT, "neuron": [4, 8],
                                 "axis_neuron": 4, "seed": 1, **descriptor},
                  "fitting_net": {"neuron": [16, 16], "seed": 1, **fitting}},
        "learning_rate": {"type": "exp", "decay_steps": 20, "start_lr": 0.003, "stop_lr": 1e-4},
        "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1},
        "training": {"training_data": {"systems": ["../data"], "batch_size": 1}, "numb_steps": steps,
                     "disp_freq": steps, "save_freq": steps, "seed": 1},
    }
    directory.mkdir()
    (directory / "input.json").write_text(json.dumps(config))
    for command in (["--pt", "train", "input.json", "--skip-neighbor-stat"], ["--pt", "freeze", "-o", "model.pth"]):
        result = subprocess.run([sys.executable, "-c", _DP, *command], cwd=directory, env=_ENV,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("deepmd")
    _morse_data(root / "data")
    two_side = _train(root / "two_side", dict(type_one_side=False, set_davg_zero=True, resnet_dt=True),
                      dict(resnet_dt=True))
    one_side = _train(root / "one_side", dict(type_one_side=True, set_davg_zero=True, resnet_dt=False,
                                             activation_function="silu"), dict(resnet_dt=False))
    davg = _train(root / "davg", dict(set_davg_zero=False), dict(), steps=5)
    return {"two_side": two_side / "model.pth", "one_side_checkpoint": one_side / "model.ckpt.pt",
            "one_side": one_side / "model.pth", "davg": davg / "model.pth"}


def _reference(model_file, positions, types, box):
    system = openmm.System()
    for _ in range(len(positions)):
        system.addParticle(12.0)
    system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) for row in box * 0.1])
    force = openmmgraph.GraphForce.fromModelBytes(model_file.to_bytes())
    for index, type_index in enumerate(types):
        force.addParticle(index, int(type_index))
    force.setUsesPeriodicBoundaryConditions(True)
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions * 0.1)
    state = context.getState(getEnergy=True, getForces=True)
    energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole) / EV
    forces = np.array(state.getForces(asNumpy=True).value_in_unit(openmm.unit.kilojoule_per_mole / openmm.unit.nanometer))
    return energy, forces * 0.1 / EV


def _deeppot(path, positions, types, box):
    _ensure_deepmd_pytorch()
    from deepmd.infer import DeepPot

    energy, forces, _ = DeepPot(str(path)).eval(positions.reshape(1, -1), box.reshape(1, -1), types)
    return float(np.ravel(energy)[0]), forces.reshape(-1, 3)


def _neighbour_counts(positions, types, box):
    d = positions[None] - positions[:, None]
    d -= box[0, 0] * np.round(d / box[0, 0])
    r = np.linalg.norm(d, axis=-1) + np.eye(len(positions)) * 100.0
    return [int(((r < RCUT) & (types[None, :] == b)).sum(1).max()) for b in (0, 1)]


@pytest.mark.parametrize("name", ["two_side", "one_side", "one_side_checkpoint"])
def test_reference_and_torch_match_deeppot(models, name):
    model_file = convert_deepmd(models[name])
    assert model_file.report.table_error < 1e-10 * max(1.0, model_file.report.table_scale)
    for seed in (1, 2):
        positions, types, box = _lattice(seed)
        assert all(count <= cap for count, cap in zip(_neighbour_counts(positions, types, box), SEL))
        energy, forces = _deeppot(models[name], positions, types, box)
        assert np.abs(forces).max() > 1e-3  # a non-trivial configuration
        ours, our_forces = _reference(model_file, positions, types, box)
        assert abs(ours - energy) / len(types) < 1e-6, (ours, energy)
        assert np.abs(our_forces - forces).max() < 1e-5
        torch_model = GraphModelTorch(model_file, dtype=torch.float64)
        e, f = torch_model.energy_and_forces(torch.tensor(positions * 0.1), torch.tensor(types),
                                             torch.tensor(box * 0.1))
        assert abs(float(e) / EV - energy) / len(types) < 1e-6
        assert np.abs(np.asarray(f) * 0.1 / EV - forces).max() < 1e-5


def test_cli_converts_and_refuses(models, tmp_path, capsys):
    output = tmp_path / "converted.safetensors"
    assert main(["convert-deepmd", str(models["two_side"]), "-o", str(output), "--intervals", "1000"]) == 0
    model_file = read_model(str(output))
    assert model_file.type_names == ["A", "B"] and model_file.energy_unit == "eV"
    assert model_file.length_unit == "angstrom" and model_file.n_norm == sum(SEL) and model_file.l_max == 1
    assert model_file.radial_intervals == 1000
    # rcut_smth = 3.0 is a knot of the grid.
    knots = (3.0 - model_file.radial_r0) / model_file.radial_dr
    assert abs(knots - round(knots)) < 1e-9
    capsys.readouterr()
    assert main(["convert-deepmd", str(models["davg"]), "-o", str(tmp_path / "x.safetensors")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("openmm-graph: error: convert-deepmd: davg != 0") and "set_davg_zero" in error
    assert len(error.strip().splitlines()) == 1


def _mutated(serialized, change):
    data = copy.deepcopy(serialized)
    change(data["model"])
    return data


REFUSALS = [
    ("descriptor 'se_e2_r'", lambda m: m["descriptor"].update(type="se_e2_r")),
    ("descriptor 'se_atten'", lambda m: m["descriptor"].update(type="se_atten")),
    ("exclude_types", lambda m: m["descriptor"].update(exclude_types=[[0, 1]])),
    ("numb_fparam", lambda m: m["fitting"].update(numb_fparam=2)),
    ("numb_aparam", lambda m: m["fitting"].update(numb_aparam=1)),
    ("atom_ener", lambda m: m["fitting"].update(atom_ener=[0.0, 1.0])),
    ("pair_exclude_types", lambda m: m.update(pair_exclude_types=[[0, 0]])),
    ("model type 'zbl'", lambda m: m.update(type="zbl")),
    ("env_protection", lambda m: m["descriptor"].update(env_protection=0.1)),
    ("davg != 0", lambda m: m["descriptor"]["@variables"]["davg"].__setitem__((0, 0, 0), 0.1)),
    ("davg != 0", lambda m: m["descriptor"]["@variables"]["davg"].__setitem__((1, 30, 2), 0.1)),
    ("differs between the neighbour slots",
     lambda m: m["descriptor"]["@variables"]["dstd"].__setitem__((0, 3, 0), 0.5)),
    ("differs between the neighbour slots",
     lambda m: m["descriptor"]["@variables"]["dstd"].__setitem__((1, 30, 2), 0.5)),
    ("activation 'relu'",
     lambda m: m["descriptor"]["embeddings"]["networks"][0]["layers"][0].update(activation_function="relu")),
    ("activation 'gelu'", lambda m: [layer.update(activation_function="gelu")
                                     for net in m["fitting"]["nets"]["networks"] for layer in net["layers"][:-1]]),
    ("doubling residual", lambda m: [net["layers"][1]["@variables"].update(
        w=np.zeros((16, 32)), b=np.zeros(32), idt=None) or net["layers"][2]["@variables"].update(w=np.zeros((32, 1)))
        for net in m["fitting"]["nets"]["networks"]]),
    ("atom_exclude_types", lambda m: m.update(atom_exclude_types=[1])),
    ("use_exp_switch", lambda m: m["descriptor"]["env_mat"].update(use_exp_switch=True)),
    ("env_mat.protection", lambda m: m["descriptor"]["env_mat"].update(protection=0.1)),
    ("mixed_types", lambda m: m["fitting"].update(mixed_types=True)),
    ("use_aparam_as_mask", lambda m: m["fitting"].update(use_aparam_as_mask=True)),
    ("dim_case_embd", lambda m: m["fitting"].update(dim_case_embd=2)),
    ("case embedding", lambda m: m["fitting"]["@variables"].update(case_embd=np.zeros(3))),
    ("timestep (idt) on a non-residual layer",
     lambda m: [_fitting_layers(m, a)[0]["@variables"].update(idt=np.ones(16)) for a in range(2)]),
    ("layer structure differs", lambda m: _fitting_layers(m, 1)[1].update(resnet=False)
     or _fitting_layers(m, 1)[1]["@variables"].update(idt=None)),
    ("mixed activations", lambda m: _fitting_layers(m, 1)[0].update(activation_function="silu")),
    ("output layer must be linear", lambda m: [_fitting_layers(m, a)[-1].update(activation_function="tanh")
                                               for a in range(2)]),
    ("dstd must be positive", lambda m: m["descriptor"]["@variables"]["dstd"].__imul__(-1.0)),
    ("axis_neuron = 9", lambda m: m["descriptor"].update(axis_neuron=9)),
    ("rcut_smth = 5.0", lambda m: m["descriptor"].update(rcut_smth=5.0)),
    ("embeddings: expected 4 networks", lambda m: m["descriptor"]["embeddings"]["networks"].pop()),
    ("descriptor.sel = [24, -1]", lambda m: m["descriptor"].update(sel=[24, -1])),
    ("descriptor.sel: expected one neighbour count per type", lambda m: m["descriptor"].update(sel=[24])),
]


def _fitting_layers(model, type_index):
    return model["fitting"]["nets"]["networks"][type_index]["layers"]


@pytest.mark.parametrize("expected, change", REFUSALS, ids=[f"{i}-{r[0]}" for i, r in enumerate(REFUSALS)])
def test_unsupported_models_are_refused(models, expected, change):
    serialized = load_deepmd(str(models["two_side"]))
    with pytest.raises(DeepmdConversionError, match="^convert-deepmd: ") as error:
        convert_deepmd(_mutated(serialized, change), intervals=50)
    assert expected in str(error.value)


def _deepmd_model_eval(serialized, positions, types, box):
    """Energy (eV) and forces (eV/A) of a serialised DeePMD-kit model, by DeePMD-kit's own PyTorch model."""
    _ensure_deepmd_pytorch()
    from deepmd.pt.model.model.model import BaseModel

    model = BaseModel.deserialize(copy.deepcopy(serialized["model"]))
    model.eval()
    out = model(torch.tensor(positions.reshape(1, -1)), torch.tensor(types.reshape(1, -1)),
                torch.tensor(box.reshape(1, -1)))
    return float(out["energy"].reshape(-1)[0]), out["force"].detach().numpy().reshape(-1, 3)


def test_a_neighbour_type_without_slots_converts(models):
    """sel "auto" gives 0 slots to a type absent from the training data: DeePMD-kit ignores such
    neighbours, and the converted model has zero tables for them."""
    serialized = load_deepmd(str(models["two_side"]))
    descriptor = serialized["model"]["descriptor"]
    descriptor["sel"] = [SEL[0], 0]
    for name in ("davg", "dstd"):
        descriptor["@variables"][name] = descriptor["@variables"][name][:, : SEL[0]].copy()
    model_file = convert_deepmd(serialized, intervals=500)
    assert not model_file.tensors["radial.table"][:, 1].any() and model_file.tensors["radial.table"][:, 0].any()
    # DeePMD-kit keeps a center's sum(sel) = 24 nearest neighbours of any type before it sorts them by type:
    # a sparser lattice, so that no center has more (docs/deepmd-import.md, "Neighbour cap").
    positions, types, box = _lattice(1, spacing=3.2)
    assert max(_neighbour_counts(positions, np.zeros_like(types), box)) <= SEL[0]
    energy, forces = _deepmd_model_eval(serialized, positions, types, box)
    ours, our_forces = _reference(model_file, positions, types, box)
    assert abs(ours - energy) / len(types) < 1e-6, (ours, energy)
    assert np.abs(forces).max() > 1e-3 and np.abs(our_forces - forces).max() < 1e-5


def test_atom_ener_without_values_is_a_plain_model(models):
    serialized = load_deepmd(str(models["two_side"]))
    plain = convert_deepmd(serialized, intervals=50)
    serialized["model"]["fitting"]["atom_ener"] = [None, None]  # DeePMD-kit's "not set"
    unset = convert_deepmd(serialized, intervals=50)
    assert unset.to_bytes() == plain.to_bytes()


_FREEZE_WITH_OP_LIBRARY = """
import sys, json, copy, torch
from deepmd.env import GLOBAL_CONFIG
from packaging.version import Version
# As where DeePMD-kit's op library loads (its torch is the one the wheel was built for): the op exists before DeePMD-kit
# is imported, so its descriptor scripts a call to it in the compressed branch, instead of a Python stand-in.  Where
# the library can load here, it registers the op itself.
if str(GLOBAL_CONFIG.get("pt_version", "")) == Version(torch.__version__).public:
    import deepmd.pt
else:
    lib = torch.library.Library("deepmd", "FRAGMENT")
    lib.define("tabulate_fusion_se_a(Tensor _0, Tensor _1, Tensor _2, Tensor _3, int _4) -> Tensor[] _0")
from openmmgraph.convert.deepmd import _ensure_deepmd_pytorch, load_deepmd
_ensure_deepmd_pytorch()
from deepmd.pt.model.model.model import BaseModel
data = load_deepmd(sys.argv[1])
model = BaseModel.deserialize(copy.deepcopy(data["model"]))
model.model_def_script = json.dumps(data["model_def_script"])
model.min_nbor_dist = torch.tensor(0.8, dtype=torch.float64)
torch.jit.save(torch.jit.script(model), sys.argv[2])
"""


def test_a_model_frozen_with_deepmds_op_library_converts(models, tmp_path):
    # Session 67: a model frozen by a DeePMD-kit whose op library loads calls deepmd::tabulate_fusion_se_a in its
    # TorchScript (the compressed branch, never run when not compressed).  Converted where the library cannot load
    # (another torch: the project's environment) TorchScript's loader did not know the op, and the model was refused
    # as "a compressed model".  Now it converts, to the same model as one frozen without the library.
    import zipfile

    frozen = tmp_path / "frozen-with-ops.pth"
    made = subprocess.run([sys.executable, "-c", _FREEZE_WITH_OP_LIBRARY, str(models["two_side"]), str(frozen)], env=_ENV,
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    with zipfile.ZipFile(frozen) as archive:
        code = "".join(archive.read(name).decode() for name in archive.namelist() if name.endswith("descriptor/se_a.py"))
    assert "ops.deepmd.tabulate_fusion_se_a(" in code  # the model calls the op, as a user's frozen model does
    output = tmp_path / "converted.safetensors"
    # A fresh process, as a user's: nothing has declared the op before the converter.
    done = subprocess.run([sys.executable, "-m", "openmmgraph.cli", "convert-deepmd", str(frozen), "-o", str(output),
                           "--intervals", "50"], env=_ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert output.read_bytes() == convert_deepmd(str(models["two_side"]), intervals=50).to_bytes()


_SCRIPT_CALLING_A_NEW_OP = """
import sys, torch
lib = torch.library.Library("deepmd", "FRAGMENT")
lib.define("tabulate_fusion_se_future(Tensor _0) -> Tensor _0")

class Module(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.deepmd.tabulate_fusion_se_future(x)

torch.jit.save(torch.jit.script(Module()), sys.argv[1])
"""


def test_an_op_the_converter_does_not_know_is_named(tmp_path):
    # An op of a newer DeePMD-kit's library than the converter declares: named, with the torch versions, not taken for
    # a compressed model.
    frozen, script = tmp_path / "future.pth", tmp_path / "script_a_new_op.py"
    script.write_text(_SCRIPT_CALLING_A_NEW_OP)  # in a file: TorchScript reads the module's source
    made = subprocess.run([sys.executable, str(script), str(frozen)], env=_ENV, capture_output=True, text=True,
                          timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "openmmgraph.cli", "convert-deepmd", str(frozen), "-o",
                           str(tmp_path / "f.safetensors")], env=_ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    assert "its TorchScript calls deepmd::tabulate_fusion_se_future, an op of DeePMD-kit's op library" in done.stderr
    assert "compressed" not in done.stderr and done.stderr.count("\n") == 1, done.stderr


_COMPRESS = """
import sys, json, copy, torch
from openmmgraph.convert.deepmd import _ensure_deepmd_pytorch, load_deepmd, convert_deepmd, DeepmdConversionError
_ensure_deepmd_pytorch()  # first: it may load DeePMD-kit's op library, which registers the op itself
if not hasattr(torch.ops.deepmd, "tabulate_fusion_se_a"):  # else the schema of the op, which scripting needs
    lib = torch.library.Library("deepmd", "FRAGMENT")
    lib.define("tabulate_fusion_se_a(Tensor table, Tensor table_info, Tensor em_x, Tensor em, int last_layer_size) -> Tensor[]")
from deepmd.pt.model.model.model import BaseModel
data = load_deepmd(sys.argv[1])
model = BaseModel.deserialize(copy.deepcopy(data["model"]))
model.model_def_script = json.dumps(data["model_def_script"])
model.min_nbor_dist = torch.tensor(0.8, dtype=torch.float64)
model.enable_compression()  # what `dp --pt compress` does
torch.jit.save(torch.jit.script(model), sys.argv[2])
try:  # with the op's schema known, DeePMD-kit's reader fails on the tables' parameters instead
    convert_deepmd(sys.argv[2], intervals=50)
except DeepmdConversionError as error:
    print(error)
"""


def test_compressed_and_multitask_models_are_named(models, tmp_path, capsys):
    compressed = tmp_path / "compressed.pth"
    result = subprocess.run([sys.executable, "-c", _COMPRESS, str(models["two_side"]), str(compressed)], env=_ENV,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "a compressed model (`dp --pt compress`)" in result.stdout, result.stdout
    # In this process too (the converter declares the op library's ops where the library cannot load).
    assert main(["convert-deepmd", str(compressed), "-o", str(tmp_path / "c.safetensors")]) == 2
    error = capsys.readouterr().err
    assert "a compressed model (`dp --pt compress`)" in error and error.count("\n") == 1, error

    _ensure_deepmd_pytorch()
    from deepmd.pt.train.wrapper import ModelWrapper
    from deepmd.pt.model.model.model import BaseModel

    serialized = load_deepmd(str(models["one_side_checkpoint"]))
    heads = {name: BaseModel.deserialize(copy.deepcopy(serialized["model"])) for name in ("water", "ice")}
    params = {"model_dict": {name: serialized["model_def_script"] for name in heads}}
    multitask = tmp_path / "multitask.pt"
    torch.save({"model": ModelWrapper(heads, model_params=params).state_dict()}, multitask)
    with pytest.raises(DeepmdConversionError, match=r"multi-task checkpoint \(heads water, ice\).*--head NAME"):
        convert_deepmd(str(multitask), intervals=50)


def test_model_path_forms_and_r0_checked_first(models, tmp_path):
    as_text = convert_deepmd(str(models["two_side"]), intervals=50)
    as_bytes = convert_deepmd(os.fsencode(str(models["two_side"])), intervals=50)
    assert as_bytes.to_bytes() == as_text.to_bytes()
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"garbage")
    for r0 in (-1.0, 0.0, float("nan"), "x"):
        with pytest.raises(DeepmdConversionError, match="r0: expected a distance > 0"):
            convert_deepmd(str(garbage), r0=r0)  # before the model is read


def test_type_embedding_model_definition_is_refused(models):
    serialized = load_deepmd(str(models["two_side"]))
    serialized = dict(serialized, model_def_script={"type_embedding": {"neuron": [8]}})
    with pytest.raises(DeepmdConversionError, match="type_embedding"):
        convert_deepmd(serialized, intervals=50)


def test_not_a_pytorch_model_is_refused(tmp_path):
    with pytest.raises(DeepmdConversionError, match="dp convert-backend"):
        convert_deepmd(str(tmp_path / "frozen_model.pb"))


def test_unreadable_models_are_refused_naming_the_file(models, tmp_path, capsys):
    original = models["two_side"].read_bytes()
    cases = {
        "garbage.pth": b"garbage\n",
        "empty.pth": b"",
        "truncated.pth": original[:5000],
        "truncated_end.pth": original[:-100],
    }
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)  # a PyTorch file, but not a DeePMD-kit checkpoint
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    for path in [tmp_path / name for name in cases] + [other]:
        with pytest.raises(DeepmdConversionError,
                           match=f"^convert-deepmd: {path}: cannot read it as a DeePMD-kit PyTorch model"):
            convert_deepmd(str(path), intervals=50)
        assert main(["convert-deepmd", str(path), "-o", str(tmp_path / "out.safetensors")]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"openmm-graph: error: convert-deepmd: {path}: cannot read it") and error.count("\n") == 1
    assert not (tmp_path / "out.safetensors").exists()
    with pytest.raises(DeepmdConversionError, match="intervals: expected an integer >= 1, found 0"):
        convert_deepmd(str(tmp_path / "garbage.pth"), intervals=0)  # before the model is read


def test_cli_refuses_to_overwrite_the_model(models, tmp_path, capsys):
    model = tmp_path / "same.pth"
    model.write_bytes(models["two_side"].read_bytes())
    before = model.read_bytes()
    assert main(["convert-deepmd", str(model), "-o", str(model), "--intervals", "50"]) == 2
    assert "is the input model" in capsys.readouterr().err
    assert model.read_bytes() == before
