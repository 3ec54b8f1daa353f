"""The compiled part of openmmgraph: loads the platform plugins (once), and
serves GraphForce, pluginLoadFailures() and createGraphForce().

Importing this module (which ``openmmgraph`` does on first access to one of
those names) loads ``openmmgraph/lib/plugins`` into OpenMM, unless OpenMM
already has the kernels (e.g. the plugins were installed into OpenMM's own
plugin folder, which ``import openmm`` loads).  A plugin that cannot be loaded
(typically the CUDA one on a machine without a CUDA driver) is not an error:
its message is kept in :func:`pluginLoadFailures`.
"""

import operator
import os
import warnings

import openmm

_KERNEL_NAME = "CalcGraphForce"
_PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "plugins")


def _referenceHasKernels():
    try:
        reference = openmm.Platform.getPlatformByName("Reference")
    except Exception:
        return False
    return reference.supportsKernels([_KERNEL_NAME])


def _loadPlugins():
    """Load the plugins once; return the messages of those that failed."""
    if _referenceHasKernels():
        # Already loaded (from OpenMM's plugin folder, or by the user): loading
        # a second copy would register the kernels twice, from two libraries.
        # Keep what OpenMM's own loading reported about our libraries.
        return [
            message for message in openmm.Platform.getPluginLoadFailures() if "Graph" in message
        ]
    if not os.path.isdir(_PLUGIN_DIR):
        raise ImportError(
            f"openmmgraph: the platform plugins are not installed (no folder {_PLUGIN_DIR}); "
            "install the package with `pip install .` from the openmm-graph sources"
        )
    openmm.Platform.loadPluginsFromDirectory(_PLUGIN_DIR)
    failures = list(openmm.Platform.getPluginLoadFailures())
    if not _referenceHasKernels():
        details = "; ".join(failures) if failures else "no failure was reported"
        warnings.warn(
            f"openmmgraph: the Reference platform has no {_KERNEL_NAME} kernel after loading "
            f"{_PLUGIN_DIR} ({details}); Contexts with a GraphForce cannot be created",
            RuntimeWarning,
            stacklevel=3,
        )
    return failures


_pluginLoadFailures = _loadPlugins()

from .graphforce import GraphForce  # noqa: E402  (needs openmm imported first)


def pluginLoadFailures():
    """The messages of the openmm-graph plugins that could not be loaded
    (e.g. the CUDA platform on a machine without a CUDA driver); empty when
    all were loaded."""
    return list(_pluginLoadFailures)


def _atomIndices(topology, atoms, caller="createGraphForce", argument="atoms"):
    """atoms (an iterable of atom indices or openmm.app Atom objects; None for
    all atoms) as a list of distinct indices checked against the topology.
    Errors name `caller` and the `argument`."""
    numAtoms = topology.getNumAtoms()
    if atoms is None:
        return list(range(numAtoms))
    if isinstance(atoms, (str, bytes)):
        raise TypeError(f"{caller}: {argument} must be an iterable of atom indices or openmm.app Atom objects")
    try:
        items = list(atoms)
    except TypeError:
        raise TypeError(
            f"{caller}: {argument} must be an iterable of atom indices or openmm.app Atom objects, "
            f"found {type(atoms).__name__}"
        ) from None
    indices = []
    seen = set()
    for atom in items:
        if isinstance(atom, bool):  # operator.index takes True as 1: a mask is not a list of indices
            raise TypeError(
                f"{caller}: {argument} must hold atom indices or openmm.app Atom objects, found {atom!r} "
                "(for a boolean mask pass numpy.flatnonzero(mask))"
            )
        try:
            index = operator.index(atom.index if hasattr(atom, "index") else atom)
        except TypeError:
            raise TypeError(
                f"{caller}: {argument} must hold atom indices or openmm.app Atom objects, found {atom!r}"
            ) from None
        if not 0 <= index < numAtoms:
            raise ValueError(
                f"{caller}: atom index {index} in {argument} is out of range; the topology has {numAtoms} atoms "
                f"(valid indices 0 to {numAtoms - 1})"
            )
        if index in seen:
            raise ValueError(f"{caller}: atom {index} is listed twice in {argument}")
        seen.add(index)
        indices.append(index)
    return indices


def _describeTypes(force):
    return ", ".join(
        f"{force.getTypeName(t)} (Z={force.getTypeAtomicNumber(t)})" for t in range(force.getNumTypes())
    )


def _checkedTypeMap(force, typeMap, byName):
    """typeMap as {element symbol: model type index}, every entry checked against byName (type name -> index)."""
    if typeMap is None:
        return {}
    if not isinstance(typeMap, dict):
        raise TypeError(f"createGraphForce: typeMap must be a dict of element symbol -> model type name, found "
                        f"{type(typeMap).__name__}")
    result = {}
    for symbol, name in typeMap.items():
        if not isinstance(symbol, str) or not isinstance(name, str):
            raise TypeError(f"createGraphForce: typeMap must map element symbols to model type names (strings), "
                            f"found {symbol!r}: {name!r}")
        if name not in byName:
            raise ValueError(f"createGraphForce: typeMap maps {symbol!r} to {name!r}, which is not a type of the "
                             f"model; its types are {_describeTypes(force)}")
        result[symbol] = byName[name]
    return result


def _typeOfAtom(force, atom, byName, byNumber, typeMap=None):
    element = atom.element
    residue = atom.residue
    where = f"atom {atom.index} '{atom.name}' of residue {residue.name} {residue.id}"
    if element is None:
        raise ValueError(
            f"createGraphForce: {where} has no element (a virtual site or extra particle?); "
            "leave it out with the atoms argument"
        )
    if typeMap and element.symbol in typeMap:
        return typeMap[element.symbol]
    if element.symbol in byName:
        return byName[element.symbol]
    candidates = byNumber.get(element.atomic_number, [])
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        names = ", ".join(force.getTypeName(t) for t in candidates)
        raise ValueError(
            f"createGraphForce: {where} is element {element.symbol} (Z={element.atomic_number}), "
            f"which matches several model types by atomic number ({names}) and none by name"
        )
    raise ValueError(
        f"createGraphForce: {where} is element {element.symbol} (Z={element.atomic_number}), "
        f"which the model has no type for; the model's types are {_describeTypes(force)} (for types that are "
        "not element symbols, map elements to them with typeMap)"
    )


def _forceFromModel(model):
    if isinstance(model, (bytes, bytearray, memoryview)):
        return GraphForce.fromModelBytes(model)
    if isinstance(model, (str, os.PathLike)):
        return GraphForce(model)
    from .modelfile import ModelFile

    if isinstance(model, ModelFile):
        return GraphForce.fromModelBytes(model.to_bytes())
    raise TypeError(
        "createGraphForce: model must be a path (str or os.PathLike), the bytes of a model file "
        f"or an openmmgraph.modelfile.ModelFile; found {type(model).__name__}"
    )


def createGraphForce(topology, model, atoms=None, periodic=None, typeMap=None):
    """Create a GraphForce for the atoms of an OpenMM Topology, typed by element.

    Parameters
    ----------
    topology : openmm.app.Topology
        The topology of the System the force will be added to (atom i of the
        topology is particle i of the System).
    model : str, os.PathLike, bytes or openmmgraph.modelfile.ModelFile
        The model: a path to a model file, the bytes of one, or a ModelFile.
    atoms : iterable of int or openmm.app.Atom, optional
        The atoms the model applies to (default: all of them), in the order
        they are added to the force.
    periodic : bool, optional
        Whether the model sees the periodic box; by default, whether the
        topology has periodic box vectors.
    typeMap : dict, optional
        Element symbol -> model type name, for models whose type names are
        not element symbols (DeePMD-kit's ``"type_map": ["OW", "HW"]``:
        ``typeMap={"O": "OW", "H": "HW"}``).  It comes first; elements it
        does not name are matched as below.  A name that is not a type of
        the model is a ValueError.

    Each atom's element is matched to a model type by symbol (the type name,
    e.g. "O"), else by atomic number.  An atom whose element the model has no
    type for raises ValueError naming the atom, its residue and the element.

    Returns
    -------
    GraphForce
        A new force, not yet added to any System.
    """
    force = _forceFromModel(model)
    byName = {}
    byNumber = {}
    for t in range(force.getNumTypes()):
        byName.setdefault(force.getTypeName(t), t)
        number = force.getTypeAtomicNumber(t)
        if number > 0:
            byNumber.setdefault(number, []).append(t)
    byMap = _checkedTypeMap(force, typeMap, byName)
    allAtoms = list(topology.atoms())
    for index in _atomIndices(topology, atoms):
        atom = allAtoms[index]
        force.addParticle(index, _typeOfAtom(force, atom, byName, byNumber, byMap))
    if periodic is None:
        periodic = topology.getPeriodicBoxVectors() is not None
    force.setUsesPeriodicBoundaryConditions(bool(periodic))
    return force


__all__ = ["GraphForce", "pluginLoadFailures", "createGraphForce"]
