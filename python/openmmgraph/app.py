"""OpenMM app integration: Systems with the graph potential, mixed ML/MM Systems,
and the openmm-ml ``MLPotential`` registration.

    import openmmgraph
    system = openmmgraph.createSystem(topology, "model.safetensors")
    mixed = openmmgraph.createMixedSystem(topology, classicalSystem, ligandAtoms, "model.safetensors")

``createMixedSystem`` follows openmm-ml's ``MLPotential.createMixedSystem``
with its default ("mechanical") embedding: the interactions between ML atoms
are computed by the model, everything else (including ML-MM electrostatics and
Lennard-Jones) by the classical force field; ``interpolate=True`` adds the
global parameter ``lambda_interpolate`` that blends the two descriptions of
the ML region.  The choices are listed in each docstring and in
docs/implementation-notes.md ("OpenMM app integration").

When openmm-ml is installed, importing this module (which the first use of
``openmmgraph.createSystem`` and friends does) registers the potential
``'openmm-graph'`` with ``openmmml.MLPotential``::

    import openmmgraph, openmmml
    openmmgraph.registerMLPotential()        # or any use of openmmgraph.createSystem
    potential = openmmml.MLPotential("openmm-graph", model="model.safetensors")
    system = potential.createSystem(topology)
"""

import copy
import math
import operator
import re
import xml.etree.ElementTree as ET

import openmm

from . import _plugin

__all__ = [
    "createSystem",
    "createMixedSystem",
    "registerMLPotential",
    "LAMBDA_INTERPOLATE",
    "ML_POTENTIAL_NAME",
]

#: The global parameter of an interpolating mixed System (openmm-ml's name).
LAMBDA_INTERPOLATE = "lambda_interpolate"
#: The name under which the potential is registered with openmm-ml's MLPotential.
ML_POTENTIAL_NAME = "openmm-graph"

# 1/(4 pi eps0) in kJ/mol nm/e^2, the value OpenMM 8 uses in NonbondedForce.
_ONE_4PI_EPS0 = 138.93545764438198

# Names of particle attributes of bonded terms in serialized forces:
# p1, p2, ... (bonds, angles, torsions, compound bonds), a1..a4 b1..b4 (CMAP).
_PARTICLE_ATTRIBUTE = re.compile(r"^[pab][0-9]+$")
_TERM_LISTS = (("Bonds", "Bond"), ("Angles", "Angle"), ("Torsions", "Torsion"))


# --------------------------------------------------------------------------
# Helpers


def _checkArguments(topology, forceGroup, caller):
    """The topology and force group of createSystem / createMixedSystem, checked
    (TypeError or ValueError naming the argument); returns the force group as an int."""
    from openmm.app import Topology

    if not isinstance(topology, Topology):
        raise TypeError(f"{caller}: topology must be an openmm.app.Topology, found {type(topology).__name__}")
    try:
        group = operator.index(forceGroup)
    except TypeError:
        raise TypeError(f"{caller}: forceGroup must be an integer in 0..31, found {forceGroup!r}") from None
    if not 0 <= group <= 31:
        raise ValueError(f"{caller}: forceGroup must be an integer in 0..31, found {group}")
    return group


def _atomIndexList(topology, atoms, caller):
    """mlAtoms (ints or Atom objects) as a non-empty list of distinct indices, checked against the topology."""
    from ._plugin import _atomIndices

    if atoms is None:  # _atomIndices takes None for every atom; an ML region must be named
        raise TypeError(f"{caller}: mlAtoms must be an iterable of atom indices or openmm.app Atom objects, found None "
                        "(for a System of the model alone use createSystem)")
    indices = _atomIndices(topology, atoms, caller, "mlAtoms")
    if not indices:
        raise ValueError(f"{caller}: mlAtoms is empty; give at least one atom for the ML region")
    return indices


def _checkElements(topology, indices, caller):
    """Every atom the model applies to must have an element (virtual sites and
    extra particles cannot be typed)."""
    atoms = list(topology.atoms())
    for index in indices:
        atom = atoms[index]
        if atom.element is None:
            residue = atom.residue
            raise ValueError(
                f"{caller}: atom {index} '{atom.name}' of residue {residue.name} {residue.id} has no "
                "element (a virtual site or extra particle?); the model can only be applied to atoms "
                "with an element" + ("; leave it out of mlAtoms" if caller == "createMixedSystem" else "")
            )


def _makeGraphForce(topology, model, atoms, periodic, forceGroup, properties, caller, typeMap=None):
    """createGraphForce with the caller's name in its errors, then the force
    group and properties."""
    try:
        force = _plugin.createGraphForce(topology, model, atoms=atoms, periodic=periodic, typeMap=typeMap)
    except (ValueError, TypeError) as error:
        message = str(error)
        if message.startswith("createGraphForce: "):
            message = message[len("createGraphForce: "):]
        raise type(error)(f"{caller}: {message}") from error
    force.setForceGroup(int(forceGroup))
    if properties is not None and not hasattr(properties, "items"):
        raise TypeError(f"{caller}: properties must be a mapping of GraphForce property names to values (a dict), "
                        f"found {type(properties).__name__}")
    for key, value in (properties or {}).items():
        force.setProperty(str(key), str(value))
    return force


def _copyWithTerms(system, atomSet, keepInside):
    """A copy of system in which every bonded term (the Bond, Angle and
    Torsion entries of any force: HarmonicBondForce, HarmonicAngleForce,
    PeriodicTorsionForce, RBTorsionForce, CMAPTorsionForce, CustomBondForce,
    CustomAngleForce, CustomTorsionForce, CustomCompoundBondForce) is kept or
    removed according to whether all its particles lie in atomSet.

    keepInside False: remove the terms whose particles all lie in atomSet (the
    mixed System).  keepInside True: keep only those terms (the ML region's
    internal classical terms); then only the forces that hold term lists are
    kept, each returned as a (force, number of terms) pair instead.
    """
    root = ET.fromstring(openmm.XmlSerializer.serialize(system))
    counts = []
    forcesElement = root.find("./Forces")
    for forceElement in list(forcesElement) if forcesElement is not None else []:
        holdsTerms = False
        kept = 0
        for listName, termName in _TERM_LISTS:
            for termList in forceElement.findall(listName):
                for term in termList.findall(termName):
                    particles = [int(v) for k, v in term.attrib.items() if _PARTICLE_ATTRIBUTE.match(k)]
                    if not particles:
                        continue  # e.g. CustomCentroidBondForce (groups): left as it is
                    holdsTerms = True
                    inside = all(p in atomSet for p in particles)
                    if inside != keepInside:
                        termList.remove(term)
                    else:
                        kept += 1
        counts.append((holdsTerms, kept))
    copied = openmm.XmlSerializer.deserialize(ET.tostring(root, encoding="unicode"))
    if not keepInside:
        return copied
    result = []
    for force, (holdsTerms, kept) in zip(copied.getForces(), counts):
        if holdsTerms and kept > 0:
            result.append((copy.deepcopy(force), kept))
    return result


def _mlVirtualSites(system, mlSet):
    """The virtual sites of the System built only from ML atoms (or from such sites): the M sites and
    lone pairs of ML molecules, which carry their charges and must leave the ML-ML nonbonded
    interactions with them."""
    sites = set()
    while True:
        found = {i for i in range(system.getNumParticles())
                 if system.isVirtualSite(i) and i not in sites and i not in mlSet
                 and all(system.getVirtualSite(i).getParticle(k) in mlSet | sites
                         for k in range(system.getVirtualSite(i).getNumParticles()))}
        if not found:
            return sites
        sites |= found


def _checkOffsets(force, mlSet, interpolate):
    """Reject NonbondedForce parameter offsets that would bring back or change
    ML-ML interactions (see createMixedSystem)."""
    for k in range(force.getNumExceptionParameterOffsets()):
        _, exception, *_ = force.getExceptionParameterOffset(k)
        i, j, *_ = force.getExceptionParameters(exception)
        if i in mlSet and j in mlSet:
            raise ValueError(
                f"createMixedSystem: NonbondedForce exception {exception} between ML atoms {i} and {j} "
                "has a parameter offset (a global parameter would bring the ML-ML interaction back); "
                "remove the offset or leave one of the atoms out of mlAtoms"
            )
    if interpolate:
        for k in range(force.getNumParticleParameterOffsets()):
            _, particle, *_ = force.getParticleParameterOffset(k)
            if particle in mlSet:
                raise ValueError(
                    f"createMixedSystem: interpolate=True: ML atom {particle} has a NonbondedForce particle "
                    "parameter offset; the ML-internal classical energy is built from the default "
                    "parameters and would not follow it"
                )


def _checkInterpolable(force):
    """Refuse a NonbondedForce whose ML-internal classical energy _internalNonbonded cannot rebuild."""
    if force.getNonbondedMethod() == openmm.NonbondedForce.LJPME:
        raise ValueError(
            "createMixedSystem: interpolate=True is not supported with a LJPME NonbondedForce (the "
            "ML-internal dispersion in reciprocal space cannot be separated); use PME, or interpolate=False"
        )
    if not force.getIncludeDirectSpace():
        raise ValueError(
            "createMixedSystem: interpolate=True is not supported with a NonbondedForce that leaves out its "
            "direct-space terms (setIncludeDirectSpace(False)); the ML-internal classical energy would count "
            "them; use interpolate=False"
        )


def _internalNonbonded(force, mlAtoms):
    """The classical nonbonded energy between pairs of ML atoms of a
    NonbondedForce, as CustomBondForces (for interpolation):

    - pairs with an exception: Coulomb and LJ of the exception parameters, no
      cut-off (as NonbondedForce computes exceptions), periodic if the force's
      exceptions are;
    - other pairs: the force's own pair function: NoCutoff: Coulomb + LJ;
      CutoffNonPeriodic / CutoffPeriodic: reaction-field Coulomb + LJ inside
      the cut-off; Ewald / PME: Coulomb as [erfc(alpha r) step(rc - r) +
      erf(alpha r)] / r (the direct-space term plus the reciprocal-space pair
      term that an exclusion removes) and LJ inside the cut-off; the LJ
      switching function when the force uses one.
    """
    _checkInterpolable(force)
    method = force.getNonbondedMethod()
    mlSet = set(mlAtoms)
    exceptionPairs = {}
    for k in range(force.getNumExceptions()):
        i, j, chargeProd, sigma, epsilon = force.getExceptionParameters(k)
        if i in mlSet and j in mlSet:
            exceptionPairs[(min(i, j), max(i, j))] = (
                chargeProd.value_in_unit(openmm.unit.elementary_charge**2),
                sigma.value_in_unit(openmm.unit.nanometer),
                epsilon.value_in_unit(openmm.unit.kilojoule_per_mole),
            )
    exceptionForce = openmm.CustomBondForce(
        f"{_ONE_4PI_EPS0!r}*chargeProd/r + 4*epsilon*((sigma/r)^12 - (sigma/r)^6)"
    )
    exceptionForce.setName("ML-internal classical nonbonded exceptions")
    for name in ("chargeProd", "sigma", "epsilon"):
        exceptionForce.addPerBondParameter(name)
    periodic = force.usesPeriodicBoundaryConditions()  # the force's own, whatever else makes the System periodic
    exceptionForce.setUsesPeriodicBoundaryConditions(bool(periodic and force.getExceptionsUsePeriodicBoundaryConditions()))
    for (i, j), (chargeProd, sigma, epsilon) in sorted(exceptionPairs.items()):
        if chargeProd != 0 or epsilon != 0:
            exceptionForce.addBond(i, j, [chargeProd, sigma, epsilon])

    lj = "4*epsilon*((sigma/r)^12 - (sigma/r)^6)"
    if method == openmm.NonbondedForce.NoCutoff:
        expression = f"{_ONE_4PI_EPS0!r}*chargeProd/r + {lj}"
        globals_ = {}
    else:
        cutoff = force.getCutoffDistance().value_in_unit(openmm.unit.nanometer)
        globals_ = {"rc": cutoff}
        if force.getUseSwitchingFunction():
            switch = force.getSwitchingDistance().value_in_unit(openmm.unit.nanometer)
            globals_["rs"] = switch
            ljTerm = f"({lj})*S; S = select(step(r - rs), 1 - 10*x^3 + 15*x^4 - 6*x^5, 1); x = (r - rs)/(rc - rs)"
        else:
            ljTerm = lj
        if method in (openmm.NonbondedForce.CutoffNonPeriodic, openmm.NonbondedForce.CutoffPeriodic):
            dielectric = force.getReactionFieldDielectric()
            globals_["krf"] = (1.0 / cutoff**3) * (dielectric - 1.0) / (2.0 * dielectric + 1.0)
            globals_["crf"] = (1.0 / cutoff) * (3.0 * dielectric) / (2.0 * dielectric + 1.0)
            expression = (
                f"step(rc - r)*({_ONE_4PI_EPS0!r}*chargeProd*(1/r + krf*r^2 - crf) + LJ); LJ = {ljTerm}"
            )
        else:  # Ewald, PME
            alpha = 0.0
            if method == openmm.NonbondedForce.PME:
                alpha = force.getPMEParameters()[0].value_in_unit(openmm.unit.nanometer**-1)
            if alpha == 0.0:
                # NonbondedForceImpl's choice when none is set.
                alpha = math.sqrt(-math.log(2.0 * force.getEwaldErrorTolerance())) / cutoff
            globals_["alpha"] = alpha
            expression = (
                f"{_ONE_4PI_EPS0!r}*chargeProd*(erfc(alpha*r)*step(rc - r) + erf(alpha*r))/r"
                f" + step(rc - r)*LJ; LJ = {ljTerm}"
            )
    pairForce = openmm.CustomBondForce(expression)
    pairForce.setName("ML-internal classical nonbonded pairs")
    for name in ("chargeProd", "sigma", "epsilon"):
        pairForce.addPerBondParameter(name)
    # Constants are per-bond parameters (not global parameters, which would
    # appear in the Context and could clash with the user's).
    for name in globals_:
        pairForce.addPerBondParameter(name)
    pairForce.setUsesPeriodicBoundaryConditions(bool(periodic))
    params = []
    for i in range(force.getNumParticles()):
        q, s, e = force.getParticleParameters(i)
        params.append(
            (
                q.value_in_unit(openmm.unit.elementary_charge),
                s.value_in_unit(openmm.unit.nanometer),
                e.value_in_unit(openmm.unit.kilojoule_per_mole),
            )
        )
    constants = list(globals_.values())
    ordered = sorted(mlAtoms)
    for a in range(len(ordered)):
        i = ordered[a]
        qi, si, ei = params[i]
        for b in range(a + 1, len(ordered)):
            j = ordered[b]
            if (i, j) in exceptionPairs:
                continue
            qj, sj, ej = params[j]
            chargeProd = qi * qj
            epsilon = (ei * ej) ** 0.5
            if chargeProd != 0 or epsilon != 0:
                pairForce.addBond(i, j, [chargeProd, 0.5 * (si + sj), epsilon] + constants)
    return [f for f in (exceptionForce, pairForce) if f.getNumBonds() > 0]


def _internalCustomNonbonded(force, mlAtoms):
    """A copy of a CustomNonbondedForce restricted to the pairs of ML atoms
    (interaction groups intersected with the ML region, its own exclusions
    kept, no long-range correction): the classical ML-internal part of it."""
    mlSet = set(mlAtoms)
    internal = copy.deepcopy(force)
    internal.setUseLongRangeCorrection(False)
    if internal.getNumInteractionGroups() == 0:
        internal.addInteractionGroup(sorted(mlSet), sorted(mlSet))
    else:
        for k in range(internal.getNumInteractionGroups()):
            set1, set2 = internal.getInteractionGroupParameters(k)
            internal.setInteractionGroupParameters(
                k, sorted(set(set1) & mlSet), sorted(set(set2) & mlSet)
            )
    internal.setName("ML-internal " + (force.getName() or "CustomNonbondedForce"))
    return internal


# --------------------------------------------------------------------------
# Public API


def createSystem(topology, model, removeCMMotion=True, periodic=None, forceGroup=0, properties=None, typeMap=None):
    """Create a System for a Topology modelled by the graph potential alone.

    Parameters
    ----------
    topology : openmm.app.Topology
        The Topology; atom i becomes particle i of the System.
    model : str, os.PathLike, bytes or openmmgraph.modelfile.ModelFile
        The model (as for :func:`openmmgraph.createGraphForce`).
    removeCMMotion : bool
        Add a CMMotionRemover (default True), as openmm-ml and ForceField do.
    periodic : bool, optional
        Whether the GraphForce uses periodic boundary conditions; by default,
        whether the Topology has periodic box vectors.  ``True`` without a box
        in the Topology is a ValueError.
    forceGroup : int
        The force group of the GraphForce (default 0).
    properties : dict, optional
        GraphForce properties to set (e.g. ``{"CheckFinite": "false"}``).
    typeMap : dict, optional
        Element symbol -> model type name, for models whose type names are not
        element symbols (as for :func:`openmmgraph.createGraphForce`).

    Choices: particle masses are the elements' masses (openmm-ml's choice; no
    hydrogen mass repartitioning, no constraints); the System's default
    periodic box is the Topology's whenever it has one (also with
    ``periodic=False``); every atom must have an element the model has a type
    for (by symbol, else atomic number, as in createGraphForce), else
    ValueError naming the atom.  The model's cut-off must be at most half the
    box height, which OpenMM checks when the Context is created.

    Returns
    -------
    openmm.System
    """
    caller = "createSystem"
    forceGroup = _checkArguments(topology, forceGroup, caller)
    box = topology.getPeriodicBoxVectors()
    if periodic is None:
        periodic = box is not None
    elif periodic and box is None:
        raise ValueError(
            f"{caller}: periodic=True but the topology has no periodic box vectors; "
            "set them with topology.setPeriodicBoxVectors() or use periodic=False"
        )
    indices = list(range(topology.getNumAtoms()))
    if not indices:
        raise ValueError(f"{caller}: the topology has no atoms")
    _checkElements(topology, indices, caller)
    force = _makeGraphForce(topology, model, None, bool(periodic), forceGroup, properties, caller, typeMap)
    system = openmm.System()
    if box is not None:
        system.setDefaultPeriodicBoxVectors(*box)
    for atom in topology.atoms():
        system.addParticle(atom.element.mass)
    system.addForce(force)
    if removeCMMotion:
        system.addForce(openmm.CMMotionRemover())
    return system


def createMixedSystem(topology, classicalSystem, mlAtoms, model, interpolate=False, removeConstraints=True,
                      forceGroup=0, periodic=None, properties=None, typeMap=None):
    """Create a System in which the ML region is modelled by the graph potential
    and everything else by a classical System, in the manner of openmm-ml's
    ``MLPotential.createMixedSystem`` (mechanical embedding).

    Parameters
    ----------
    topology : openmm.app.Topology
        The Topology the classical System was made for (same number of atoms as
        the System has particles).
    classicalSystem : openmm.System
        The System of the whole Topology with a conventional force field.  It
        is not modified.
    mlAtoms : iterable of int or openmm.app.Atom
        The ML region: the atoms whose mutual interactions the model computes,
        in the order they are added to the GraphForce.  Only atoms with an
        element (no virtual sites); no index twice; not empty.  The virtual
        sites built from ML atoms alone (the M site of a TIP4P water, lone
        pairs) join the region for the nonbonded terms below, so that their
        charges leave the ML-ML interactions too; the model never sees them.
    model : str, os.PathLike, bytes or openmmgraph.modelfile.ModelFile
        The model; every ML atom's element must have a type in it.
    interpolate : bool
        If True, the System has a global parameter ``lambda_interpolate``
        (default 1) with E = lambda * E_ML + (1 - lambda) * E_classical_internal
        + E_rest: at 1 the mixed ML/MM energy, at 0 the classical energy.
    removeConstraints : bool
        Remove the constraints whose two atoms are both ML atoms (default True;
        the model then sets those bond lengths).  Others are kept.
    forceGroup : int
        The force group of the GraphForce (interpolate=False) or of the
        CustomCVForce that holds it (interpolate=True).  Default 0.
    periodic : bool, optional
        Whether the GraphForce uses periodic boundary conditions; by default,
        whether the classical System does.  True with a classical System that
        is not periodic is a ValueError (its box would be OpenMM's default).
    properties : dict, optional
        GraphForce properties to set.
    typeMap : dict, optional
        Element symbol -> model type name (as for
        :func:`openmmgraph.createGraphForce`).

    What is changed, in a copy of the classical System (particles, masses,
    box, virtual sites, other constraints and all other forces are kept as
    they are):

    - bonded terms (the entries of HarmonicBond/Angle, PeriodicTorsion,
      RBTorsion, CMAPTorsion, CustomBond/Angle/Torsion and
      CustomCompoundBondForce) whose particles are *all* ML atoms are removed;
      terms with at least one MM atom stay (also those that cross the
      boundary).  This includes restraints built from such forces: add those
      after creating the mixed System.
    - NonbondedForce: every pair of the ML region (the ML atoms and their
      virtual sites) gets an exception with charge product 0 and epsilon 0
      (replacing an existing one), so ML-ML Coulomb and Lennard-Jones are
      gone while ML-MM and MM-MM pairs are unchanged.
      With Ewald/PME the exception also removes the pair's reciprocal-space
      term at the minimum-image distance; the interactions of an ML atom with
      the *other* periodic images of ML atoms stay in the reciprocal sum (the
      model is short-ranged: openmm-ml's mechanical embedding with
      mlLongRange=False).  In a periodic System the force's exceptions are
      made periodic when the force itself is (as openmm-ml does), so that an
      exception between ML atoms
      of different molecules uses the minimum image.  A parameter offset on an
      exception between ML atoms is a ValueError (it would bring the pair
      back).  The dispersion correction does not depend on exceptions and is
      unchanged.
    - CustomNonbondedForce: an exclusion for every pair of the ML region not
      already excluded.
    - Other forces (implicit solvent, CustomGBForce, AMOEBA, custom
      many-particle or H-bond forces, CustomCentroidBondForce, external
      forces, barostats, CMMotionRemover) are copied unchanged: they keep
      their ML-ML contributions.

    With interpolate=True the GraphForce is not added directly: a
    CustomCVForce (force group ``forceGroup``) holds it and the classical
    ML-internal energy, copies of the removed bonded terms and CustomBondForces
    with the ML-ML nonbonded pairs in the NonbondedForce's own functional form
    (exception pairs: Coulomb + LJ of the exception; other pairs: no cut-off,
    reaction field, or Ewald/PME's erfc + erf split, with its cut-off and
    switching function) and copies of each CustomNonbondedForce restricted to
    ML-ML pairs (no long-range correction), so that at lambda = 0 the energy
    and forces are the classical System's.  Not supported (ValueError): LJPME,
    a NonbondedForce without its direct-space terms (setIncludeDirectSpace),
    particle parameter offsets in the ML region.  Constraints removed by
    removeConstraints stay removed at lambda = 0 (as in openmm-ml).

    Errors are ValueError naming what to change: an ML atom index out of
    range, twice, or without an element; an ML atom whose element the model
    has no type for; a Topology and System of different sizes.

    Returns
    -------
    openmm.System
        A new System; the classical System is unchanged.
    """
    caller = "createMixedSystem"
    forceGroup = _checkArguments(topology, forceGroup, caller)
    if not isinstance(classicalSystem, openmm.System):
        raise TypeError(f"{caller}: classicalSystem must be an openmm.System, found {type(classicalSystem).__name__}")
    numParticles = classicalSystem.getNumParticles()
    if topology.getNumAtoms() != numParticles:
        raise ValueError(
            f"{caller}: the topology has {topology.getNumAtoms()} atoms but the classical System has "
            f"{numParticles} particles; they must describe the same atoms"
        )
    atoms = _atomIndexList(topology, mlAtoms, caller)
    _checkElements(topology, atoms, caller)
    for index in atoms:
        if classicalSystem.isVirtualSite(index):
            raise ValueError(f"{caller}: ML atom {index} is a virtual site in the classical System; leave it out")
    if periodic is None:
        periodic = classicalSystem.usesPeriodicBoundaryConditions()
    elif periodic and not classicalSystem.usesPeriodicBoundaryConditions():
        raise ValueError(
            f"{caller}: periodic=True but the classical System uses no periodic boundary conditions (its box "
            "would be OpenMM's default, not the Topology's); create the classical System with a periodic "
            "nonbonded method, or leave periodic unset"
        )
    graphForce = _makeGraphForce(topology, model, atoms, bool(periodic), forceGroup, properties, caller, typeMap)
    mlSet = set(atoms)
    # The nonbonded ML region: the ML atoms and the virtual sites built from them alone.
    region = sorted(mlSet | _mlVirtualSites(classicalSystem, mlSet))
    regionSet = set(region)

    for force in classicalSystem.getForces():
        if isinstance(force, openmm.NonbondedForce):
            _checkOffsets(force, regionSet, interpolate)
            if interpolate:
                _checkInterpolable(force)  # before any work

    system = _copyWithTerms(classicalSystem, mlSet, keepInside=False)

    ordered = region
    for force in system.getForces():
        if isinstance(force, openmm.NonbondedForce):
            for a in range(len(ordered)):
                for b in range(a):
                    force.addException(ordered[a], ordered[b], 0.0, 1.0, 0.0, True)
            if force.usesPeriodicBoundaryConditions():
                force.setExceptionsUsePeriodicBoundaryConditions(True)
        elif isinstance(force, openmm.CustomNonbondedForce):
            existing = set()
            for k in range(force.getNumExclusions()):
                i, j = force.getExclusionParticles(k)
                existing.add((min(i, j), max(i, j)))
            for a in range(len(ordered)):
                for b in range(a):
                    pair = (ordered[b], ordered[a])
                    if pair not in existing:
                        force.addExclusion(*pair)

    if removeConstraints:
        for k in reversed(range(system.getNumConstraints())):
            i, j, _ = system.getConstraintParameters(k)
            if i in mlSet and j in mlSet:
                system.removeConstraint(k)

    if not interpolate:
        system.addForce(graphForce)
        return system

    cv = openmm.CustomCVForce("")
    cv.setName("ML/MM interpolation")
    cv.addGlobalParameter(LAMBDA_INTERPOLATE, 1.0)
    cv.addCollectiveVariable("mlEnergy", graphForce)
    mmNames = []

    def addMM(force):
        name = f"mmInternal{len(mmNames) + 1}"
        cv.addCollectiveVariable(name, force)
        mmNames.append(name)

    for force, _ in _copyWithTerms(classicalSystem, mlSet, keepInside=True):
        addMM(force)
    for force in classicalSystem.getForces():
        if isinstance(force, openmm.NonbondedForce):
            for internal in _internalNonbonded(force, region):
                addMM(internal)
        elif isinstance(force, openmm.CustomNonbondedForce):
            addMM(_internalCustomNonbonded(force, region))
    mmSum = " + ".join(mmNames) if mmNames else "0"
    cv.setEnergyFunction(f"{LAMBDA_INTERPOLATE}*mlEnergy + (1 - {LAMBDA_INTERPOLATE})*({mmSum})")
    cv.setForceGroup(int(forceGroup))
    system.addForce(cv)
    return system


# --------------------------------------------------------------------------
# openmm-ml


_OPENMMML_CLASSES = []


def _makeOpenMMMLClasses():
    """The MLPotentialImplFactory and MLPotentialImpl subclasses (made once;
    needs openmmml, else ImportError)."""
    if _OPENMMML_CLASSES:
        return tuple(_OPENMMML_CLASSES)
    from openmmml.mlpotential import MLPotentialImpl, MLPotentialImplFactory

    class GraphPotentialImpl(MLPotentialImpl):
        """openmm-ml implementation of an openmm-graph model:
        ``MLPotential('openmm-graph', model=PATH_OR_BYTES, properties=None, typeMap=None)``.

        addForces adds one GraphForce over the given atoms (all when None),
        periodic when the Topology has a box or the System is periodic (the
        convention of openmm-ml's own potentials), or as ``periodic=`` says.
        The model is short-ranged (a cut-off), so getMLLongRange() is False.
        """

        def __init__(self, name, model=None, properties=None, typeMap=None):
            if model is None:
                raise ValueError(
                    "MLPotential('openmm-graph'): give the model, e.g. "
                    "MLPotential('openmm-graph', model='model.safetensors')"
                )
            self.name = name
            self.model = model
            self.properties = dict(properties or {})
            self.typeMap = typeMap  # checked by createGraphForce, as for createSystem

        def addForces(self, topology, system, atoms, forceGroup, periodic=None, **args):
            if periodic is None:
                periodic = topology.getPeriodicBoxVectors() is not None or system.usesPeriodicBoundaryConditions()
            indices = None if atoms is None else _atomIndexList(topology, atoms, "MLPotential('openmm-graph')")
            _checkElements(topology, range(topology.getNumAtoms()) if indices is None else indices,
                           "MLPotential('openmm-graph')")
            force = _makeGraphForce(topology, self.model, indices, bool(periodic), forceGroup,
                                    self.properties, "MLPotential('openmm-graph')", self.typeMap)
            system.addForce(force)

        def getMLLongRange(self):
            return False

    class GraphPotentialImplFactory(MLPotentialImplFactory):
        """Creates GraphPotentialImpl objects for openmm-ml's MLPotential."""

        def createImpl(self, name, **args):
            return GraphPotentialImpl(name, **args)

    _OPENMMML_CLASSES[:] = [GraphPotentialImplFactory, GraphPotentialImpl]
    return GraphPotentialImplFactory, GraphPotentialImpl


def __getattr__(name):
    # GraphPotentialImplFactory and GraphPotentialImpl exist only with openmm-ml;
    # made on first access, so that an "openmmml.potentials" entry point
    # "openmm-graph = openmmgraph.app:GraphPotentialImplFactory" can name them.
    if name in ("GraphPotentialImplFactory", "GraphPotentialImpl"):
        try:
            factory, impl = _makeOpenMMMLClasses()
        except ImportError as error:
            raise AttributeError(f"openmmgraph.app.{name} needs openmm-ml (openmmml): {error}") from None
        return factory if name == "GraphPotentialImplFactory" else impl
    raise AttributeError(f"module 'openmmgraph.app' has no attribute {name!r}")


def registerMLPotential(name=ML_POTENTIAL_NAME):
    """Register the graph potential with openmm-ml's MLPotential under ``name``
    (default ``'openmm-graph'``), so that ``MLPotential('openmm-graph',
    model=...)`` works.  Returns True when registered, False when openmm-ml is
    not installed (ImportError is caught; nothing else is).  Idempotent.  Done
    automatically when this module is imported, i.e. on first use of
    ``openmmgraph.createSystem``, ``createMixedSystem`` or
    ``registerMLPotential``; openmm-ml itself does not know about
    openmm-graph until then."""
    try:
        from openmmml.mlpotential import MLPotential
        factoryClass, _ = _makeOpenMMMLClasses()
    except ImportError:
        return False
    MLPotential.registerImplFactory(name, factoryClass())
    return True


registerMLPotential()
