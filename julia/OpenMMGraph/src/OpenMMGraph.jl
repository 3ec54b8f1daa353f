"""
    OpenMMGraph

Zero-copy views of an OpenMM `Context`'s state (positions, velocities, forces,
atom order, box) as Julia arrays, through the C API of openmm-graph
(`libOpenMMGraphDLPack`, see `wrappers/include/OpenMMGraphDLPack.h`) and
DLPack.jl.

  - [`OpenMMGraph.view`](@ref): the raw view, exactly the platform's layout
    (an `Array` on the Reference/CPU platforms, a `CuArray` on CUDA once
    `using CUDA` has loaded the CUDA extension).  DLPack.jl reverses the
    dimensions of row-major tensors, so a C `[n][3]` tensor is a `3×n` Julia
    matrix.
  - [`OpenMMGraph.forces`](@ref), [`OpenMMGraph.positions`](@ref),
    [`OpenMMGraph.velocities`](@ref), [`OpenMMGraph.box`](@ref),
    [`OpenMMGraph.atom_order`](@ref): new `3×n` arrays in System order and
    OpenMM units (kJ/mol/nm, nm, nm/ps).
  - [`OpenMMGraph.synchronize`](@ref): the stream handshake to do before
    reading a CUDA view.

A Context is given as an [`OpenMMContext`](@ref), a raw `Ptr{Cvoid}` to an
`OpenMM::Context`, or (with PythonCall loaded) a Python `openmm.Context` or
`openmm.app.Simulation`.
"""
module OpenMMGraph

using DLPack
using Libdl

export OpenMMContext, OpenMMGraphError

include("library.jl")
include("context.jl")
include("views.jl")
include("state.jl")
include("callback.jl")
include("plugins.jl")

function __init__()
    _init_callbacks()
    return nothing
end

"""
    OpenMMGraph.callback_force(f; periodic=false)

A Python `openmm.Force` (needs PythonCall) whose energy and forces come from
the Julia function `f(positions, forces, box, atom_order, stream)`, called
inside every force evaluation of the Context with zero-copy arrays of the
Context's own memory (through `openmmgraph.dlpack.callback_force` and
DLPack.jl, so the dimensions are reversed: host platforms give `3×n`
`Float64` positions and forces in System order; CUDA gives posq `4×padded`
and the fixed-point force buffer `padded×3` of `Int64`, 2^32 per kJ/mol/nm,
in sorted order, with `atom_order` mapping slots to System indices).
`forces` is `nothing` when OpenMM asks for the energy alone.  Add the bias
forces in place and return the energy in kJ/mol.  The arrays must not be kept
after the call.  Add the returned force to the Python System.
"""
function callback_force end

end # module OpenMMGraph
