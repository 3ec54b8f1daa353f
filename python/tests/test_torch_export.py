"""The project's model exported as TorchScript and as an AOTInductor package
with the graph interface (openmmgraph.torch_export, docs/torch-models.md)
against the PyTorch implementation, the OpenMM Reference platform and a split
into domains."""

import json
import os
import pathlib
import sys
from typing import Tuple

import numpy as np
import openmm
import pytest
import torch

import openmmgraph
from openmmgraph.grades import lattice_system
from openmmgraph.torch_export import METADATA_FORMAT, canonical_graph, export_aoti, export_torchscript, read_metadata
from openmmgraph.torch_model import GraphModelTorch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # the shared torch_model_system module (importlib mode)
from torch_model_system import (  # noqa: E402
    MODELS, assert_float32_accuracy, change_every_third_type, energy_forces, graph_context, small_model, torch_kernel_on)

def system_of(n, n_types, seed=1):
    positions, types, box = lattice_system(n, n_types=n_types, seed=seed)
    return torch.tensor(positions, dtype=torch.float64), torch.as_tensor(types, dtype=torch.int64), torch.tensor(box)


def module_energy_and_forces(module, reference, positions, types, box, dtype=torch.float64):
    """Energy (kJ/mol) and forces (kJ/mol/nm) of the exported module on the canonical graph (one domain; box None:
    no periodic box)."""
    p = positions.clone().requires_grad_(True)
    rows, neighbors, vectors = canonical_graph(p, box, reference.cutoff_nm, reference.length_scale_nm)
    model_box = torch.zeros(0, 3, dtype=torch.float64) if box is None else box / reference.length_scale_nm
    energies = module(p.to(dtype) / reference.length_scale_nm, types, rows, neighbors, vectors.to(dtype),
                      model_box.to(dtype), len(types), 0)
    energy = energies.to(torch.float64).sum() * reference.energy_scale_kj_per_mol
    (gradient,) = torch.autograd.grad(energy, p)
    return float(energy.detach()), (-gradient).numpy()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_matches_pytorch_implementation(tmp_path, name):
    model = small_model(name)
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model.pt")
    metadata = export_torchscript(model, path)
    assert metadata == read_metadata(path)
    assert metadata["cutoff"] == pytest.approx(reference.cutoff)
    assert [t["name"] for t in metadata["types"]] == list(model.type_names)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    expected_energy, expected_forces = reference.energy_and_forces(positions, types, box)
    energy, forces = module_energy_and_forces(module, reference, positions, types, box)
    assert energy == pytest.approx(expected_energy, rel=1e-12)
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-11 * np.abs(expected_forces).max())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_static_shapes_export(tmp_path, name):
    """static_shapes=True (every type's network on all rows, kept by torch.where, no torch.nonzero): the same energies
    and gradients as the default export, and the metadata says "capturable"."""
    model = small_model(name)
    reference = GraphModelTorch(model)
    dynamic, static = str(tmp_path / "dynamic.pt"), str(tmp_path / "static.pt")
    assert "capturable" not in export_torchscript(model, dynamic)
    assert export_torchscript(model, static, static_shapes=True)["capturable"] is True
    assert read_metadata(static)["capturable"] is True
    positions, types, box = system_of(250, model.n_types)
    expected_energy, expected_forces = module_energy_and_forces(torch.jit.load(dynamic), reference, positions, types, box)
    energy, forces = module_energy_and_forces(torch.jit.load(static), reference, positions, types, box)
    assert energy == pytest.approx(expected_energy, rel=1e-14)
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-13 * np.abs(expected_forces).max())
    # The graph of the scripted module has no data-dependent shapes left.
    assert "nonzero" not in str(torch.jit.load(static).inlined_graph)


@pytest.mark.parametrize("static_shapes", [False, True])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_padding_particle_changes_nothing(tmp_path, name, static_shapes):
    """The static-shape layout of the CUDA platform (docs/torch-models.md): particle n (type 0, at the origin) owns
    padding self-edges of length 2 r_c after the real edges. The first n energies, the gradients of the real edges and
    of the real positions are those of the graph without padding; the padding edges get no gradient from them. A
    module that differentiates itself (the sum of all its energies) gives the same gradients on the real parts.  (Not
    bitwise: the padding particle joins type 0's batch in the networks, which may change the rounding of a product.)"""
    model = small_model(name)
    reference = GraphModelTorch(model)
    plain, gradients = str(tmp_path / "plain.pt"), str(tmp_path / "gradients.pt")
    export_torchscript(model, plain, static_shapes=static_shapes)
    export_torchscript(model, gradients, static_shapes=static_shapes, gradients=True)
    positions, types, box = system_of(200, model.n_types)
    scale = reference.length_scale_nm
    rows, neighbors, vectors = canonical_graph(positions, box, reference.cutoff_nm, scale)
    n, edges, pad = len(types), len(neighbors), 37
    x, v, b = positions / scale, vectors.detach(), box / scale
    padded = (torch.cat((x, torch.zeros(1, 3, dtype=x.dtype))), torch.cat((types, torch.zeros(1, dtype=types.dtype))),
              torch.cat((rows, torch.tensor([edges + pad]))), torch.cat((neighbors, torch.full((pad,), n, dtype=neighbors.dtype))),
              torch.cat((v, torch.tensor([[2 * reference.cutoff, 0.0, 0.0]], dtype=v.dtype).repeat(pad, 1))))

    def run(module, positions, types, rows, neighbors, vectors):
        positions = positions.clone().requires_grad_(True)
        vectors = vectors.clone().requires_grad_(True)
        energies = module(positions, types, rows, neighbors, vectors, b, len(rows) - 1, 0)
        grad_vectors, grad_positions = torch.autograd.grad(energies[:n].sum(), (vectors, positions), allow_unused=True)
        return energies.detach(), grad_vectors, grad_positions

    module = torch.jit.load(plain)
    energies, grad_vectors, _ = run(module, x, types, rows, neighbors, v)
    padded_energies, padded_grad_vectors, padded_grad_positions = run(module, *padded)
    assert padded_energies.shape == (n + 1,)
    np.testing.assert_allclose(padded_energies[:n].numpy(), energies.numpy(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(padded_grad_vectors[:edges].numpy(), grad_vectors.numpy(), rtol=0,
                               atol=1e-12 * float(grad_vectors.abs().max()))
    assert float(padded_grad_vectors[edges:].abs().max()) == 0.0
    assert padded_grad_positions is None or float(padded_grad_positions.abs().max()) == 0.0
    with torch.enable_grad():
        own_energies, own_grad_vectors, own_grad_positions = torch.jit.load(gradients)(*padded[:4], padded[4], b, n + 1, 0)
    np.testing.assert_allclose(own_energies[:n].numpy(), energies.numpy(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(own_grad_vectors[:edges].numpy(), grad_vectors.numpy(), rtol=0,
                               atol=1e-12 * float(grad_vectors.abs().max()))
    assert float(own_grad_positions[:n].abs().max()) == 0.0


def test_float32_export(tmp_path):
    model = small_model("interaction")
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model32.pt")
    assert export_torchscript(model, path, dtype="float32")["dtype"] == "float32"
    positions, types, box = system_of(250, model.n_types)
    expected_energy, expected_forces = reference.energy_and_forces(positions, types, box)
    energy, forces = module_energy_and_forces(torch.jit.load(path), reference, positions, types, box, torch.float32)
    assert_float32_accuracy(energy, forces, expected_energy, expected_forces)


def test_export_matches_openmm_reference_platform(tmp_path):
    model = small_model("interaction", seed=5)
    model_path = str(tmp_path / "model.safetensors")
    model.write(model_path)
    reference = GraphModelTorch(model)
    positions, types, box = system_of(250, model.n_types, seed=2)
    expected_energy, expected_forces = energy_forces(graph_context(model_path, types, box, positions.numpy(), "Reference")[0])
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path)
    energy, forces = module_energy_and_forces(torch.jit.load(path), reference, positions, types, box)
    assert energy == pytest.approx(expected_energy, rel=1e-10)
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-8 * np.abs(expected_forces).max())


def domain_inputs(positions, types, box, reference, owned_mask):
    """The inputs of one domain: its owned particles first, then the ghosts its rows reach."""
    rows, neighbors, vectors = canonical_graph(positions, box, reference.cutoff_nm, reference.length_scale_nm)
    owned = torch.nonzero(owned_mask).flatten()
    counts = rows[1:] - rows[:-1]
    centers = torch.repeat_interleave(torch.arange(len(types)), counts)
    keep = owned_mask[centers]
    edge_neighbors = neighbors[keep]
    ghosts = torch.tensor(sorted(set(edge_neighbors.tolist()) - set(owned.tolist())), dtype=torch.int64)
    local = torch.cat((owned, ghosts))
    local_of = torch.full((len(types),), -1, dtype=torch.int64)
    local_of[local] = torch.arange(len(local))
    owned_rows = torch.zeros(len(owned) + 1, dtype=torch.int64)
    owned_rows[1:] = torch.cumsum(counts[owned], 0)
    return local, owned_rows, local_of[edge_neighbors], vectors[keep], len(owned)


def test_domains_add_up_without_communication(tmp_path):
    """A model without an interaction block needs no communication: the energies and forces of
    two domains (owned particles plus the ghosts their rows reach) add up to the whole system's."""
    model = small_model("plain")
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    expected_energy, expected_forces = module_energy_and_forces(module, reference, positions, types, box)
    p = positions.clone().requires_grad_(True)
    total = 0.0
    for owned_mask in (positions[:, 0] < box[0, 0] / 2, positions[:, 0] >= box[0, 0] / 2):
        local, rows, neighbors, vectors, n_owned = domain_inputs(p, types, box, reference, owned_mask)
        assert len(local) > n_owned  # there are ghosts
        energies = module(p[local] / reference.length_scale_nm, types[local], rows, neighbors, vectors,
                          box / reference.length_scale_nm, n_owned, 0)
        total = total + energies.sum() * reference.energy_scale_kj_per_mol
    (gradient,) = torch.autograd.grad(total, p)
    assert float(total.detach()) == pytest.approx(expected_energy, rel=1e-12)
    np.testing.assert_allclose(-gradient.numpy(), expected_forces, rtol=0, atol=1e-11 * np.abs(expected_forces).max())


def test_ghosts_without_communicate_are_refused(tmp_path):
    model = small_model("interaction")
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path, use_communicate=False)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    local, rows, neighbors, vectors, n_owned = domain_inputs(positions, types, box, reference, positions[:, 0] < box[0, 0] / 2)
    with pytest.raises(torch.jit.Error, match="communicate"):
        module(positions[local] / reference.length_scale_nm, types[local], rows, neighbors, vectors,
               box / reference.length_scale_nm, n_owned, 0)


def test_bad_inputs_are_refused(tmp_path):
    model = small_model("plain")
    with pytest.raises(ValueError, match="dtype"):
        export_torchscript(model, str(tmp_path / "m.pt"), dtype="float16")
    # The output must not be the model file being exported (it replaced the model; examples/torch_model.py then
    # compared the export with itself and reported 0.0), nor a folder; both refused before any work.
    source = tmp_path / "model.safetensors"
    model.write(str(source))
    before = source.read_bytes()
    link = tmp_path / "link.safetensors"
    link.symlink_to(source)
    for output in (source, link):
        with pytest.raises(ValueError, match="export_torchscript: the output .* is the model file being exported"):
            export_torchscript(str(source), str(output))
    package_link = tmp_path / "model.pt2"  # a .pt2 name (checked first) that is the model file
    package_link.symlink_to(source)
    with pytest.raises(ValueError, match="export_aoti: the output .* is the model file being exported"):
        export_aoti(str(source), str(package_link))
    with pytest.raises(ValueError, match="export_torchscript: output .*: is a folder"):
        export_torchscript(str(source), str(tmp_path))
    assert source.read_bytes() == before
    # A name of 250 bytes is legal: its temporary file's name is cut to fit (it was 18 bytes too long to create).
    long_name = tmp_path / ("m" * 247 + ".pt")
    export_torchscript(str(source), str(long_name))
    assert read_metadata(str(long_name))["format"] == METADATA_FORMAT
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model.safetensors", "link.safetensors", "model.pt2",
                                                                   long_name.name])
    plain = torch.jit.script(torch.nn.Linear(2, 2))
    foreign = str(tmp_path / "foreign.pt")
    torch.jit.save(plain, foreign)
    with pytest.raises(ValueError, match="openmmgraph.json"):
        read_metadata(foreign)
    wrong = str(tmp_path / "wrong.pt")
    torch.jit.save(plain, wrong, _extra_files={"openmmgraph.json": json.dumps({"format": "other", "version": 9})})
    with pytest.raises(ValueError, match="format"):
        read_metadata(wrong)
    for version in (1.0, True, "1"):  # equal to 1 in Python (or in text): GraphForce refuses them, and so does this
        torch.jit.save(plain, wrong, _extra_files={"openmmgraph.json": json.dumps({"format": METADATA_FORMAT,
                                                                                    "version": version})})
        with pytest.raises(ValueError, match=f"version {version!r}; expected"):
            read_metadata(wrong)
    text = tmp_path / "text.pt"
    text.write_text("not an archive")
    with pytest.raises(ValueError, match="not a TorchScript archive or AOTInductor package"):
        read_metadata(str(text))
    broken = str(tmp_path / "broken.pt")
    torch.jit.save(plain, broken, _extra_files={"openmmgraph.json": "{not json"})
    with pytest.raises(ValueError, match="not valid JSON"):
        read_metadata(broken)
    path = str(tmp_path / "model.pt")
    export_torchscript(model, path)
    module = torch.jit.load(path)
    positions, types, box = system_of(250, model.n_types)
    with pytest.raises(torch.jit.Error, match="row_offsets"):
        module(positions, types, torch.zeros(3, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
               torch.zeros(0, 3, dtype=torch.float64), box, len(types), 0)
    assert os.path.exists(path)


# ---------------------------------------------------------------------------------------------
# The GraphForce with a TorchScript model (the LibTorch plugin) against the native GraphForce
# ---------------------------------------------------------------------------------------------
def torch_plugin_loaded():
    return torch_kernel_on("Reference")


needs_plugin = pytest.mark.skipif(not torch_plugin_loaded(), reason="the LibTorch plugin (libOpenMMGraphTorch) is not loaded: "
                                  + "; ".join(m for m in openmm.Platform.getPluginLoadFailures() if "Torch" in m))


def expect_native_results(context, force, expected_context, expected_force):
    """The exported model's energy (1e-12 relative), forces (1e-11 of the largest) and particle energies against the
    native GraphForce's; returns the energy."""
    expected_energy, expected_forces = energy_forces(expected_context)
    energy, forces = energy_forces(context)
    assert energy == pytest.approx(expected_energy, rel=1e-12)
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-11 * np.abs(expected_forces).max())
    np.testing.assert_allclose(force.getParticleEnergies(context), expected_force.getParticleEnergies(expected_context), rtol=0,
                               atol=1e-12 * abs(expected_energy))
    return energy


@needs_plugin
@pytest.mark.parametrize("platform", ["Reference", "CPU"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_graphforce_runs_torchscript_models(tmp_path, name, platform):
    model = small_model(name, seed=7)
    native, exported = str(tmp_path / "model.safetensors"), str(tmp_path / "model.pt")
    model.write(native)
    export_torchscript(model, exported)
    positions, types, box = lattice_system(250, n_types=model.n_types, seed=4)
    expected_context, expected_force, _ = graph_context(native, types, box, positions, "Reference")
    context, force, system = graph_context(exported, types, box, positions, platform)
    assert force.getNumTypes() == model.n_types and force.getCutoff() == pytest.approx(expected_force.getCutoff())
    energy = expect_native_results(context, force, expected_context, expected_force)
    # The archive travels inside a serialized System.
    copy = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
    again = openmm.Context(copy, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform))
    again.setPositions(np.asarray(positions))
    assert energy_forces(again)[0] == energy
    # Types can change in the Context, as for native models.
    change_every_third_type(types, model.n_types, [(context, force), (expected_context, expected_force)])
    assert energy_forces(context)[0] == pytest.approx(energy_forces(expected_context)[0], rel=1e-12)
    # MD runs.
    context.getIntegrator().step(5)
    assert np.isfinite(energy_forces(context)[0])


@needs_plugin
def test_graphforce_float32_torchscript_model(tmp_path):
    model = small_model("interaction", seed=8)
    native, exported = str(tmp_path / "model.safetensors"), str(tmp_path / "model32.pt")
    model.write(native)
    export_torchscript(model, exported, dtype="float32")
    positions, types, box = lattice_system(250, n_types=model.n_types, seed=5)
    expected_energy, expected_forces = energy_forces(graph_context(native, types, box, positions, "Reference")[0])
    energy, forces = energy_forces(graph_context(exported, types, box, positions, "Reference")[0])
    assert_float32_accuracy(energy, forces, expected_energy, expected_forces)


def test_torchscript_archives_are_checked(tmp_path):
    """The metadata is read (and checked) when the GraphForce is created, plugin or not."""
    plain = torch.jit.script(torch.nn.Linear(2, 2))
    foreign = str(tmp_path / "foreign.pt")
    torch.jit.save(plain, foreign)
    with pytest.raises(openmm.OpenMMException, match="openmmgraph.json"):
        openmmgraph.GraphForce(foreign)
    metadata = export_torchscript(small_model("plain"), str(tmp_path / "model.pt"))
    for change, message in [({"length_unit": "furlong"}, "length_unit"), ({"cutoff": -1}, "cutoff"),
                            ({"dtype": "float16"}, "dtype"), ({"extra": 1}, "unknown key"), ({"format": "x"}, "format"),
                            ({"types": []}, "types"), ({"length_scale_nm": 0.5}, "length_scale_nm")]:
        path = str(tmp_path / "bad.pt")
        torch.jit.save(plain, path, _extra_files={"openmmgraph.json": json.dumps({**metadata, **change})})
        with pytest.raises(openmm.OpenMMException, match=message):
            openmmgraph.GraphForce(path)
    good = open(str(tmp_path / "model.pt"), "rb").read()
    truncated = str(tmp_path / "truncated.pt")
    with open(truncated, "wb") as handle:
        handle.write(good[: len(good) // 2])
    with pytest.raises(openmm.OpenMMException, match="zip"):
        openmmgraph.GraphForce(truncated)
    force = openmmgraph.GraphForce(str(tmp_path / "model.pt"))
    assert force.getTypeName(0) == metadata["types"][0]["name"]
    assert force.getCutoff() == pytest.approx(metadata["cutoff"] * metadata["length_scale_nm"])


def test_damaged_torchscript_archives_are_refused(tmp_path):
    """Every entry's CRC-32 is checked when the GraphForce is created (LibTorch does not check them): a changed byte in the
    stored tensor data or in a deflated code file is an error that names the entry, as Python's zipfile finds it."""
    import io
    import zipfile
    import zlib

    path = tmp_path / "model.pt"
    export_torchscript(small_model("plain"), str(path))
    good = path.read_bytes()
    archive = zipfile.ZipFile(path)
    kinds = {zipfile.ZIP_STORED: None, zipfile.ZIP_DEFLATED: None}
    for info in archive.infolist():
        if info.compress_size > 16 and kinds.get(info.compress_type, 0) is None:
            kinds[info.compress_type] = info
    for info in kinds.values():
        assert info is not None, "the exported archive has both stored and deflated entries"
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        damaged = bytearray(good)
        damaged[start + info.compress_size // 2] ^= 0x10
        with pytest.raises((zipfile.BadZipFile, zlib.error)):  # Python's zipfile finds it too
            zipfile.ZipFile(io.BytesIO(bytes(damaged))).read(info.filename)
        bad = tmp_path / "damaged.pt"
        bad.write_bytes(bytes(damaged))
        with pytest.raises(openmm.OpenMMException, match=f"zip entry '{info.filename}' is corrupt"):
            openmmgraph.GraphForce(str(bad))
        with pytest.raises(openmm.OpenMMException, match=f"zip entry '{info.filename}' is corrupt"):
            openmmgraph.GraphForce.fromModelBytes(bytes(damaged))


def test_torchscript_metadata_is_range_checked(tmp_path):
    """Duplicate type names and out-of-range numbers in openmmgraph.json are refused (as the native loader refuses them)."""
    plain = torch.jit.script(torch.nn.Linear(2, 2))
    metadata = export_torchscript(small_model("plain"), str(tmp_path / "model.pt"))
    first = metadata["types"][0]
    for change, message in [({"types": [first, first]}, f"expected unique names, found \"{first['name']}\" twice"),
                            ({"n_interactions": 1e300}, r"'n_interactions': expected an integer in \[0, 1\]"),
                            ({"n_interactions": 2}, r"'n_interactions': expected an integer in \[0, 1\]"),
                            ({"n_interactions": 0.5}, r"'n_interactions': expected an integer in \[0, 1\]"),
                            ({"types": [{**first, "atomic_number": 1e300}]}, r"atomic_number: expected an integer in \[0, 118\]"),
                            ({"types": [{**first, "atomic_number": -1}]}, r"atomic_number: expected an integer in \[0, 118\]")]:
        path = str(tmp_path / "bad.pt")
        torch.jit.save(plain, path, _extra_files={"openmmgraph.json": json.dumps({**metadata, **change})})
        with pytest.raises(openmm.OpenMMException, match=message):
            openmmgraph.GraphForce(path)
    # A type name that is not UTF-8 (the JSON text must be UTF-8, RFC 8259).
    path = str(tmp_path / "latin1.pt")
    text = json.dumps({**metadata, "types": [{**first, "name": "\u00e7"}]}, ensure_ascii=False).encode("latin-1")
    torch.jit.save(plain, path, _extra_files={"openmmgraph.json": text})
    with pytest.raises(openmm.OpenMMException, match="not valid UTF-8: the sequence starting with byte 0xE7"):
        openmmgraph.GraphForce(path)


def test_model_file_errors_name_the_path(tmp_path):
    """A directory is named as one; a loader error for a file names the file."""
    with pytest.raises(openmm.OpenMMException, match="is a directory"):
        openmmgraph.GraphForce(str(tmp_path))
    path = tmp_path / "short.pt"
    export_torchscript(small_model("plain"), str(path))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(openmm.OpenMMException) as error:
        openmmgraph.GraphForce(str(path))
    assert f"GraphForce: TorchScript model '{path}': " in str(error.value)


@needs_plugin
def test_a_module_with_the_wrong_output_is_refused(tmp_path):
    class Wrong(torch.nn.Module):
        def forward(self, positions: torch.Tensor, types: torch.Tensor, row_offsets: torch.Tensor, neighbors: torch.Tensor,
                    edge_vectors: torch.Tensor, box: torch.Tensor, n_owned: int, communicator: int) -> torch.Tensor:
            return edge_vectors.sum()

    metadata = export_torchscript(small_model("plain"), str(tmp_path / "model.pt"))
    path = str(tmp_path / "wrong.pt")
    torch.jit.save(torch.jit.script(Wrong()), path, _extra_files={"openmmgraph.json": json.dumps(metadata)})
    positions, types, box = lattice_system(250, n_types=2, seed=4)
    context = graph_context(path, types, box, positions, "Reference")[0]
    with pytest.raises(openmm.OpenMMException, match="shape"):
        context.getState(getEnergy=True)
    # Declared to return its gradients, but returns a tensor.
    path = str(tmp_path / "wrong-gradients.pt")
    declared = {**metadata, "interface": "particle_energies_and_gradients"}
    torch.jit.save(torch.jit.script(Wrong()), path, _extra_files={"openmmgraph.json": json.dumps(declared)})
    context = graph_context(path, types, box, positions, "Reference")[0]
    with pytest.raises(openmm.OpenMMException, match="not a tuple"):
        context.getState(getEnergy=True)


@needs_plugin
@pytest.mark.parametrize("resized", ["edge_vectors", "positions"])
def test_gradients_are_checked_against_the_graph_given_not_the_inputs_after_the_call(tmp_path, resized):
    """A module that resizes an input in place and returns gradients of the new size is refused: the kernel reads the
    gradients with the graph's own edge and particle counts (it read past them before; a segfault)."""

    class Resizes(torch.nn.Module):
        """Resizes one input to one row, then returns gradients shaped as the inputs are after that."""

        def __init__(self, edges: bool):
            super().__init__()
            self.edges = edges

        def forward(self, positions: torch.Tensor, types: torch.Tensor, row_offsets: torch.Tensor, neighbors: torch.Tensor,
                    edge_vectors: torch.Tensor, box: torch.Tensor, n_owned: int,
                    communicator: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            (edge_vectors if self.edges else positions).resize_(1, 3)
            return (torch.zeros(n_owned, dtype=torch.float64), torch.zeros(edge_vectors.shape[0], 3, dtype=torch.float64),
                    torch.zeros(positions.shape[0], 3, dtype=torch.float64))

    metadata = export_torchscript(small_model("plain"), str(tmp_path / "model.pt"))
    declared = {**metadata, "interface": "particle_energies_and_gradients"}
    path = str(tmp_path / "resizes.pt")
    module = Resizes(edges=resized == "edge_vectors")
    torch.jit.save(torch.jit.script(module), path, _extra_files={"openmmgraph.json": json.dumps(declared)})
    positions, types, box = lattice_system(250, n_types=2, seed=4)
    context = graph_context(path, types, box, positions, "Reference")[0]
    what = "dE/d edge_vectors" if resized == "edge_vectors" else "dE/d positions"
    with pytest.raises(openmm.OpenMMException, match=f"{what} has shape \\[1, 3\\]; expected"):
        context.getState(getEnergy=True, getForces=True)


@needs_plugin
def test_module_outputs_must_have_the_metadata_dtype_and_may_be_constant(tmp_path):
    class Half(torch.nn.Module):
        def forward(self, positions: torch.Tensor, types: torch.Tensor, row_offsets: torch.Tensor, neighbors: torch.Tensor,
                    edge_vectors: torch.Tensor, box: torch.Tensor, n_owned: int, communicator: int) -> torch.Tensor:
            return (positions[:n_owned, 0] * 0.1).to(torch.float16)

    class Constant(torch.nn.Module):
        """Per-type reference energies: no dependence on the positions, so no forces."""

        def forward(self, positions: torch.Tensor, types: torch.Tensor, row_offsets: torch.Tensor, neighbors: torch.Tensor,
                    edge_vectors: torch.Tensor, box: torch.Tensor, n_owned: int, communicator: int) -> torch.Tensor:
            return -1.5 - types[:n_owned].to(torch.float64)

    class Meta(torch.nn.Module):
        """Energies with a shape but no data."""

        def forward(self, positions: torch.Tensor, types: torch.Tensor, row_offsets: torch.Tensor, neighbors: torch.Tensor,
                    edge_vectors: torch.Tensor, box: torch.Tensor, n_owned: int, communicator: int) -> torch.Tensor:
            return torch.empty(n_owned, dtype=torch.float64, device="meta")

    metadata = export_torchscript(small_model("plain"), str(tmp_path / "model.pt"))
    positions, types, box = lattice_system(250, n_types=2, seed=4)
    path = str(tmp_path / "meta.pt")
    torch.jit.save(torch.jit.script(Meta()), path, _extra_files={"openmmgraph.json": json.dumps(metadata)})
    context = graph_context(path, types, box, positions, "Reference")[0]
    with pytest.raises(openmm.OpenMMException, match="the energies must be a dense tensor that holds its data; found a meta"):
        context.getState(getEnergy=True)
    path = str(tmp_path / "half.pt")
    torch.jit.save(torch.jit.script(Half()), path, _extra_files={"openmmgraph.json": json.dumps(metadata)})
    context = graph_context(path, types, box, positions, "Reference")[0]
    with pytest.raises(openmm.OpenMMException, match="the energies are Half; the metadata's dtype is Double"):
        context.getState(getEnergy=True)
    path = str(tmp_path / "constant.pt")
    torch.jit.save(torch.jit.script(Constant()), path, _extra_files={"openmmgraph.json": json.dumps(metadata)})
    context, force, _ = graph_context(path, types, box, positions, "Reference")
    energy, forces = energy_forces(context)
    assert energy == pytest.approx(-1.5 * len(types) - float(np.sum(types)))
    assert np.all(forces == 0)
    assert force.getParticleEnergies(context)[:2] == [-1.5 - types[0], -1.5 - types[1]]


@needs_plugin
@pytest.mark.parametrize("name", sorted(MODELS))
def test_graphforce_runs_torchscript_modules_that_return_gradients(tmp_path, name):
    """export_torchscript(gradients=True): the module differentiates itself (interface
    "particle_energies_and_gradients"); the GraphForce takes its gradients as they are."""
    model = small_model(name, seed=12)
    native, exported = str(tmp_path / "model.safetensors"), str(tmp_path / "model.pt")
    model.write(native)
    metadata = export_torchscript(model, exported, gradients=True)
    assert metadata == read_metadata(exported)
    assert metadata["interface"] == "particle_energies_and_gradients" and metadata["program"] == "torchscript"
    positions, types, box = lattice_system(250, n_types=model.n_types, seed=8)
    expected_context, expected_force, _ = graph_context(native, types, box, positions, "Reference")
    context, force, _ = graph_context(exported, types, box, positions, "Reference")
    expect_native_results(context, force, expected_context, expected_force)
    context.getIntegrator().step(3)
    assert np.isfinite(energy_forces(context)[0])


# ---------------------------------------------------------------------------------------------
# AOTInductor packages (.pt2): the program returns the energies and their gradients
# ---------------------------------------------------------------------------------------------
@needs_plugin
@pytest.mark.parametrize("name", sorted(MODELS))
def test_graphforce_runs_aoti_packages(tmp_path, name):
    """A .pt2 package of the model (compiled here, for this CPU) gives the native GraphForce's energy, forces and
    particle energies, at other particle counts than the one it was traced with, periodic or not."""
    model = small_model(name, seed=9)
    native, package = str(tmp_path / "model.safetensors"), str(tmp_path / "model.pt2")
    model.write(native)
    metadata = export_aoti(model, package)
    assert metadata == read_metadata(package)
    assert metadata["interface"] == "particle_energies_and_gradients" and metadata["program"] == "aotinductor"
    for n, periodic in ((250, True), (180, False)):
        positions, types, box = lattice_system(n, n_types=model.n_types, seed=6)

        def configure(force, periodic=periodic):
            force.setUsesPeriodicBoundaryConditions(periodic)

        expected_context, expected_force, _ = graph_context(native, types, box, positions, "Reference", configure)
        context, force, system = graph_context(package, types, box, positions, "Reference", configure)
        expect_native_results(context, force, expected_context, expected_force)
    context.getIntegrator().step(3)
    assert np.isfinite(energy_forces(context)[0])
    # A package takes one domain: the multi-process mode refuses it when the Context is created.
    with pytest.raises(openmm.OpenMMException, match="one domain only"):
        graph_context(package, types, box, positions, "Reference", lambda force: force.setProperty("Domains", "mpi"))


@needs_plugin
def test_graphforce_float32_aoti_package(tmp_path):
    model = small_model("interaction", seed=8)
    native, package = str(tmp_path / "model.safetensors"), str(tmp_path / "model32.pt2")
    model.write(native)
    assert export_aoti(model, package, dtype="float32")["dtype"] == "float32"
    positions, types, box = lattice_system(250, n_types=model.n_types, seed=5)
    expected_energy, expected_forces = energy_forces(graph_context(native, types, box, positions, "Reference")[0])
    energy, forces = energy_forces(graph_context(package, types, box, positions, "Reference")[0])
    assert_float32_accuracy(energy, forces, expected_energy, expected_forces)
    with pytest.raises(ValueError, match="pt2"):
        export_aoti(model, str(tmp_path / "model.pt"))
    with pytest.raises(ValueError, match="dtype"):
        export_aoti(model, package, dtype="float16")
    # What the program was compiled for is recorded in it: an edited openmmgraph.json is refused when the Context is
    # made (an extra type would make the program index past its tables, which aborts the process).
    import zipfile

    metadata = read_metadata(package)
    extraType = {**metadata, "types": metadata["types"] + [{"name": "X", "atomic_number": 0}]}
    for edit, message in [({**metadata, "dtype": "float64"}, "compiled for float32, but its openmmgraph.json says float64"),
                          (extraType, "compiled for 2 types, but its openmmgraph.json lists 3")]:
        edited = str(tmp_path / "edited.pt2")
        with zipfile.ZipFile(package) as source, zipfile.ZipFile(edited, "w", compression=zipfile.ZIP_STORED) as target:
            for entry in source.infolist():
                data = source.read(entry)
                if entry.filename.endswith("/extra/openmmgraph.json"):
                    data = json.dumps(edit).encode()
                target.writestr(entry, data)
        with pytest.raises(openmm.OpenMMException, match=message):
            graph_context(edited, types, box, positions, "Reference")
    # A failed compile leaves an existing package as it was, and no temporary file.
    before = pathlib.Path(package).read_bytes()

    def failing(*args, **kwargs):
        raise RuntimeError("the compiler failed")

    original = torch._inductor.aoti_compile_and_package
    torch._inductor.aoti_compile_and_package = failing
    try:
        with pytest.raises(RuntimeError, match="the compiler failed"):
            export_aoti(model, package, dtype="float32")
    finally:
        torch._inductor.aoti_compile_and_package = original
    assert pathlib.Path(package).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    # A package replaced through a symbolic link replaces its target, which keeps its mode (the compiler stands in:
    # what it writes is moved over the package as written, with the metadata added).
    os.chmod(package, 0o640)
    link = tmp_path / "link.pt2"
    link.symlink_to(package)

    def stand_in(exported, package_path, inductor_configs):
        with zipfile.ZipFile(package_path, "w") as archive:
            archive.writestr("stand_in/data/program.bin", b"compiled")

    torch._inductor.aoti_compile_and_package = stand_in
    try:
        export_aoti(model, str(link), dtype="float32")
    finally:
        torch._inductor.aoti_compile_and_package = original
    assert link.is_symlink() and os.stat(package).st_mode & 0o777 == 0o640
    with zipfile.ZipFile(package) as archive:
        assert sorted(archive.namelist()) == ["stand_in/data/program.bin", "stand_in/extra/openmmgraph.json"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_aoti_wrapper_declares_each_int_array_where_it_is_used(tmp_path):
    """export_aoti compiles with each size and stride array of the C++ wrapper declared where it is used: torch 2.11
    caches those declarations under the id of a bound method that lives for one call, and handed a CUDA package's
    wrapper a variable declared out of its scope (torch_export._int_array_declarations_where_used).  One writeline
    that writes into two scopes in turn stands for two writelines at one address: each scope must get a declaration
    of its own.  Torch's method is back after an export, also after a failed one."""
    import itertools
    import zipfile

    from openmmgraph.torch_export import _int_array_declarations_where_used, _wrapper_with_int_array_cache

    CppWrapperCpu = _wrapper_with_int_array_cache()
    if CppWrapperCpu is None:
        pytest.skip(f"torch {torch.__version__} has no cached codegen_int_array_var to stand in for")
    torch_method = CppWrapperCpu.__dict__["codegen_int_array_var"]
    # Only the two methods' state: a whole wrapper needs a graph being compiled.
    wrapper = object.__new__(CppWrapperCpu)
    wrapper.int_array_id, wrapper.declared_int_array_vars, wrapper.codegen_int_array_var_cache = itertools.count(), set(), {}
    wrapper._int_array_writeline_targets = []  # torch 2.15's cache keeps its keys' targets alive here
    scopes = []

    def writeline(line):
        scopes[-1].append(line)

    names = []
    with _int_array_declarations_where_used():
        for _ in range(2):
            scopes.append([])
            names.append(wrapper.codegen_int_array_var("{3, 1}", writeline, known_statically=True))
    assert CppWrapperCpu.__dict__["codegen_int_array_var"] is torch_method
    for name, scope in zip(names, scopes):
        assert any(f" {name}[] = {{3, 1}};" in line for line in scope), (names, scopes)

    seen = []

    def stand_in(exported, package_path, inductor_configs):
        seen.append(CppWrapperCpu.__dict__["codegen_int_array_var"] is not torch_method)
        if len(seen) == 2:
            raise RuntimeError("the compiler failed")
        with zipfile.ZipFile(package_path, "w") as archive:
            archive.writestr("stand_in/data/program.bin", b"compiled")

    original = torch._inductor.aoti_compile_and_package
    torch._inductor.aoti_compile_and_package = stand_in
    try:
        export_aoti(small_model("plain"), str(tmp_path / "model.pt2"), dtype="float32")
        with pytest.raises(RuntimeError, match="the compiler failed"):
            export_aoti(small_model("plain"), str(tmp_path / "model.pt2"), dtype="float32")
    finally:
        torch._inductor.aoti_compile_and_package = original
    assert seen == [True, True]
    assert CppWrapperCpu.__dict__["codegen_int_array_var"] is torch_method


def test_aoti_metadata_is_checked(tmp_path):
    """A package's openmmgraph.json must pair the interface with the program; other devices are refused."""
    import zipfile

    metadata = export_torchscript(small_model("plain"), str(tmp_path / "model.pt"))
    plain = torch.jit.script(torch.nn.Linear(2, 2))
    for change, message in [({"program": "aotinductor"}, "program"),
                            ({"program": "tensorflow"}, "program"),
                            ({"interface": "particle_energies_and_gradients", "program": "aotinductor", "device": "tpu"}, "device"),
                            ({"device": "tpu"}, "device"),  # a TorchScript module's too
                            ({"interface": "forces"}, "interface")]:
        path = str(tmp_path / "bad.pt")
        torch.jit.save(plain, path, _extra_files={"openmmgraph.json": json.dumps({**metadata, **change})})
        with pytest.raises(openmm.OpenMMException, match=message):
            openmmgraph.GraphForce(path)
    # The metadata entry must be stored uncompressed (the loader reads it in place).
    deflated = str(tmp_path / "deflated.pt2")
    with zipfile.ZipFile(deflated, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("deflated/extra/openmmgraph.json", json.dumps(metadata))
    with pytest.raises(openmm.OpenMMException, match="is compressed"):
        openmmgraph.GraphForce(deflated)
    # A package without what LibTorch's loader reads is refused when read (that loader reads past a one-entry
    # package's list of names, which crashed the process with some LibTorch builds, and compiles a package without
    # a compiled program with commands the package gives).
    package_metadata = json.dumps({**metadata, "interface": "particle_energies_and_gradients", "program": "aotinductor"})
    alone = str(tmp_path / "alone.pt2")
    with zipfile.ZipFile(alone, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("alone/extra/openmmgraph.json", package_metadata)
    with pytest.raises(openmm.OpenMMException, match="AOTInductor package: it has one entry"):
        openmmgraph.GraphForce(alone)
    # A package laid out as torch._inductor lays one out, whose compiled program cannot be loaded, fails when the
    # Context is created, with LibTorch's reason.
    path = str(tmp_path / "broken.pt2")
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, content in [("w.wrapper.cpp", "// wrapper"), ("w.wrapper_metadata.json", '{"AOTI_DEVICE_KEY": "cpu"}'),
                              ("w.wrapper.so", "not a shared library")]:
            archive.writestr(f"broken/data/aotinductor/model/{name}", content)
        archive.writestr("broken/extra/openmmgraph.json", package_metadata)
    force = openmmgraph.GraphForce(path)
    assert force.getNumParticles() == 0
    if torch_plugin_loaded():
        positions, types, box = lattice_system(250, n_types=2, seed=4)
        with pytest.raises(openmm.OpenMMException, match="AOTInductor model: LibTorch cannot load the package"):
            graph_context(path, types, box, positions, "Reference")


def _clusters_without_a_box(model, reference):
    """30 particles in open space: a cluster of 20 that domains 0 and 1 share (each has ghosts of the other's), and
    an isolated cluster of 10 far away, domain 2's, which has no ghost at all."""
    cut = reference.cutoff_nm
    generator = torch.Generator().manual_seed(1)
    first = torch.rand(20, 3, generator=generator, dtype=torch.float64) * cut * 1.5
    second = torch.rand(10, 3, generator=generator, dtype=torch.float64) * cut * 0.8 + torch.tensor([10 * cut, 0, 0])
    positions = torch.cat((first, second))
    x = positions[:, 0]
    masks = (x < 0.75 * cut, (x >= 0.75 * cut) & (x < 5 * cut), x >= 5 * cut)
    return positions, torch.arange(len(positions)) % model.n_types, None, masks


@pytest.mark.parametrize("layout", ["two halves of a box", "a domain without ghosts"])
def test_interaction_model_across_domains_with_communicate(tmp_path, layout):
    """An exported model with an interaction block split into domains (one thread each, the
    simulated engine of openmmgraph.simulated_domains): ghost node features come through
    openmmgraph::communicate and their gradients go back to the owners, so the energies and the
    forces equal the one-domain run's. A domain without ghosts still calls communicate (the
    collective rule of docs/communicate.md): it skipped the call, and the other domains waited for
    it until the engine's timeout (under MPI: for ever)."""
    communicate = pytest.importorskip("openmmgraph.communicate")
    try:
        communicate.load_library()
    except Exception as error:
        pytest.skip(f"the communicate operator is not available: {error}")
    import threading

    from openmmgraph.simulated_domains import SimulatedDomains

    model = small_model("interaction", seed=9)
    reference = GraphModelTorch(model)
    path = str(tmp_path / "model.pt")
    assert export_torchscript(model, path, use_communicate=True)["uses_communicate"]
    module = torch.jit.load(path)
    if layout == "two halves of a box":
        positions, types, box = system_of(250, model.n_types, seed=6)
        masks = (positions[:, 0] < box[0, 0] / 2, positions[:, 0] >= box[0, 0] / 2)
    else:
        positions, types, box, masks = _clusters_without_a_box(model, reference)
    expected_energy, expected_forces = module_energy_and_forces(module, reference, positions, types, box)
    model_box = torch.zeros(0, 3, dtype=torch.float64) if box is None else box / reference.length_scale_nm

    domains = [domain_inputs(positions, types, box, reference, mask) for mask in masks]
    if layout == "a domain without ghosts":
        assert [len(d[0]) > d[4] for d in domains] == [True, True, False]
    rows, neighbors, _ = canonical_graph(positions, box, reference.cutoff_nm, reference.length_scale_nm)
    centers = torch.repeat_interleave(torch.arange(len(types)), rows[1:] - rows[:-1])
    results, errors = [None] * len(domains), [None] * len(domains)
    owned, ghosts = [d[0][: d[4]] for d in domains], [d[0][d[4]:] for d in domains]
    with SimulatedDomains(owned=owned, ghosts=ghosts, timeout=30) as engine:

        def run(d):
            try:
                local, owned_rows, local_neighbors, vectors, n_owned = domains[d]
                vectors = vectors.detach().clone().requires_grad_(True)
                energies = module(positions[local] / reference.length_scale_nm, types[local], owned_rows, local_neighbors,
                                  vectors, model_box, n_owned, engine.handles[d])
                energy = energies.sum() * reference.energy_scale_kj_per_mol
                (gradient,) = torch.autograd.grad(energy, vectors)
                results[d] = (float(energy.detach()), gradient.detach())
            except Exception as error:  # reported below with the domain
                errors[d] = error

        threads = [threading.Thread(target=run, args=(d,)) for d in range(len(domains))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert errors == [None] * len(domains)
    assert sum(result[0] for result in results) == pytest.approx(expected_energy, rel=1e-12)
    forces = np.zeros((len(types), 3))
    for d, mask in enumerate(masks):
        keep = mask[centers]
        g = (results[d][1] / reference.length_scale_nm).numpy()  # dE/d(edge vector) per nm
        np.add.at(forces, centers[keep].numpy(), g)
        np.add.at(forces, neighbors[keep].numpy(), -g)
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-11 * np.abs(expected_forces).max())
