# Loaded when PythonCall.jl is: OpenMM Contexts made in Python (openmm.Context,
# openmm.app.Simulation) become OpenMMContexts, and the library is looked up
# in the embedded Python's openmmgraph package.
module OpenMMGraphPythonCallExt

using DLPack
using OpenMMGraph
using OpenMMGraph: OpenMMContext
using PythonCall

# A Simulation has .context; a SWIG-wrapped Context has .this, a SwigPyObject
# whose int() is the address of the C++ object (PyLong_FromVoidPtr).
function _python_context(obj::Py)
    ctx = pyhasattr(obj, "this") ? obj : pyhasattr(obj, "context") ? obj.context : obj
    openmm = pyimport("openmm")
    pyisinstance(ctx, openmm.Context) || throw(ArgumentError(
        "expected an openmm.Context or an openmm.app.Simulation, got a Python $(pytype(obj))"))
    return ctx
end

function OpenMMGraph.context_pointer(obj::Py)
    ctx = _python_context(obj)
    address = pyconvert(UInt, pybuiltins.int(ctx.this))
    address == 0 && throw(ArgumentError("the Python Context wraps a null pointer"))
    return Ptr{Cvoid}(address)
end

"""
    OpenMMContext(pycontext::Py)

From a Python `openmm.Context` (or `openmm.app.Simulation`): its
`OpenMM::Context*`, the Python Context as owner (every array made from it
keeps the Context alive) and the System's number of particles.
"""
function OpenMMGraph.OpenMMContext(obj::Py)
    ctx = _python_context(obj)
    n = pyconvert(Int, ctx.getSystem().getNumParticles())
    return OpenMMContext(OpenMMGraph.context_pointer(ctx); owner=ctx, natoms=n)
end

OpenMMGraph._context(obj::Py) = OpenMMContext(obj)

function OpenMMGraph.callback_force(f; periodic::Bool=false)
    dlpack = pyimport("openmmgraph.dlpack")
    wrapper = pyfunc(function (positions, forces, box, atom_order, stream)
        X = DLPack.from_dlpack(positions)
        F = pyis(forces, pybuiltins.None) ? nothing : DLPack.from_dlpack(forces)
        B = DLPack.from_dlpack(box)
        O = DLPack.from_dlpack(atom_order)
        return Float64(f(X, F, B, O, pyconvert(UInt, stream)))
    end)
    return dlpack.callback_force(wrapper; periodic=periodic)
end

function _python_libpath()
    try
        og = pyimport("openmmgraph")
        os = pyimport("os")
        path = os.path.join(os.path.dirname(og.__file__), "lib", OpenMMGraph.LIBNAME)
        return pyconvert(String, path)
    catch
        return nothing
    end
end

function __init__()
    OpenMMGraph._PYTHON_LIBPATH_HOOK[] = _python_libpath
    return nothing
end

end # module OpenMMGraphPythonCallExt
