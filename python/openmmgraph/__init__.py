"""openmm-graph: a compressed graph potential (docs/model-format.md) for OpenMM.

The compiled parts (GraphForce and the platform plugins) are loaded on first
use, so that the pure-Python parts (the model file reader and writer, the
PyTorch implementation, the ``openmm-graph`` command line) start quickly and
work before any Context is made.

    import openmmgraph
    force = openmmgraph.GraphForce("model.safetensors")   # loads the plugins
"""

__version__ = "0.1.0"

# Names served by the compiled module (see _plugin.py), resolved on first access.
_COMPILED_NAMES = ("GraphForce", "pluginLoadFailures", "createGraphForce")


def __getattr__(name):
    if name in _COMPILED_NAMES:
        from . import _plugin

        value = getattr(_plugin, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'openmmgraph' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_COMPILED_NAMES))
