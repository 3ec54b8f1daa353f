"""PyTorch models on the CUDA platform (libOpenMMGraphTorchCUDA, docs/torch-models.md): the project's model
exported as TorchScript and as an AOTInductor package for CUDA, run by the GraphForce on the graph it builds on
the device, against the native GraphForce on the Reference platform (and the native CUDA path).

Marked "gpu"; skipped where the CUDA platform or the LibTorch CUDA plugin is missing."""

import pathlib
import sys

import numpy as np
import openmm
import pytest
import torch

from openmmgraph.grades import lattice_system
from openmmgraph.torch_export import export_aoti, export_torchscript

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # the shared torch_model_system module (importlib mode)
from torch_model_system import (  # noqa: E402
    MODELS, assert_float32_accuracy, change_every_third_type, energy_forces, graph_context, small_model, torch_cuda_memory,
    torch_kernel_on)

pytestmark = pytest.mark.gpu


needs_cuda_plugin = pytest.mark.skipif(
    not torch_kernel_on("CUDA") or not torch.cuda.is_available(),
    reason="the CUDA platform with the LibTorch CUDA plugin (libOpenMMGraphTorchCUDA) and a CUDA PyTorch are needed: "
    + "; ".join(m for m in openmm.Platform.getPluginLoadFailures() if "Graph" in m))


def expect_close(context, force, expected_context, expected_force, energy_rel, force_rel):
    expected_energy, expected_forces = energy_forces(expected_context)
    energy, forces = energy_forces(context)
    assert energy == pytest.approx(expected_energy, rel=energy_rel)
    # Forces reach OpenMM's buffer one edge contribution at a time, each rounded to the fixed-point unit 2^-32 kJ/mol/nm
    # (two per edge and particle, about 200 here): 64 units bound that sum's rounding error with room to spare.
    np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=force_rel * np.abs(expected_forces).max() + 64 * 2.0**-32)
    np.testing.assert_allclose(force.getParticleEnergies(context), expected_force.getParticleEnergies(expected_context), rtol=0,
                               atol=energy_rel * abs(expected_energy))
    return energy, forces


@needs_cuda_plugin
@pytest.mark.parametrize("name", sorted(MODELS))
def test_torchscript_on_cuda_matches_the_native_reference(tmp_path, name):
    """float64 export, double precision: the CUDA path equals the native Reference platform to summation order; the
    edge tensors grow when the system gets denser; repeated evaluations agree to 1e-12; types change; MD runs."""
    model = small_model(name, seed=7)
    native, exported = str(tmp_path / "model.safetensors"), str(tmp_path / "model.pt")
    model.write(native)
    export_torchscript(model, exported)
    positions, types, box = lattice_system(400, n_types=model.n_types, seed=4)
    expected_context, expected_force, _ = graph_context(native, types, box, positions, "Reference")
    context, force, _ = graph_context(exported, types, box, positions, "CUDA", properties={"Precision": "double"})
    energy, forces = expect_close(context, force, expected_context, expected_force, 1e-10, 1e-9)
    # Not bitwise: the module's index_add (and its backward of index_select) add with floating-point atomics on CUDA,
    # so a gradient may change in its last bit and a force by the fixed-point unit 2^-32 kJ/mol/nm per contribution.
    again_energy, again_forces = energy_forces(context)
    assert again_energy == pytest.approx(energy, rel=1e-13)
    np.testing.assert_allclose(again_forces, forces, rtol=0, atol=1e-12 * np.abs(forces).max() + 64 * 2.0**-32)
    # Denser (box and positions scaled by 0.8): about twice the edges, beyond the edge tensors' capacity.
    for c in (context, expected_context):
        c.setPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in 0.8 * np.asarray(box)])
        c.setPositions(0.8 * np.asarray(positions))
    expect_close(context, force, expected_context, expected_force, 1e-10, 1e-9)
    change_every_third_type(types, model.n_types, [(context, force), (expected_context, expected_force)])
    expect_close(context, force, expected_context, expected_force, 1e-10, 1e-9)
    context.getIntegrator().step(20)
    assert np.isfinite(energy_forces(context)[0])


@needs_cuda_plugin
def test_contexts_give_their_memory_back_and_leave_pytorch_working(tmp_path):
    """Contexts with a PyTorch model created, run and destroyed in turn, between PyTorch's own work in the same
    process and on the same device: that work stays correct, every Context gives back the memory it took from
    PyTorch's caching allocator, and every Context gives the same results."""
    import gc

    model = small_model("interaction", seed=12)
    exported = str(tmp_path / "model.pt")
    export_torchscript(model, exported)
    positions, types, box = lattice_system(300, n_types=model.n_types, seed=11)
    a = torch.randn(192, 192, device="cuda", dtype=torch.float64)
    expected_product = (a.cpu() @ a.cpu()).numpy()
    allocated = torch_cuda_memory(a)[0]
    results = []
    for _ in range(3):
        context = graph_context(exported, types, box, positions, "CUDA", properties={"Precision": "double"})[0]
        context.getIntegrator().step(3)
        results.append(energy_forces(context))
        np.testing.assert_allclose((a @ a).cpu().numpy(), expected_product, rtol=1e-12)  # while the Context lives
        del context
        gc.collect()
        np.testing.assert_allclose((a @ a).cpu().numpy(), expected_product, rtol=1e-12)  # after it is gone
    for energy, forces in results[1:]:
        assert energy == pytest.approx(results[0][0], rel=1e-12)
        np.testing.assert_allclose(forces, results[0][1], rtol=0, atol=1e-12 * np.abs(results[0][1]).max() + 64 * 2.0**-32)
    assert torch_cuda_memory(a)[0] <= allocated  # less when a workspace of another stream was dropped too


@needs_cuda_plugin
def test_torchscript_module_that_returns_gradients_on_cuda(tmp_path):
    """export_torchscript(gradients=True): the module differentiates itself, on the plugin's stream."""
    model = small_model("interaction", seed=11)
    native, exported = str(tmp_path / "model.safetensors"), str(tmp_path / "model.pt")
    model.write(native)
    export_torchscript(model, exported, gradients=True)
    positions, types, box = lattice_system(300, n_types=model.n_types, seed=9)
    expected_context, expected_force, _ = graph_context(native, types, box, positions, "Reference")
    context, force, _ = graph_context(exported, types, box, positions, "CUDA", properties={"Precision": "double"})
    expect_close(context, force, expected_context, expected_force, 1e-10, 1e-9)


@needs_cuda_plugin
def test_capturable_model_in_cuda_graphs(tmp_path):
    """export_torchscript(static_shapes=True) marks the model capturable: with CudaGraph "auto" or "true" the model's part
    is captured and replayed; results follow the uncaptured run step by step, also after the edge tensors grow."""
    model = small_model("interaction", seed=13)
    exported = str(tmp_path / "model.pt")
    assert export_torchscript(model, exported, static_shapes=True)["capturable"]
    positions, types, box = lattice_system(300, n_types=model.n_types, seed=10)
    contexts = [graph_context(exported, types, box, positions, "CUDA", configure=lambda f, m=mode: f.setProperty("CudaGraph", m),
                              properties={"Precision": "double"})[0] for mode in ("false", "auto", "true")]
    for step in range(10):  # captured after three plain runs: steps 3 to 5 replay, then again after the growth
        results = [energy_forces(c) for c in contexts]
        for energy, forces in results[1:]:
            assert energy == pytest.approx(results[0][0], rel=1e-12), step
            np.testing.assert_allclose(forces, results[0][1], rtol=0, atol=1e-10 * np.abs(results[0][1]).max() + 64 * 2.0**-32)
        positions = positions + 0.002 * np.random.default_rng(step).standard_normal(positions.shape)
        if step == 5:  # denser: the edge tensors grow, the graphs are captured again
            positions, box = 0.85 * positions, 0.85 * np.asarray(box)
        for c in contexts:
            c.setPeriodicBoxVectors(*[openmm.Vec3(*map(float, row)) for row in np.asarray(box)])
            c.setPositions(positions)


@needs_cuda_plugin
def test_float32_torchscript_on_cuda_mixed_precision(tmp_path):
    """A float32 export in mixed precision against the native Reference platform, not periodic; the native CUDA path
    in the same precision is within the same tolerances."""
    model = small_model("interaction", seed=8)
    native, exported = str(tmp_path / "model.safetensors"), str(tmp_path / "model32.pt")
    model.write(native)
    export_torchscript(model, exported, dtype="float32")
    positions, types, box = lattice_system(300, n_types=model.n_types, seed=5)
    expected_context, expected_force, _ = graph_context(native, types, box, positions, "Reference", periodic=False)
    expected_energy, expected_forces = energy_forces(expected_context)
    for path in (exported, native):
        context, force, _ = graph_context(path, types, box, positions, "CUDA", properties={"Precision": "mixed"}, periodic=False)
        assert_float32_accuracy(*energy_forces(context), expected_energy, expected_forces, path)


@needs_cuda_plugin
def test_aoti_package_for_cuda(tmp_path):
    """A .pt2 package compiled for CUDA (a model with an interaction block) runs on the CUDA platform (other particle
    counts than traced), and a CPU package there (or a CUDA one on the Reference platform) is refused with the export
    call to use.  (One model: compiling a package takes about a minute.)"""
    model = small_model("interaction", seed=9)
    native, package = str(tmp_path / "model.safetensors"), str(tmp_path / "model.pt2")
    model.write(native)
    assert export_aoti(model, package, device="cuda")["device"] == "cuda"
    positions, types, box = lattice_system(250, n_types=model.n_types, seed=6)
    expected_context, expected_force, _ = graph_context(native, types, box, positions, "Reference")
    # In the primary context here; the default (OpenMM's own context for a package) runs in a process of its own below.
    context, force, _ = graph_context(package, types, box, positions, "CUDA", properties={"Precision": "double"},
                                      configure=lambda f: f.setProperty("TorchCudaContext", "primary"))
    expect_close(context, force, expected_context, expected_force, 1e-10, 1e-9)
    context.getIntegrator().step(5)
    assert np.isfinite(energy_forces(context)[0])
    with pytest.raises(openmm.OpenMMException, match='device="cpu"'):
        graph_context(package, types, box, positions, "Reference")
    cpu_package = str(tmp_path / "cpu.pt2")
    export_aoti(model, cpu_package)
    with pytest.raises(openmm.OpenMMException, match='device="cuda"'):
        graph_context(cpu_package, types, box, positions, "CUDA")
    check_package_in_openmms_context(tmp_path, package, types, box, positions, *energy_forces(expected_context))


# Run in a process of its own (a failure there must not take this test process with it): the package in OpenMM's
# CUDA context (TorchCudaContext "auto", the default, and "openmm"), between PyTorch's own work in the primary context.
OPENMM_CONTEXT_SCRIPT = """
import gc, json, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from torch_model_system import energy_forces, graph_context, torch_cuda_memory
data = np.load(sys.argv[3])
a = torch.randn(128, 128, device="cuda", dtype=torch.float64)
product = (a.cpu() @ a.cpu()).numpy()
before = torch_cuda_memory(a)
results = []
for setting in ("auto", "openmm"):
    context = graph_context(sys.argv[2], data["types"], data["box"], data["positions"], "CUDA",
                            properties={"Precision": "double"},
                            configure=lambda f: f.setProperty("TorchCudaContext", setting))[0]
    energy, forces = energy_forces(context)
    context.getIntegrator().step(5)
    stepped = energy_forces(context)[0]
    same_product = bool(np.allclose((a @ a).cpu().numpy(), product, rtol=1e-12, atol=0))
    del context
    gc.collect()
    results.append(dict(energy=energy, stepped=stepped, same_product=same_product))
np.save(sys.argv[4], forces)
print(json.dumps(dict(results=results, before=before, after=torch_cuda_memory(a),
                      same_product=bool(np.allclose((a @ a).cpu().numpy(), product, rtol=1e-12, atol=0)))))
"""


def check_package_in_openmms_context(tmp_path, package, types, box, positions, expected_energy, expected_forces):
    """TorchCudaContext "auto" (the default) and "openmm": the package gives the native Reference platform's energy
    and forces (in two Contexts made one after the other), MD runs, PyTorch's own work in the primary context stays correct while and
    after the Contexts live, and the Contexts give PyTorch's memory back."""
    import json
    import subprocess

    inputs, forces_path = str(tmp_path / "system.npz"), str(tmp_path / "openmm_context_forces.npy")
    np.savez(inputs, types=np.asarray(types), box=np.asarray(box), positions=np.asarray(positions))
    run = subprocess.run([sys.executable, "-c", OPENMM_CONTEXT_SCRIPT, str(pathlib.Path(__file__).resolve().parent), package,
                          inputs, forces_path], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"exit status {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    report = json.loads(run.stdout.strip().splitlines()[-1])
    for result in report["results"]:
        assert result["energy"] == pytest.approx(expected_energy, rel=1e-10)
        assert np.isfinite(result["stepped"]) and result["same_product"]
    np.testing.assert_allclose(np.load(forces_path), expected_forces, rtol=0,
                               atol=1e-9 * np.abs(expected_forces).max() + 64 * 2.0**-32)
    assert report["same_product"]
    # Allocated and reserved: a private pool left behind would hold reserved memory that nothing has allocated.
    assert report["after"][0] <= report["before"][0] and report["after"][1] <= report["before"][1], report


@needs_cuda_plugin
def test_errors_on_cuda_are_clear_and_nothing_is_lost(tmp_path):
    model = small_model("plain", seed=10)
    exported = str(tmp_path / "model.pt")
    export_torchscript(model, exported)
    positions, types, box = lattice_system(200, n_types=model.n_types, seed=7)
    context, force, _ = graph_context(exported, types, box, positions, "CUDA")
    good = energy_forces(context)
    bad = np.array(positions)
    bad[5] = bad[4]
    context.setPositions(bad)
    with pytest.raises(openmm.OpenMMException, match="same position"):
        energy_forces(context)
    context.setPositions(np.asarray(positions))
    assert energy_forces(context)[0] == good[0]
    with pytest.raises(openmm.OpenMMException, match="CudaGraph"):
        graph_context(exported, types, box, positions, "CUDA", configure=lambda f: f.setProperty("CudaGraph", "true"))
    with pytest.raises(openmm.OpenMMException, match='TorchCudaContext "openmm" runs AOTInductor packages only'):
        graph_context(exported, types, box, positions, "CUDA", configure=lambda f: f.setProperty("TorchCudaContext", "openmm"))
    assert energy_forces(context)[0] == good[0]


@needs_cuda_plugin
def test_torch_model_example_on_cuda(capsys, load_script):
    """examples/torch_model.py on the CUDA platform: the exported silicon model equals the native GraphForce."""
    example = load_script("examples/torch_model.py")
    assert example.main(["--platform", "CUDA", "--cells", "2", "--steps", "20"]) == 0
    assert "TorchScript vs native" in capsys.readouterr().out
