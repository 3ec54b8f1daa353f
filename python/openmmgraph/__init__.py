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
# Names served by the DLPack views (see dlpack.py; ctypes, loads its library on first call).
_DLPACK_NAMES = ("views",)
# Submodules imported on first access (openmmgraph.communicate loads the torch operators).
_LAZY_SUBMODULES = ("communicate", "simulated_domains")
# Names served by the OpenMM app integration (see app.py; loads the plugins).
_APP_NAMES = ("createSystem", "createMixedSystem", "registerMLPotential")


def __getattr__(name):
    if name in _COMPILED_NAMES:
        from . import _plugin

        value = getattr(_plugin, name)
        globals()[name] = value
        return value
    if name in _DLPACK_NAMES or name == "dlpack":
        import importlib

        # import_module, not `from . import dlpack`: the latter asks this
        # __getattr__ for "dlpack" again.
        dlpack = importlib.import_module(__name__ + ".dlpack")
        value = dlpack if name == "dlpack" else getattr(dlpack, name)
        globals()[name] = value
        return value
    if name in _LAZY_SUBMODULES:
        import importlib

        value = importlib.import_module(__name__ + "." + name)
        globals()[name] = value
        return value
    if name in _APP_NAMES or name == "app":
        import importlib

        app = importlib.import_module(__name__ + ".app")
        value = app if name == "app" else getattr(app, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'openmmgraph' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_COMPILED_NAMES) | set(_DLPACK_NAMES) | {"dlpack"} | set(_APP_NAMES) | {"app"} | set(_LAZY_SUBMODULES))
