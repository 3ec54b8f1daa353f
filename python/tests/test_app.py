"""Tests of the OpenMM app integration (openmmgraph.app): createSystem,
createMixedSystem and the openmm-ml registration.

CPU only (Reference platform), small systems: an alanine dipeptide
(ACE-ALA-NME, built here) solvated in TIP3P water with openmm's bundled
amber14 force field, with the dipeptide and two waters as the ML region.
The ML-internal classical energy that the mixed System must lack is computed
independently here (bonded terms copied term by term, nonbonded pairs summed
with NumPy).
"""

import importlib.util
import math
import pathlib

import numpy as np
import openmm
import pytest
from openmm import app, unit

import openmmgraph
from openmmgraph import grades

_SOURCE_PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "openmmgraph"
if pathlib.Path(openmmgraph.__file__).resolve().parent == _SOURCE_PACKAGE:
    pytest.fail(
        "these tests must import the installed openmmgraph (pip install .), not the sources; "
        "run pytest from the repository root",
        pytrace=False,
    )

KJ = unit.kilojoule_per_mole
NM = unit.nanometer
ONE_4PI_EPS0 = 138.93545764438198
HAVE_OPENMMML = importlib.util.find_spec("openmmml") is not None


# --------------------------------------------------------------------------
# Systems


@pytest.fixture(scope="module")
def model():
    return grades.make_model(grade="small", type_names=["H", "C", "N", "O"], radial_intervals=40).to_bytes()


@pytest.fixture(scope="module")
def waterModel():
    return grades.make_model(grade="small", type_names=["O", "H"], radial_intervals=40).to_bytes()


@pytest.fixture(scope="module")
def forcefield():
    return app.ForceField("amber14-all.xml", "amber14/tip3p.xml")


# (residue, [(name, element)], [(atom, atom)]); "-C" is the previous residue's C.
_DIPEPTIDE = [
    ("ACE", [("H1", "H"), ("CH3", "C"), ("H2", "H"), ("H3", "H"), ("C", "C"), ("O", "O")],
     [("H1", "CH3"), ("CH3", "H2"), ("CH3", "H3"), ("CH3", "C"), ("C", "O")]),
    ("ALA", [("N", "N"), ("H", "H"), ("CA", "C"), ("HA", "H"), ("CB", "C"), ("HB1", "H"), ("HB2", "H"),
             ("HB3", "H"), ("C", "C"), ("O", "O")],
     [("-C", "N"), ("N", "H"), ("N", "CA"), ("CA", "HA"), ("CA", "CB"), ("CB", "HB1"), ("CB", "HB2"),
      ("CB", "HB3"), ("CA", "C"), ("C", "O")]),
    ("NME", [("N", "N"), ("H", "H"), ("C", "C"), ("H1", "H"), ("H2", "H"), ("H3", "H")],
     [("-C", "N"), ("N", "H"), ("N", "C"), ("C", "H1"), ("C", "H2"), ("C", "H3")]),
]


def _dipeptide():
    """Topology and positions (nm) of ACE-ALA-NME: a random walk along the bonds
    (no two atoms closer than 0.12 nm), then relaxed with amber14."""
    topology = app.Topology()
    chain = topology.addChain()
    previous = None
    for resName, atoms, bonds in _DIPEPTIDE:
        residue = topology.addResidue(resName, chain)
        byName = {name: topology.addAtom(name, app.Element.getBySymbol(symbol), residue) for name, symbol in atoms}
        for a, b in bonds:
            topology.addBond(previous["C"] if a == "-C" else byName[a], byName[b])
        previous = byName
    rng = np.random.default_rng(7)
    neighbours = {atom.index: [] for atom in topology.atoms()}
    for a, b in topology.bonds():
        neighbours[a.index].append(b)
        neighbours[b.index].append(a)
    positions = {0: np.zeros(3)}
    queue = [0]
    atoms = list(topology.atoms())
    while queue:
        i = queue.pop(0)
        for neighbour in neighbours[i]:
            j = neighbour.index
            if j in positions:
                continue
            length = 0.109 if "H" in (atoms[i].element.symbol, atoms[j].element.symbol) else 0.150
            while True:
                direction = rng.normal(size=3)
                candidate = positions[i] + length * direction / np.linalg.norm(direction)
                if all(np.linalg.norm(candidate - p) > 0.12 for k, p in positions.items() if k != i):
                    break
            positions[j] = candidate
            queue.append(j)
    xyz = [openmm.Vec3(*positions[k]) for k in range(topology.getNumAtoms())] * NM
    system = app.ForceField("amber14-all.xml").createSystem(topology, nonbondedMethod=app.NoCutoff)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(xyz)
    openmm.LocalEnergyMinimizer.minimize(context, 1.0, 300)
    return topology, context.getState(getPositions=True).getPositions()


@pytest.fixture(scope="module")
def solvated(forcefield):
    """(topology, positions, mlAtoms): the dipeptide in a 1.8 nm box of TIP3P;
    the ML region is the dipeptide plus the waters of lowest and highest x
    (neighbours through the periodic boundary)."""
    topology, positions = _dipeptide()
    modeller = app.Modeller(topology, positions)
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(1.8, 1.8, 1.8) * NM)
    topology, positions = modeller.getTopology(), modeller.getPositions()
    xyz = np.array(positions.value_in_unit(NM))
    waters = [r for r in topology.residues() if r.name == "HOH"]
    oxygenX = [xyz[[a for a in r.atoms() if a.element.symbol == "O"][0].index][0] for r in waters]
    chosen = [waters[int(np.argmin(oxygenX))], waters[int(np.argmax(oxygenX))]]
    peptide = [a.index for r in topology.residues() if r.name in ("ACE", "ALA", "NME") for a in r.atoms()]
    mlAtoms = peptide + [a.index for r in chosen for a in r.atoms()]
    return topology, positions, mlAtoms


def context(system, positions, platform="Reference"):
    ctx = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform))
    ctx.setPositions(positions)
    return ctx


def energy(ctx, groups=-1):
    state = ctx.getState(getEnergy=True, getForces=True, groups=groups)
    return state.getPotentialEnergy().value_in_unit(KJ), state.getForces(asNumpy=True).value_in_unit(KJ / NM)


def assertLambdaZeroIsClassical(topology, classical, mlAtoms, model, positions):
    """createMixedSystem(interpolate=True) at lambda_interpolate = 0: the classical System's energy and forces."""
    blended = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, interpolate=True)
    ctx = context(blended, positions)
    ctx.setParameter("lambda_interpolate", 0.0)
    e0, f0 = energy(ctx)
    eClassical, fClassical = energy(context(classical, positions))
    assert e0 == pytest.approx(eClassical, rel=1e-9, abs=1e-5)
    np.testing.assert_allclose(f0, fClassical, rtol=1e-7, atol=1e-5)


def groupsExcept(system, group):
    return {f.getForceGroup() for f in system.getForces()} - {group}


# --------------------------------------------------------------------------
# Independent ML-internal classical energy


def internalBondedSystem(classical, mlSet):
    """A System with copies of the classical bonded terms whose atoms are all ML
    atoms, term by term through the force API."""
    system = openmm.System()
    for i in range(classical.getNumParticles()):
        system.addParticle(classical.getParticleMass(i))
    system.setDefaultPeriodicBoxVectors(*classical.getDefaultPeriodicBoxVectors())
    count = 0
    for force in classical.getForces():
        if isinstance(force, openmm.HarmonicBondForce):
            copy = openmm.HarmonicBondForce()
            for k in range(force.getNumBonds()):
                i, j, *params = force.getBondParameters(k)
                if {i, j} <= mlSet:
                    copy.addBond(i, j, *params)
                    count += 1
        elif isinstance(force, openmm.HarmonicAngleForce):
            copy = openmm.HarmonicAngleForce()
            for k in range(force.getNumAngles()):
                i, j, l, *params = force.getAngleParameters(k)
                if {i, j, l} <= mlSet:
                    copy.addAngle(i, j, l, *params)
                    count += 1
        elif isinstance(force, openmm.PeriodicTorsionForce):
            copy = openmm.PeriodicTorsionForce()
            for k in range(force.getNumTorsions()):
                i, j, l, m, *params = force.getTorsionParameters(k)
                if {i, j, l, m} <= mlSet:
                    copy.addTorsion(i, j, l, m, *params)
                    count += 1
        else:
            assert isinstance(force, (openmm.NonbondedForce, openmm.CMMotionRemover)), type(force)
            continue
        system.addForce(copy)
    return system, count


def internalNonbondedEnergy(classical, mlAtoms, xyz):
    """Coulomb + LJ between ML atoms with no cut-off (exceptions replace the
    combining rule), for a NoCutoff classical System."""
    (nb,) = [f for f in classical.getForces() if isinstance(f, openmm.NonbondedForce)]
    assert nb.getNonbondedMethod() == openmm.NonbondedForce.NoCutoff
    exceptions = {}
    for k in range(nb.getNumExceptions()):
        i, j, q, s, e = nb.getExceptionParameters(k)
        exceptions[frozenset((i, j))] = (q.value_in_unit(unit.elementary_charge**2), s.value_in_unit(NM), e.value_in_unit(KJ))
    total = 0.0
    for a, i in enumerate(mlAtoms):
        for j in mlAtoms[:a]:
            if frozenset((i, j)) in exceptions:
                q, s, e = exceptions[frozenset((i, j))]
            else:
                qi, si, ei = nb.getParticleParameters(i)
                qj, sj, ej = nb.getParticleParameters(j)
                q = (qi * qj).value_in_unit(unit.elementary_charge**2)
                s = 0.5 * (si + sj).value_in_unit(NM)
                e = math.sqrt((ei * ej).value_in_unit(KJ**2))
            r = np.linalg.norm(xyz[i] - xyz[j])
            total += ONE_4PI_EPS0 * q / r + 4 * e * ((s / r) ** 12 - (s / r) ** 6)
    return total


# --------------------------------------------------------------------------
# createSystem


@pytest.mark.parametrize("periodic", [True, False])
def test_create_system_matches_hand_built_graph_force(forcefield, waterModel, periodic):
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(1.3, 1.3, 1.3) * NM)
    topology, positions = modeller.getTopology(), modeller.getPositions()
    if not periodic:
        topology.setPeriodicBoxVectors(None)
    system = openmmgraph.createSystem(topology, waterModel)

    hand = openmm.System()
    for atom in topology.atoms():
        hand.addParticle(atom.element.mass)
    if periodic:
        hand.setDefaultPeriodicBoxVectors(*topology.getPeriodicBoxVectors())
    force = openmmgraph.GraphForce.fromModelBytes(waterModel)
    for atom in topology.atoms():
        force.addParticle(atom.index, force.getTypeIndex(atom.element.symbol))
    force.setUsesPeriodicBoundaryConditions(periodic)
    hand.addForce(force)

    assert system.getNumParticles() == topology.getNumAtoms()
    assert [system.getParticleMass(i) for i in range(system.getNumParticles())] == [
        hand.getParticleMass(i) for i in range(hand.getNumParticles())
    ]
    assert system.usesPeriodicBoundaryConditions() == periodic
    if periodic:
        assert system.getDefaultPeriodicBoxVectors() == hand.getDefaultPeriodicBoxVectors()
    assert system.getNumConstraints() == 0
    graph = [f for f in system.getForces() if openmmgraph.GraphForce.isinstance(f)]
    assert len(graph) == 1
    assert sum(isinstance(f, openmm.CMMotionRemover) for f in system.getForces()) == 1
    e1, f1 = energy(context(system, positions))
    e2, f2 = energy(context(hand, positions))
    assert e1 == pytest.approx(e2, rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(f1, f2, rtol=1e-10, atol=1e-9)


def test_create_system_options(waterModel):
    topology = app.Topology()
    residue = topology.addResidue("HOH", topology.addChain())
    for name, symbol in (("O", "O"), ("H1", "H"), ("H2", "H")):
        topology.addAtom(name, app.Element.getBySymbol(symbol), residue)
    system = openmmgraph.createSystem(topology, waterModel, removeCMMotion=False, forceGroup=3,
                                      properties={"CheckFinite": "false"})
    (force,) = system.getForces()
    force = openmmgraph.GraphForce.cast(force)
    assert force.getForceGroup() == 3 and force.getProperty("CheckFinite") == "false"
    assert not force.usesPeriodicBoundaryConditions()
    with pytest.raises(ValueError, match="no periodic box"):
        openmmgraph.createSystem(topology, waterModel, periodic=True)


def test_create_system_errors(model, waterModel):
    topology = app.Topology()
    residue = topology.addResidue("MOL", topology.addChain())
    topology.addAtom("O", app.Element.getBySymbol("O"), residue)
    topology.addAtom("S", app.Element.getBySymbol("S"), residue)
    with pytest.raises(ValueError, match=r"createSystem: atom 1 'S'.*element S.*types are"):
        openmmgraph.createSystem(topology, waterModel)
    topology.addAtom("EP", None, residue)
    with pytest.raises(ValueError, match="createSystem: atom 2 'EP'.*no element"):
        openmmgraph.createSystem(topology, model)
    with pytest.raises(TypeError, match="createSystem: topology must be an openmm.app.Topology, found NoneType"):
        openmmgraph.createSystem(None, model)
    with pytest.raises(TypeError, match="createSystem: forceGroup must be an integer in 0..31, found 'a'"):
        openmmgraph.createSystem(topology, model, forceGroup="a")
    with pytest.raises(ValueError, match="createSystem: forceGroup must be an integer in 0..31, found 32"):
        openmmgraph.createSystem(topology, model, forceGroup=32)


# --------------------------------------------------------------------------
# createMixedSystem


def test_mixed_system_removes_ml_internal_terms(forcefield, solvated, model):
    topology, positions, mlAtoms = solvated
    mlSet = set(mlAtoms)
    classical = forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.8 * NM,
                                        constraints=app.HBonds)
    before = openmm.XmlSerializer.serialize(classical)
    mixed = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model)
    assert openmm.XmlSerializer.serialize(classical) == before, "the classical System was modified"

    def terms(system):
        out = {}
        for force in system.getForces():
            if isinstance(force, openmm.HarmonicBondForce):
                out["bonds"] = [tuple(force.getBondParameters(k)[:2]) for k in range(force.getNumBonds())]
            elif isinstance(force, openmm.HarmonicAngleForce):
                out["angles"] = [tuple(force.getAngleParameters(k)[:3]) for k in range(force.getNumAngles())]
            elif isinstance(force, openmm.PeriodicTorsionForce):
                out["torsions"] = [tuple(force.getTorsionParameters(k)[:4]) for k in range(force.getNumTorsions())]
        return out

    old, new = terms(classical), terms(mixed)
    for kind in ("bonds", "angles", "torsions"):
        inside = [t for t in old[kind] if set(t) <= mlSet]
        assert inside, f"the test needs ML-internal {kind}"
        assert not [t for t in new[kind] if set(t) <= mlSet], f"ML-internal {kind} left"
        assert new[kind] == [t for t in old[kind] if not set(t) <= mlSet]
        assert [t for t in new[kind] if set(t) & mlSet] == [t for t in old[kind] if set(t) & mlSet and not set(t) <= mlSet]

    (nb,) = [f for f in mixed.getForces() if isinstance(f, openmm.NonbondedForce)]
    (nbOld,) = [f for f in classical.getForces() if isinstance(f, openmm.NonbondedForce)]
    exceptions = {}
    for k in range(nb.getNumExceptions()):
        i, j, q, s, e = nb.getExceptionParameters(k)
        exceptions[frozenset((i, j))] = (q.value_in_unit(unit.elementary_charge**2), e.value_in_unit(KJ))
    for a, i in enumerate(mlAtoms):
        for j in mlAtoms[:a]:
            assert exceptions[frozenset((i, j))] == (0.0, 0.0)
    # ML-MM pairs: no exception added; every MM-MM and ML-MM exception as before.
    oldExceptions = {}
    for k in range(nbOld.getNumExceptions()):
        i, j, q, s, e = nbOld.getExceptionParameters(k)
        oldExceptions[frozenset((i, j))] = (q.value_in_unit(unit.elementary_charge**2), e.value_in_unit(KJ))
    for pair, value in exceptions.items():
        if not pair <= mlSet:
            assert oldExceptions[pair] == value
    assert len([p for p in exceptions if not p <= mlSet]) == len([p for p in oldExceptions if not p <= mlSet])
    for i in range(classical.getNumParticles()):
        assert nb.getParticleParameters(i) == nbOld.getParticleParameters(i)
    assert nb.getExceptionsUsePeriodicBoundaryConditions()

    # Constraints: those inside the ML region removed, the others kept.
    def constraints(system):
        return [tuple(system.getConstraintParameters(k)[:2]) for k in range(system.getNumConstraints())]

    assert any(set(c) <= mlSet for c in constraints(classical))
    assert constraints(mixed) == [c for c in constraints(classical) if not set(c) <= mlSet]
    kept = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, removeConstraints=False)
    assert constraints(kept) == constraints(classical)

    graph = [openmmgraph.GraphForce.cast(f) for f in mixed.getForces() if openmmgraph.GraphForce.isinstance(f)]
    assert len(graph) == 1
    assert [graph[0].getParticleParameters(k)[0] for k in range(graph[0].getNumParticles())] == mlAtoms
    assert graph[0].usesPeriodicBoundaryConditions()
    assert [mixed.getParticleMass(i) for i in range(mixed.getNumParticles())] == [
        classical.getParticleMass(i) for i in range(classical.getNumParticles())
    ]


def test_mixed_energy_is_classical_without_ml_internal_terms(forcefield, solvated, model):
    """E(mixed) - E(GraphForce) = E(classical) - E(ML-internal classical), the
    latter computed independently; ML-MM interactions are kept."""
    topology, positions, mlAtoms = solvated
    mlSet = set(mlAtoms)
    classical = forcefield.createSystem(topology, nonbondedMethod=app.NoCutoff, constraints=None, rigidWater=False)
    mixed = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, forceGroup=5)
    ctx = context(mixed, positions)
    eRest, fRest = energy(ctx, groupsExcept(mixed, 5))
    eGraph, _ = energy(ctx, {5})
    eTotal, _ = energy(ctx)
    assert eTotal == pytest.approx(eRest + eGraph, abs=1e-8)
    assert eGraph != 0.0

    eClassical, fClassical = energy(context(classical, positions))
    bonded, count = internalBondedSystem(classical, mlSet)
    assert count > 30  # bonds, angles and torsions of the dipeptide, bonds and angles of two waters
    eBonded, fBonded = energy(context(bonded, positions))
    xyz = np.array(positions.value_in_unit(NM))
    eNonbonded = internalNonbondedEnergy(classical, mlAtoms, xyz)
    assert abs(eNonbonded) > 1.0
    assert eRest == pytest.approx(eClassical - eBonded - eNonbonded, rel=1e-9, abs=1e-6)
    # The MM atoms feel exactly the classical forces, including those of the ML atoms.
    mm = [i for i in range(len(xyz)) if i not in mlSet]
    np.testing.assert_allclose(fRest[mm], fClassical[mm], rtol=1e-9, atol=1e-6)
    assert np.abs(fBonded[mm]).max() == 0.0


@pytest.mark.parametrize(
    "method, options",
    [
        (app.NoCutoff, {}),
        (app.CutoffNonPeriodic, {"nonbondedCutoff": 0.8 * NM, "switchDistance": 0.7 * NM}),
        (app.CutoffPeriodic, {"nonbondedCutoff": 0.8 * NM}),
        (app.PME, {"nonbondedCutoff": 0.8 * NM, "switchDistance": 0.7 * NM}),
    ],
    ids=["NoCutoff", "CutoffNonPeriodic-switch", "CutoffPeriodic", "PME-switch"],
)
def test_interpolation(forcefield, solvated, model, method, options):
    """lambda_interpolate = 0: the classical energy and forces; 1: the mixed
    ML/MM System; in between: linear."""
    topology, positions, mlAtoms = solvated
    classical = forcefield.createSystem(topology, nonbondedMethod=method, constraints=app.HBonds, **options)
    mixed = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model)
    blended = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, interpolate=True)
    assert sum(isinstance(f, openmm.CustomCVForce) for f in blended.getForces()) == 1
    assert not any(openmmgraph.GraphForce.isinstance(f) for f in blended.getForces())
    eClassical, fClassical = energy(context(classical, positions))
    eMixed, fMixed = energy(context(mixed, positions))
    ctx = context(blended, positions)
    assert ctx.getParameter("lambda_interpolate") == 1.0
    e1, f1 = energy(ctx)
    assert e1 == pytest.approx(eMixed, rel=1e-10, abs=1e-6)
    np.testing.assert_allclose(f1, fMixed, rtol=1e-8, atol=1e-6)
    ctx.setParameter("lambda_interpolate", 0.0)
    e0, f0 = energy(ctx)
    assert e0 == pytest.approx(eClassical, rel=1e-9, abs=1e-5)
    np.testing.assert_allclose(f0, fClassical, rtol=1e-7, atol=1e-5)
    ctx.setParameter("lambda_interpolate", 0.3)
    e3, f3 = energy(ctx)
    assert e3 == pytest.approx(0.3 * e1 + 0.7 * e0, rel=1e-10, abs=1e-6)
    np.testing.assert_allclose(f3, 0.3 * f1 + 0.7 * f0, rtol=1e-8, atol=1e-6)


def test_custom_nonbonded_exclusions_and_interpolation(forcefield, solvated, model):
    topology, positions, mlAtoms = solvated
    mlSet = set(mlAtoms)
    classical = forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.8 * NM)
    soft = openmm.CustomNonbondedForce("a*exp(-r/0.3); a=sqrt(a1*a2)")  # a tail: a long-range correction
    soft.addPerParticleParameter("a")
    soft.setNonbondedMethod(openmm.CustomNonbondedForce.CutoffPeriodic)
    soft.setCutoffDistance(0.8)
    soft.setUseLongRangeCorrection(True)
    for i in range(classical.getNumParticles()):
        soft.addParticle([5.0 + (i % 3)])
    soft.addExclusion(mlAtoms[0], mlAtoms[1])
    soft.setForceGroup(2)
    classical.addForce(soft)
    mixed = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model)
    (custom,) = [f for f in mixed.getForces() if isinstance(f, openmm.CustomNonbondedForce)]
    exclusions = {frozenset(custom.getExclusionParticles(k)) for k in range(custom.getNumExclusions())}
    assert len(exclusions) == custom.getNumExclusions()  # none added twice
    assert exclusions == {frozenset((i, j)) for a, i in enumerate(mlAtoms) for j in mlAtoms[:a]}
    # ML-MM pairs of the CustomNonbondedForce stay.
    eMixedSoft, _ = energy(context(mixed, positions), {2})
    eSoft, _ = energy(context(classical, positions), {2})
    assert 0 < eMixedSoft < eSoft

    assertLambdaZeroIsClassical(topology, classical, mlAtoms, model, positions)
    assert mlSet  # (used above)


def test_mixed_system_errors(forcefield, solvated, model, waterModel):
    topology, positions, mlAtoms = solvated
    classical = forcefield.createSystem(topology, nonbondedMethod=app.NoCutoff)
    n = topology.getNumAtoms()
    with pytest.raises(ValueError, match=rf"createMixedSystem: atom index {n} in mlAtoms is out of range; the topology has {n} atoms"):
        openmmgraph.createMixedSystem(topology, classical, [0, 1, n], model)
    with pytest.raises(ValueError, match="out of range"):
        openmmgraph.createMixedSystem(topology, classical, [-1], model)
    with pytest.raises(ValueError, match=r"createMixedSystem: atom 1 'CH3' of residue ACE .*element C .*types are O \(Z=8\), H \(Z=1\)"):
        openmmgraph.createMixedSystem(topology, classical, mlAtoms, waterModel)
    with pytest.raises(ValueError, match="listed twice"):
        openmmgraph.createMixedSystem(topology, classical, [3, 3], model)
    with pytest.raises(TypeError, match="createMixedSystem: forceGroup must be an integer in 0..31, found 2.0"):
        openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, forceGroup=2.0)
    with pytest.raises(ValueError, match="empty"):
        openmmgraph.createMixedSystem(topology, classical, [], model)
    # Session 61: None made every atom ML, booleans were taken as indices 1 and 0, and a list of properties raised
    # a bare AttributeError.
    with pytest.raises(TypeError, match="createMixedSystem: mlAtoms must be an iterable .*found None"):
        openmmgraph.createMixedSystem(topology, classical, None, model)
    with pytest.raises(TypeError, match=r"createMixedSystem: mlAtoms must hold atom indices .*found True .*flatnonzero"):
        openmmgraph.createMixedSystem(topology, classical, [True, False], model)
    with pytest.raises(TypeError, match="createMixedSystem: properties must be a mapping .*found list"):
        openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, properties=[("CheckFinite", "true")])
    small = openmm.System()
    small.addParticle(1.0)
    with pytest.raises(ValueError, match="same atoms"):
        openmmgraph.createMixedSystem(topology, small, [0], model)
    ljpme = forcefield.createSystem(topology, nonbondedMethod=app.LJPME, nonbondedCutoff=0.8 * NM)
    with pytest.raises(ValueError, match="LJPME"):
        openmmgraph.createMixedSystem(topology, ljpme, mlAtoms, model, interpolate=True)
    openmmgraph.createMixedSystem(topology, ljpme, mlAtoms, model)  # without interpolation: fine
    # NonbondedForce parameter offsets that would change ML-ML pairs.
    offsets = forcefield.createSystem(topology, nonbondedMethod=app.NoCutoff)
    (nb,) = [f for f in offsets.getForces() if isinstance(f, openmm.NonbondedForce)]
    nb.addGlobalParameter("lambda_q", 0.0)
    nb.addParticleParameterOffset("lambda_q", mlAtoms[0], 0.1, 0.0, 0.0)
    openmmgraph.createMixedSystem(topology, offsets, mlAtoms, model)  # ML-MM charges may change
    with pytest.raises(ValueError, match="particle parameter offset"):
        openmmgraph.createMixedSystem(topology, offsets, mlAtoms, model, interpolate=True)
    inside = [k for k in range(nb.getNumExceptions()) if set(nb.getExceptionParameters(k)[:2]) <= set(mlAtoms)]
    nb.addExceptionParameterOffset("lambda_q", inside[0], 0.1, 0.0, 0.0)
    with pytest.raises(ValueError, match="exception .* has a parameter offset"):
        openmmgraph.createMixedSystem(topology, offsets, mlAtoms, model)
    # Atom objects are accepted as well as indices.
    atoms = list(topology.atoms())
    mixed = openmmgraph.createMixedSystem(topology, classical, [atoms[i] for i in mlAtoms], model)
    assert any(openmmgraph.GraphForce.isinstance(f) for f in mixed.getForces())


def test_lazy_names():
    names = dir(openmmgraph)
    for name in ("createSystem", "createMixedSystem", "registerMLPotential", "createGraphForce", "GraphForce"):
        assert name in names
    assert openmmgraph.app.createSystem is openmmgraph.createSystem
    assert openmmgraph.registerMLPotential() is HAVE_OPENMMML


# --------------------------------------------------------------------------
# openmm-ml


@pytest.mark.skipif(not HAVE_OPENMMML, reason="openmm-ml (openmmml) is not installed; the MLPotential registration is untested")
def test_openmmml_registration(forcefield, solvated, model):
    from openmmml import MLPotential

    assert openmmgraph.registerMLPotential() is True
    from openmmgraph.app import GraphPotentialImplFactory

    assert isinstance(MLPotential._implFactories["openmm-graph"], GraphPotentialImplFactory)
    topology, positions, mlAtoms = solvated
    potential = MLPotential("openmm-graph", model=model)
    system = potential.createSystem(topology)
    ours = openmmgraph.createSystem(topology, model)
    eTheirs, fTheirs = energy(context(system, positions))
    eOurs, fOurs = energy(context(ours, positions))
    assert eTheirs == pytest.approx(eOurs, rel=1e-12)
    np.testing.assert_allclose(fTheirs, fOurs, rtol=1e-10, atol=1e-9)

    # openmm-ml's own mixed System (the dipeptide only: openmm-ml <= 1.7 leaves
    # NonbondedForce exceptions non-periodic, which differs from ours for ML
    # atoms that are neighbours through the boundary) at lambda = 1.
    peptide = [a.index for r in topology.residues() if r.name in ("ACE", "ALA", "NME") for a in r.atoms()]
    classical = forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.8 * NM,
                                        constraints=app.HBonds)
    for interpolate in (False, True):
        theirs = potential.createMixedSystem(topology, classical, peptide, interpolate=interpolate)
        ours = openmmgraph.createMixedSystem(topology, classical, peptide, model, interpolate=interpolate)
        assert theirs.getNumConstraints() == ours.getNumConstraints()
        eTheirs, _ = energy(context(theirs, positions))
        eOurs, _ = energy(context(ours, positions))
        assert eTheirs == pytest.approx(eOurs, rel=1e-9), interpolate
    with pytest.raises(ValueError, match="give the model"):
        MLPotential("openmm-graph")


def test_openmmml_classes_need_openmmml():
    if HAVE_OPENMMML:
        pytest.skip("openmm-ml is installed")
    with pytest.raises(AttributeError, match="needs openmm-ml"):
        openmmgraph.app.GraphPotentialImplFactory


def test_mixed_system_runs_on_cpu(forcefield, solvated, model):
    """The interpolating System on the CPU platform (single-precision classical
    forces): lambda = 0 matches the classical System, and a few steps of
    Langevin dynamics at lambda = 0.5 stay finite."""
    topology, positions, mlAtoms = solvated
    classical = forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.8 * NM,
                                        constraints=app.HBonds)
    blended = openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, interpolate=True)
    ctx = context(blended, positions, "CPU")
    ctx.setParameter("lambda_interpolate", 0.0)
    e0, _ = energy(ctx)
    eClassical, _ = energy(context(classical, positions, "CPU"))
    assert e0 == pytest.approx(eClassical, rel=1e-5, abs=1e-2)
    integrator = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.0005 * unit.picosecond)
    ctx = openmm.Context(blended, integrator, openmm.Platform.getPlatformByName("CPU"))
    ctx.setPositions(positions)
    ctx.setParameter("lambda_interpolate", 0.5)
    integrator.step(20)
    assert math.isfinite(energy(ctx)[0])


def _two_tip4p_waters():
    """Two neighbouring TIP4P-Ew waters (with their M sites) in an open box, and the force field."""
    tip4p = app.ForceField("tip4pew.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(tip4p, model="tip4pew", boxSize=openmm.Vec3(1.0, 1.0, 1.0) * NM)
    residues = list(modeller.getTopology().residues())
    xyz = np.array(modeller.getPositions().value_in_unit(NM))
    oxygens = [next(a.index for a in r.atoms() if a.name == "O") for r in residues]
    nearest = 1 + int(np.argmin([np.linalg.norm(xyz[oxygens[0]] - xyz[o]) for o in oxygens[1:]]))
    modeller.delete([r for k, r in enumerate(residues) if k not in (0, nearest)])
    topology, positions = modeller.getTopology(), modeller.getPositions()
    topology.setPeriodicBoxVectors(None)
    return tip4p, topology, positions


@pytest.mark.parametrize("method", [app.NoCutoff, app.CutoffNonPeriodic])
def test_virtual_sites_of_ml_molecules_leave_the_ml_ml_interactions(waterModel, method):
    """The M site of a TIP4P water in the ML region carries its charge: it must leave the ML-ML Coulomb
    with its molecule's atoms (before, -535 kJ/mol of ML-ML attraction stayed for two waters)."""
    tip4p, topology, positions = _two_tip4p_waters()
    classical = tip4p.createSystem(topology, nonbondedMethod=method, nonbondedCutoff=0.9 * NM, rigidWater=False)
    assert sum(classical.isVirtualSite(i) for i in range(classical.getNumParticles())) == 2
    mlAtoms = [a.index for a in topology.atoms() if a.element is not None]
    for force in classical.getForces():
        force.setForceGroup(1 if isinstance(force, openmm.NonbondedForce) else 0)
    mixed = openmmgraph.createMixedSystem(topology, classical, mlAtoms, waterModel, forceGroup=2)
    eNonbonded, _ = energy(context(mixed, positions), {1})
    assert eNonbonded == pytest.approx(0.0, abs=1e-9)  # every charged particle is in the ML region
    (graph,) = [f for f in mixed.getForces() if openmmgraph.GraphForce.isinstance(f)]
    assert openmmgraph.GraphForce.cast(graph).getNumParticles() == len(mlAtoms)  # the model never sees the sites
    # One water ML, the other MM: the ML water's M site still acts on the MM water.
    oneWater = mlAtoms[:3]
    half = openmmgraph.createMixedSystem(topology, classical, oneWater, waterModel, forceGroup=2)
    eHalf, _ = energy(context(half, positions), {1})
    assert abs(eHalf) > 1.0
    # Interpolation: lambda = 0 is the classical System, M sites included.
    assertLambdaZeroIsClassical(topology, classical, mlAtoms, waterModel, positions)


def test_interpolation_of_a_nonperiodic_nonbonded_force_in_a_periodic_system(forcefield, solvated, model):
    """A periodic CustomNonbondedForce makes the System periodic; the NonbondedForce's ML-internal pairs
    must still be computed as it computes them (without minimum images)."""
    topology, positions, mlAtoms = solvated
    for method in (app.NoCutoff, app.CutoffNonPeriodic):
        classical = forcefield.createSystem(topology, nonbondedMethod=method, nonbondedCutoff=0.8 * NM)
        periodicForce = openmm.CustomNonbondedForce("0*r")
        periodicForce.setNonbondedMethod(openmm.CustomNonbondedForce.CutoffPeriodic)
        periodicForce.setCutoffDistance(0.8)
        for _ in range(classical.getNumParticles()):
            periodicForce.addParticle([])
        classical.addForce(periodicForce)
        assert classical.usesPeriodicBoundaryConditions()
        assertLambdaZeroIsClassical(topology, classical, mlAtoms, model, positions)


def test_mixed_system_refuses_what_it_would_get_wrong(forcefield, solvated, model):
    topology, positions, mlAtoms = solvated
    classical = forcefield.createSystem(topology, nonbondedMethod=app.NoCutoff)
    with pytest.raises(ValueError, match="periodic=True but the classical System uses no periodic boundary"):
        openmmgraph.createMixedSystem(topology, classical, mlAtoms, model, periodic=True)
    pme = forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.8 * NM)
    (nonbonded,) = [f for f in pme.getForces() if isinstance(f, openmm.NonbondedForce)]
    nonbonded.setIncludeDirectSpace(False)
    with pytest.raises(ValueError, match=r"setIncludeDirectSpace\(False\)"):
        openmmgraph.createMixedSystem(topology, pme, mlAtoms, model, interpolate=True)
    openmmgraph.createMixedSystem(topology, pme, mlAtoms, model)  # without interpolation: fine


def test_type_map_for_models_whose_types_are_not_elements(forcefield, solvated):
    """A DeePMD-kit water model typed "OW"/"HW" (no atomic numbers): typeMap maps the elements to its types, and
    the System is the one of the same model typed "O"/"H"."""
    byElement = grades.make_model(grade="small", type_names=["O", "H"], radial_intervals=40, seed=5)
    byName = grades.make_model(grade="small", type_names=["OW", "HW"], radial_intervals=40, seed=5)
    assert np.array_equal(byElement.tensors["radial.table"], byName.tensors["radial.table"])
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(1.3, 1.3, 1.3) * NM)
    topology, positions = modeller.getTopology(), modeller.getPositions()
    with pytest.raises(ValueError, match="which the model has no type for.*map elements to them with typeMap"):
        openmmgraph.createSystem(topology, byName.to_bytes())
    mapped = openmmgraph.createSystem(topology, byName.to_bytes(), typeMap={"O": "OW", "H": "HW"})
    plain = openmmgraph.createSystem(topology, byElement.to_bytes())
    e1, f1 = energy(context(mapped, positions))
    e2, f2 = energy(context(plain, positions))
    assert e1 == pytest.approx(e2, rel=1e-12) and np.array_equal(f1, f2)
    with pytest.raises(ValueError, match="typeMap maps 'O' to 'O', which is not a type of the model"):
        openmmgraph.createSystem(topology, byName.to_bytes(), typeMap={"O": "O", "H": "HW"})
    with pytest.raises(TypeError, match="typeMap must be a dict"):
        openmmgraph.createSystem(topology, byName.to_bytes(), typeMap=[("O", "OW")])
    # The mixed System takes it too (the ML region: the two waters of `solvated`).
    peptideTopology, peptidePositions, mlAtoms = solvated
    waters = [i for i in mlAtoms if next(a for a in peptideTopology.atoms() if a.index == i).residue.name == "HOH"]
    classical = forcefield.createSystem(peptideTopology, nonbondedMethod=app.NoCutoff)
    mixedByName = openmmgraph.createMixedSystem(peptideTopology, classical, waters, byName.to_bytes(),
                                                typeMap={"O": "OW", "H": "HW"})
    mixedByElement = openmmgraph.createMixedSystem(peptideTopology, classical, waters, byElement.to_bytes())
    assert energy(context(mixedByName, peptidePositions))[0] == pytest.approx(
        energy(context(mixedByElement, peptidePositions))[0], rel=1e-12)
