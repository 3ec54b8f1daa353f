"""openmm-graph: a compressed graph potential (docs/model-format.md) for OpenMM.

``import openmmgraph`` loads the compiled parts (GraphForce, its
serialization proxy and the platform plugins) into OpenMM when they are
installed, as ``import openmmtorch`` does: a System saved with a GraphForce
then reads back (``XmlSerializer.deserialize``, ``pickle``) and its Context
finds the kernels, with nothing else imported.  Where they are not installed
(a source checkout), the pure-Python parts (the model file reader and writer,
the PyTorch implementation, the ``openmm-graph`` command line) still work,
and the first use of a compiled name raises the ImportError.

    import openmmgraph
    force = openmmgraph.GraphForce("model.safetensors")
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


def _loadCompiledParts():
    try:
        from . import _plugin  # noqa: F401  (registers the serialization proxy and the kernels with OpenMM)
    except ImportError:
        pass  # not installed: raised again by __getattr__ on first use of a compiled name


_loadCompiledParts()
