"""Tests of the Python API of openmm-graph with the real compiled module.

They need the package installed (``pip install .``): they import the
installed ``openmmgraph``, never the sources in python/openmmgraph, which
have no compiled module.
"""

import copy
import hashlib
import math
import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import openmm
import pytest
from openmm import app, unit

import openmmgraph
from openmmgraph import grades

_SOURCE_PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "openmmgraph"
if pathlib.Path(openmmgraph.__file__).resolve().parent == _SOURCE_PACKAGE:
    pytest.fail(
        "these tests must import the installed openmmgraph (pip install .), not the sources in "
        f"{_SOURCE_PACKAGE}; run pytest from the repository root (it uses --import-mode=importlib)",
        pytrace=False,
    )

GraphForce = openmmgraph.GraphForce


def makeModelBytes(typeNames=("O", "H"), seed=0, **options):
    return grades.make_model(grade="small", seed=seed, type_names=list(typeNames), **options).to_bytes()


@pytest.fixture(scope="module")
def modelBytes():
    return makeModelBytes()


@pytest.fixture()
def modelPath(tmp_path, modelBytes):
    path = tmp_path / "water.safetensors"
    path.write_bytes(modelBytes)
    return path


def waterTopology(numWaters, box=None, extra=()):
    """numWaters waters (O, H, H), then one residue per element symbol in extra."""
    topology = app.Topology()
    chain = topology.addChain()
    oxygen = app.Element.getBySymbol("O")
    hydrogen = app.Element.getBySymbol("H")
    for _ in range(numWaters):
        residue = topology.addResidue("HOH", chain)
        o = topology.addAtom("O", oxygen, residue)
        h1 = topology.addAtom("H1", hydrogen, residue)
        h2 = topology.addAtom("H2", hydrogen, residue)
        topology.addBond(o, h1)
        topology.addBond(o, h2)
    for symbol in extra:
        residue = topology.addResidue(symbol.upper(), chain)
        topology.addAtom(symbol.upper(), app.Element.getBySymbol(symbol), residue)
    if box is not None:
        topology.setPeriodicBoxVectors(
            [openmm.Vec3(box, 0, 0), openmm.Vec3(0, box, 0), openmm.Vec3(0, 0, box)] * unit.nanometer
        )
    return topology


def waterPositions(numWaters, seed=1):
    """Waters on a 0.31 nm grid (no two atoms closer than ~0.1 nm), in nm."""
    rng = np.random.default_rng(seed)
    positions = []
    side = math.ceil(numWaters ** (1 / 3))
    for index in range(numWaters):
        center = 0.31 * np.array([index % side, (index // side) % side, index // side**2]) + 0.2
        positions.append(center)
        for _ in range(2):
            direction = rng.normal(size=3)
            positions.append(center + 0.1 * direction / np.linalg.norm(direction))
    return [openmm.Vec3(*p) for p in positions]


def systemFor(force, numParticles):
    system = openmm.System()
    for _ in range(numParticles):
        system.addParticle(1.0)
    system.addForce(force)
    return system


def energyOf(system, positions):
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    state = context.getState(getEnergy=True, getForces=True)
    return (
        state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
        state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer),
    )


def forceFields(force):
    return (
        force.getModelBytes(),
        force.getForceGroup(),
        force.getName(),
        force.usesPeriodicBoundaryConditions(),
        force.getProperties(),
        [force.getParticleParameters(i) for i in range(force.getNumParticles())],
    )


# --------------------------------------------------------------------------
# Plugin loading
# --------------------------------------------------------------------------


def test_plugins_give_reference_the_kernel():
    assert openmm.Platform.getPlatformByName("Reference").supportsKernels(["CalcGraphForce"])
    failures = openmmgraph.pluginLoadFailures()
    assert isinstance(failures, list)
    assert all(isinstance(message, str) for message in failures)
    assert not any("Reference" in message for message in failures), failures


def test_compiled_module_is_installed_inside_the_package():
    from openmmgraph import graphforce

    assert pathlib.Path(graphforce.__file__).parent == pathlib.Path(openmmgraph.__file__).parent
    assert issubclass(GraphForce, openmm.Force)


# --------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------


def test_construct_from_str_and_pathlike(modelPath, modelBytes):
    for path in (str(modelPath), modelPath):
        force = GraphForce(path)
        assert force.getModelBytes() == modelBytes
        assert force.getNumTypes() == 2
        assert force.getNumParticles() == 0


def test_construct_from_bytes_like(modelBytes):
    assert b"\0" in modelBytes  # the safetensors header length: NULs must survive
    for data in (modelBytes, bytearray(modelBytes), memoryview(modelBytes), np.frombuffer(modelBytes, np.uint8)):
        force = GraphForce.fromModelBytes(data)
        assert isinstance(force, GraphForce)
        assert force.thisown  # %newobject: Python owns it, System.addForce can take it
        returned = force.getModelBytes()
        assert isinstance(returned, bytes)
        assert returned == modelBytes


def test_fromModelBytes_rejects_str_and_non_buffers(modelPath):
    with pytest.raises(TypeError, match="GraphForce\\(path\\)"):
        GraphForce.fromModelBytes(str(modelPath))
    with pytest.raises(TypeError, match="int"):
        GraphForce.fromModelBytes(3)


def test_path_with_nul_points_to_fromModelBytes(modelBytes):
    with pytest.raises(ValueError, match="fromModelBytes"):
        GraphForce(modelBytes)


def test_missing_file_raises_openmm_exception_naming_the_path(tmp_path):
    missing = tmp_path / "no-such-model.safetensors"
    with pytest.raises(openmm.OpenMMException, match="no-such-model.safetensors"):
        GraphForce(missing)


def test_bad_model_file_raises_openmm_exception_naming_the_key(tmp_path):
    model = grades.make_model(grade="small", seed=0, type_names=["O", "H"])
    model.metadata["activation"] = "relu"
    path = tmp_path / "bad.safetensors"
    path.write_bytes(model.to_bytes(validate=False))
    with pytest.raises(openmm.OpenMMException, match="activation") as info:
        GraphForce(path)
    assert "relu" in str(info.value)
    with pytest.raises(openmm.OpenMMException, match="activation"):
        GraphForce.fromModelBytes(path.read_bytes())


def test_truncated_model_raises_openmm_exception(modelBytes):
    with pytest.raises(openmm.OpenMMException):
        GraphForce.fromModelBytes(modelBytes[: len(modelBytes) // 2])
    with pytest.raises(openmm.OpenMMException):
        GraphForce.fromModelBytes(b"")


# --------------------------------------------------------------------------
# Particles, types, cut-off, properties
# --------------------------------------------------------------------------


def test_add_get_set_particles(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    assert force.addParticle(4, 1) == 0
    assert force.addParticle(7, 0) == 1
    assert force.getNumParticles() == 2
    assert force.getParticleParameters(0) == (4, 1)
    assert isinstance(force.getParticleParameters(0), tuple)
    assert force.getParticleParameters(1) == (7, 0)
    force.setParticleParameters(1, 9, 1)
    particle, particleType = force.getParticleParameters(1)
    assert (particle, particleType) == (9, 1)
    with pytest.raises(openmm.OpenMMException, match="type 2"):
        force.addParticle(0, 2)
    with pytest.raises(openmm.OpenMMException, match=r"getParticleParameters: index 2 is out of range \(valid: 0 to 1\)"):
        force.getParticleParameters(2)
    with pytest.raises(openmm.OpenMMException, match=r"setParticleParameters: index -1 is out of range \(valid: 0 to 1\)"):
        force.setParticleParameters(-1, 3, 0)
    empty = GraphForce.fromModelBytes(modelBytes)
    with pytest.raises(openmm.OpenMMException, match=r"index 0 is out of range \(there are none\)"):
        empty.getParticleParameters(0)


def test_integer_arguments_take_numpy_integers_not_floats(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    assert force.addParticle(np.int64(4), np.int32(1)) == 0
    force.setParticleParameters(np.int64(0), np.uint16(5), np.int8(0))
    assert force.getParticleParameters(np.intp(0)) == (5, 0)
    with pytest.raises(TypeError, match="argument 'particle': expected an integer, found float"):
        force.addParticle(1.0, 0)
    with pytest.raises(TypeError, match="argument 'type': expected an integer, found numpy.float64"):
        force.addParticle(1, np.float64(0))
    with pytest.raises(OverflowError, match="argument 'particle': 2147483648 is out of the range of a C int"):
        force.addParticle(2**31, 0)


def test_text_arguments_name_themselves_when_not_str(modelBytes):
    # Session 67's review: setProperty("CheckFinite", True) gave SWIG's "argument 3 of type 'std::string const &'".
    force = GraphForce.fromModelBytes(modelBytes)
    with pytest.raises(TypeError, match=r"argument 'value': expected a str, found bool \(property values are text, "
                                        r"e\.g\. 'true'"):
        force.setProperty("CheckFinite", True)
    with pytest.raises(TypeError, match="argument 'key': expected a str, found int"):
        force.setProperty(1, "true")
    with pytest.raises(TypeError, match="argument 'key': expected a str, found NoneType"):
        force.getProperty(None)
    with pytest.raises(TypeError, match="argument 'name': expected a str, found bytes"):
        force.getTypeIndex(b"O")
    force.setProperty("CheckFinite", "deferred")
    assert force.getProperty("CheckFinite") == "deferred" and force.getTypeIndex("H") == 1


def test_messages_with_bytes_that_are_not_utf8_arrive_escaped(tmp_path):
    # The loader quotes the path (and header text) as given; bytes that are not UTF-8 are escaped, not a
    # UnicodeDecodeError in place of the message.
    with pytest.raises(openmm.OpenMMException, match=r"model-\\xff\.safetensors"):
        GraphForce(os.fsencode(str(tmp_path)) + b"/model-\xff.safetensors")


def test_type_lookup_by_name(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    assert [force.getTypeName(t) for t in range(force.getNumTypes())] == ["O", "H"]
    assert force.getTypeIndex("O") == 0
    assert force.getTypeIndex("H") == 1
    assert force.getTypeAtomicNumber(0) == 8
    assert force.getTypeAtomicNumber(1) == 1
    with pytest.raises(openmm.OpenMMException, match="'Na'.*O, H"):
        force.getTypeIndex("Na")
    with pytest.raises(openmm.OpenMMException, match=r"getTypeName: type 2 is out of range \(valid: 0 to 1\)"):
        force.getTypeName(2)
    with pytest.raises(openmm.OpenMMException, match=r"getTypeAtomicNumber: type -1 is out of range"):
        force.getTypeAtomicNumber(-1)


@pytest.mark.parametrize("lengthUnit", ["nm", "angstrom", "bohr"])
def test_cutoff_is_in_nm(lengthUnit):
    force = GraphForce.fromModelBytes(makeModelBytes(length_unit=lengthUnit, cutoff=0.55))
    assert isinstance(force.getCutoff(), float)
    assert force.getCutoff() == pytest.approx(0.55, rel=1e-10)


def test_repr_names_types_and_particles(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    force.addParticle(0, 0)
    text = repr(force)
    assert "O, H" in text and "1 particles" in text and "nm" in text


def test_periodic_flag(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    assert not force.usesPeriodicBoundaryConditions()
    force.setUsesPeriodicBoundaryConditions(True)
    assert force.usesPeriodicBoundaryConditions()


def test_properties(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    assert "CheckFinite" in GraphForce.getPropertyKeys()
    assert force.getProperty("CheckFinite") == "true"
    assert force.getProperties() == {}
    force.setProperty("CheckFinite", "false")
    assert force.getProperty("CheckFinite") == "false"
    assert force.getProperties() == {"CheckFinite": "false"}
    with pytest.raises(openmm.OpenMMException, match="NoSuchKey"):
        force.setProperty("NoSuchKey", "1")
    with pytest.raises(openmm.OpenMMException, match="CheckFinite"):
        force.setProperty("CheckFinite", "maybe")
    with pytest.raises(openmm.OpenMMException, match=r'found "true\\x00x"'):  # all of the value, the NUL escaped
        force.setProperty("CheckFinite", "true\0x")
    with pytest.raises(openmm.OpenMMException, match=r'unknown property "Check\\x0aFinite"; the known properties are'):
        force.setProperty("Check\nFinite", "true")
    assert force.getProperties() == {"CheckFinite": "false"}
    assert force.getProperty("CudaChunkRows") == "auto"
    for bad in ("0", "-5", "12rows", "", "1e6", "99999999999"):
        with pytest.raises(openmm.OpenMMException, match="CudaChunkRows must be"):
            force.setProperty("CudaChunkRows", bad)
    force.setProperty("CudaChunkRows", "65536")
    assert force.getProperties() == {"CheckFinite": "false", "CudaChunkRows": "65536"}
    assert force.getProperty("TorchCudaContext") == "auto"
    with pytest.raises(openmm.OpenMMException, match="TorchCudaContext must be \"auto\", \"openmm\" or \"primary\""):
        force.setProperty("TorchCudaContext", "shared")
    force.setProperty("TorchCudaContext", "openmm")
    assert force.getProperty("TorchCudaContext") == "openmm"
    assert force.getProperty("CudaNeighborSearch") == "auto"
    with pytest.raises(openmm.OpenMMException, match="CudaNeighborSearch must be \"auto\", \"cells\" or \"allpairs\""):
        force.setProperty("CudaNeighborSearch", "verlet")
    assert force.getProperty("CudaFusedNetwork") == "auto"
    with pytest.raises(openmm.OpenMMException, match="CudaFusedNetwork must be \"auto\", \"true\" or \"false\""):
        force.setProperty("CudaFusedNetwork", "layered")
    assert force.getProperty("CudaFusedResidentWeights") == "auto"
    with pytest.raises(openmm.OpenMMException, match="CudaFusedResidentWeights must be \"auto\", \"true\" or \"false\", found \"yes\""):
        force.setProperty("CudaFusedResidentWeights", "yes")
    force.setProperty("CudaFusedResidentWeights", "false")
    assert force.getProperty("CudaFusedResidentWeights") == "false"
    assert force.getProperty("CudaFusedCluster") == "auto"
    with pytest.raises(openmm.OpenMMException, match="CudaFusedCluster must be .* found \"12\""):
        force.setProperty("CudaFusedCluster", "12")
    assert force.getProperty("CudaFusedTileRows") == "auto"
    for bad in ["2", "12", "128", "0", "-4", "eight"]:
        with pytest.raises(openmm.OpenMMException, match=f"CudaFusedTileRows must be .* found \"{bad}\""):
            force.setProperty("CudaFusedTileRows", bad)
    force.setProperty("CudaFusedTileRows", "8")
    assert force.getProperty("CudaFusedTileRows") == "8"
    force.setProperty("CudaNeighborSearch", "cells")
    assert force.getProperty("CudaNeighborSearch") == "cells"
    for scan, choices in (("CudaMomentsScan", '"auto", "rows", "streamed" or "fused"'), ("CudaForceScan", '"auto", "rows" or "streamed"')):
        assert force.getProperty(scan) == "auto"
        for bad in ["", "stream", "Rows", "true"] + (["fused"] if scan == "CudaForceScan" else []):
            with pytest.raises(openmm.OpenMMException, match=f"{scan} must be {choices}, found \"{bad}\""):
                force.setProperty(scan, bad)
        force.setProperty(scan, "streamed")
        assert force.getProperty(scan) == "streamed"
    force.setProperty("CudaMomentsScan", "fused")
    assert force.getProperty("CudaMomentsScan") == "fused"


# --------------------------------------------------------------------------
# With OpenMM: System, Context, XmlSerializer, copy, pickle
# --------------------------------------------------------------------------


def test_system_takes_ownership(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    system = systemFor(force, 3)
    assert not force.thisown
    assert system.getNumForces() == 1


def test_energy_and_particle_energies(modelBytes):
    numWaters = 4
    topology = waterTopology(numWaters)
    force = openmmgraph.createGraphForce(topology, modelBytes)
    system = systemFor(force, topology.getNumAtoms())
    positions = waterPositions(numWaters)
    energy, forces = energyOf(system, positions)
    assert energy != 0.0
    assert np.all(np.isfinite(forces))

    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    particleEnergies = force.getParticleEnergies(context)
    assert isinstance(particleEnergies, list)
    assert len(particleEnergies) == force.getNumParticles()
    assert all(isinstance(e, float) for e in particleEnergies)
    assert sum(particleEnergies) == pytest.approx(energy, rel=1e-9, abs=1e-9)


def test_context_errors_arrive_as_openmm_exceptions(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    force.addParticle(5, 0)  # the System below has 2 particles
    system = systemFor(force, 2)
    with pytest.raises(openmm.OpenMMException, match="5"):
        openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))


def test_system_xml_round_trip_with_cast(modelBytes):
    numWaters = 3
    topology = waterTopology(numWaters)
    force = openmmgraph.createGraphForce(topology, modelBytes)
    force.setForceGroup(2)
    force.setName("water model")
    force.setProperty("CheckFinite", "false")
    expected = forceFields(force)
    system = systemFor(force, topology.getNumAtoms())
    bonds = openmm.HarmonicBondForce()
    bonds.addBond(0, 1, 0.1, 1000.0)
    system.addForce(bonds)

    xml = openmm.XmlSerializer.serialize(system)
    assert "GraphForce" in xml
    copySystem = openmm.XmlSerializer.deserialize(xml)
    assert copySystem.getNumForces() == 2

    graphForces = [f for f in copySystem.getForces() if GraphForce.isinstance(f)]
    assert len(graphForces) == 1
    copied = GraphForce.cast(graphForces[0])
    assert isinstance(copied, GraphForce)
    assert forceFields(copied) == expected

    assert not GraphForce.isinstance(copySystem.getForce(1))
    assert not GraphForce.isinstance("not a force")
    with pytest.raises(openmm.OpenMMException, match="HarmonicBondForce"):
        GraphForce.cast(copySystem.getForce(1))

    positions = waterPositions(numWaters)
    energy1, forces1 = energyOf(system, positions)
    energy2, forces2 = energyOf(copySystem, positions)
    assert energy1 == energy2
    assert np.array_equal(forces1, forces2)


def test_force_xml_round_trip_and_cast_keeps_owner_alive(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    force.addParticle(0, 1)
    xml = openmm.XmlSerializer.serialize(force)
    plainForce = openmm.XmlSerializer.deserialize(xml)  # an owning openmm.Force
    copied = GraphForce.cast(plainForce)
    del plainForce  # the cast view must keep the object alive
    assert forceFields(copied) == forceFields(force)


def test_xml_records_the_model_files_sha256(modelBytes, tmp_path):
    # The digest the C++ proxy writes is the standard SHA-256 of the model file (what sha256sum prints), and an XML
    # whose model text was changed by one character is refused by it.
    force = GraphForce.fromModelBytes(modelBytes)
    force.addParticle(0, 1)
    xml = openmm.XmlSerializer.serialize(force)
    digest = hashlib.sha256(modelBytes).hexdigest()
    assert f'modelSha256="{digest}"' in xml
    assert ' version="2"' in xml
    start = xml.index(' model="') + len(' model="')
    at = xml.index('"', start) - 10
    damaged = xml[:at] + ("B" if xml[at] == "A" else "A") + xml[at + 1 :]
    with pytest.raises(openmm.OpenMMException, match="do not match the SHA-256 recorded beside them"):
        openmm.XmlSerializer.deserialize(damaged)


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="needs /dev/zero and FIFOs")
def test_model_streams_endless_ones_refused_pipes_read(modelBytes, tmp_path):
    # GraphForce("/dev/zero") read until memory ran out ("std::bad_alloc" under a memory limit); a pipe is a model source.
    with pytest.raises(openmm.OpenMMException, match="'/dev/zero' is not a regular file, and its first 8 bytes"):
        GraphForce("/dev/zero")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    model = tmp_path / "model.safetensors"
    model.write_bytes(modelBytes)
    # The writer is another process: the constructor holds the GIL while it waits for the pipe's writer to open it,
    # so a writer thread of this interpreter would never run.
    writer = subprocess.Popen(["sh", "-c", 'cat "$0" > "$1"', str(model), str(fifo)])
    try:
        force = GraphForce(str(fifo))
    finally:
        try:
            writer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            writer.kill()  # the constructor failed before it opened the pipe
            raise
    assert writer.returncode == 0
    assert force.getModelBytes() == modelBytes


def test_cast_of_a_force_read_back_can_join_a_system(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    force.addParticle(0, 1)
    plainForce = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(force))
    cast = GraphForce.cast(plainForce)
    assert cast.thisown and not plainForce.thisown  # the cast took the object over
    system = openmm.System()
    system.addParticle(1.0)
    system.addForce(cast)
    assert not cast.thisown
    del cast
    assert plainForce.getName() == force.getName()  # still the System's object
    assert forceFields(GraphForce.cast(system.getForce(0))) == forceFields(force)
    # A System's own force stays the System's.
    fromSystem = GraphForce.cast(system.getForce(0))
    assert not fromSystem.thisown


def test_deserializing_xml_of_something_else_is_refused(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    others = {
        "HarmonicBondForce": openmm.XmlSerializer.serialize(openmm.HarmonicBondForce()),
        "VerletIntegrator": openmm.XmlSerializer.serialize(openmm.VerletIntegrator(0.001)),
        "System": openmm.XmlSerializer.serialize(openmm.System()),
    }
    for kind, text in others.items():
        with pytest.raises(openmm.OpenMMException, match=f"the XML holds a '{kind}', not a GraphForce"):
            force.__setstate__(text)
    with pytest.raises(openmm.OpenMMException, match="not XML"):
        force.__setstate__("<Force type=")
    with pytest.raises(openmm.OpenMMException, match="without a type"):
        force.__setstate__("<Force/>")
    assert force.getNumTypes() == 2  # the force is unchanged


def test_a_decoy_before_the_root_element_is_refused(modelBytes):
    # ElementTree skips comments and processing instructions; OpenMM's XML reader took a decoy element inside one
    # as the root, and deserialized a HarmonicBondForce as a GraphForce (a garbage particle count, then a segfault).
    force = GraphForce.fromModelBytes(modelBytes)
    force.addParticle(0, 1)
    good = openmm.XmlSerializer.serialize(force)
    decoy = openmm.XmlSerializer.serialize(openmm.HarmonicBondForce()).split("?>", 1)[1].strip()
    for prefix in (f"<!-- x>{decoy} -->", f"<?decoy x>{decoy}?>", "<!-- a comment -->"):
        with pytest.raises(openmm.OpenMMException, match="then the <Force> element"):
            GraphForce._deserialize(good.replace("?>", "?>\n" + prefix, 1))
    # What XmlSerializer writes, with or without its declaration, still reads back.
    for text in (good, good.split("?>", 1)[1]):
        copy = GraphForce._deserialize(text)
        assert openmm.XmlSerializer.serialize(copy) == good


def test_a_saved_system_reads_back_in_a_fresh_process(modelBytes, tmp_path):
    # import openmmgraph alone registers the serialization proxy and the kernels with OpenMM.
    system = openmm.System()
    for _ in range(3):
        system.addParticle(1.0)
    force = GraphForce.fromModelBytes(modelBytes)
    for i, t in enumerate((0, 1, 1)):
        force.addParticle(i, t)
    system.addForce(force)
    positions = [[0, 0, 0], [0.1, 0, 0], [0, 0.1, 0]]
    energy, _ = energyOf(system, np.array(positions))
    (tmp_path / "system.xml").write_text(openmm.XmlSerializer.serialize(system))
    with open(tmp_path / "system.pickle", "wb") as handle:
        pickle.dump(system, handle)
    script = (
        "import pickle, sys, openmm, openmmgraph\n"
        "for system in (openmm.XmlSerializer.deserialize(open(sys.argv[1]).read()), pickle.load(open(sys.argv[2], 'rb'))):\n"
        "    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName('Reference'))\n"
        f"    context.setPositions({positions})\n"
        "    print(repr(context.getState(getEnergy=True).getPotentialEnergy()._value))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "system.xml"), str(tmp_path / "system.pickle")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert [float(line) for line in result.stdout.split()] == [energy, energy]


def test_copy_and_pickle(modelBytes):
    force = GraphForce.fromModelBytes(modelBytes)
    force.addParticle(3, 1)
    force.setUsesPeriodicBoundaryConditions(True)
    force.setProperty("CheckFinite", "false")
    for duplicate in (copy.copy(force), copy.deepcopy(force), pickle.loads(pickle.dumps(force))):
        assert isinstance(duplicate, GraphForce)
        assert duplicate.thisown
        assert forceFields(duplicate) == forceFields(force)
        duplicate.setParticleParameters(0, 4, 0)
        assert force.getParticleParameters(0) == (3, 1)


# --------------------------------------------------------------------------
# createGraphForce
# --------------------------------------------------------------------------


def test_createGraphForce_all_atoms(modelBytes, modelPath):
    topology = waterTopology(2)
    model = grades.make_model(grade="small", seed=0, type_names=["O", "H"])
    for source in (modelBytes, modelPath, str(modelPath), model):
        force = openmmgraph.createGraphForce(topology, source)
        assert isinstance(force, GraphForce)
        assert [force.getParticleParameters(i) for i in range(force.getNumParticles())] == [
            (0, 0), (1, 1), (2, 1), (3, 0), (4, 1), (5, 1)
        ]
        assert not force.usesPeriodicBoundaryConditions()


def test_createGraphForce_subset_and_periodic_default(modelBytes):
    topology = waterTopology(3, box=2.0)
    atoms = list(topology.atoms())
    byIndex = openmmgraph.createGraphForce(topology, modelBytes, atoms=[5, 3, 4])
    byAtom = openmmgraph.createGraphForce(topology, modelBytes, atoms=(atoms[i] for i in (5, 3, 4)))
    for force in (byIndex, byAtom):
        assert [force.getParticleParameters(i) for i in range(3)] == [(5, 1), (3, 0), (4, 1)]
        assert force.usesPeriodicBoundaryConditions()
    explicit = openmmgraph.createGraphForce(topology, modelBytes, atoms=np.array([0]), periodic=False)
    assert explicit.getNumParticles() == 1
    assert not explicit.usesPeriodicBoundaryConditions()
    with pytest.raises(ValueError, match="out of range"):
        openmmgraph.createGraphForce(topology, modelBytes, atoms=[9])
    with pytest.raises(ValueError, match="twice"):
        openmmgraph.createGraphForce(topology, modelBytes, atoms=[1, 1])


def test_createGraphForce_names_the_atom_without_a_type(modelBytes):
    topology = waterTopology(2, extra=("Na",))
    with pytest.raises(ValueError) as info:
        openmmgraph.createGraphForce(topology, modelBytes)
    message = str(info.value)
    assert "atom 6" in message and "'NA'" in message  # the atom
    assert "residue NA" in message  # its residue
    assert "element Na" in message  # its element
    assert "O (Z=8)" in message  # what the model has
    # Leaving the ion out works.
    force = openmmgraph.createGraphForce(topology, modelBytes, atoms=range(6))
    assert force.getNumParticles() == 6


def test_createGraphForce_falls_back_to_atomic_number():
    model = grades.make_model(grade="small", seed=0, type_names=["O", "H"])
    model.metadata["type_names"] = '["OW", "HW"]'
    model.metadata["type_atomic_numbers"] = "[8, 1]"
    force = openmmgraph.createGraphForce(waterTopology(1), model.to_bytes())
    assert [force.getParticleParameters(i) for i in range(3)] == [(0, 0), (1, 1), (2, 1)]


def test_createGraphForce_rejects_other_model_objects():
    with pytest.raises(TypeError, match="model"):
        openmmgraph.createGraphForce(waterTopology(1), 42)
