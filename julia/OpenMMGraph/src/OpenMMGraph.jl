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

end # module OpenMMGraph
