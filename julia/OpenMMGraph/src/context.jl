"""
    OpenMMContext(ptr; owner=nothing, natoms=nothing)

An `OpenMM::Context*` together with what keeps that Context alive.

  - `ptr`: a `Ptr{Cvoid}` or an integer address (from C++: `&context`; from
    Python: `int(context.this)`; from OpenMM's C API: the `OpenMM_Context*`).
  - `owner`: any Julia object that keeps the Context alive (with PythonCall:
    the Python `Context`).  Every array made from this context holds the
    `OpenMMContext`, hence the owner, for as long as the array lives.  With
    `owner=nothing` keeping the Context alive is up to you.
  - `natoms`: the number of particles of the System.  Needed only by the
    System-order helpers on the CUDA platform, whose views are padded.

With PythonCall loaded, `OpenMMContext(pycontext)` fills in all three from an
`openmm.Context` (or an `openmm.app.Simulation`).
"""
struct OpenMMContext
    ptr::Ptr{Cvoid}
    owner::Any
    natoms::Union{Nothing,Int}
end

function OpenMMContext(ptr::Ptr; owner=nothing, natoms::Union{Nothing,Integer}=nothing)
    ptr == C_NULL && throw(ArgumentError("null OpenMM Context pointer"))
    natoms === nothing || natoms >= 0 || throw(ArgumentError("natoms must be >= 0, got $natoms"))
    return OpenMMContext(Ptr{Cvoid}(ptr), owner, natoms === nothing ? nothing : Int(natoms))
end

OpenMMContext(address::Integer; kwargs...) = OpenMMContext(Ptr{Cvoid}(UInt(address)); kwargs...)

function Base.show(io::IO, c::OpenMMContext)
    print(io, "OpenMMContext(", c.ptr)
    c.natoms === nothing || print(io, ", natoms=", c.natoms)
    c.owner === nothing || print(io, ", owner::", typeof(c.owner))
    print(io, ")")
end

# What every function accepts as a context.  The PythonCall extension adds a
# method for Python objects.
_context(c::OpenMMContext) = c
_context(p::Ptr) = OpenMMContext(p)
_context(address::Integer) = OpenMMContext(address)
function _context(x)
    throw(ArgumentError("expected an OpenMMContext, a Ptr{Cvoid} to an OpenMM::Context or " *
                        "(after `using PythonCall`) a Python openmm.Context; got a $(typeof(x))"))
end

"""
    OpenMMGraph.context_pointer(pyobj) -> Ptr{Cvoid}

The `OpenMM::Context*` of a Python `openmm.Context` or `openmm.app.Simulation`,
i.e. `int(context.this)` (the address SWIG wraps).  Defined by the PythonCall
extension: `using PythonCall` first.
"""
function context_pointer end

"""
    OpenMMGraph.natoms(ctx) -> Int

The number of particles recorded in the context (see [`OpenMMContext`](@ref)).
"""
function natoms(ctx)
    c = _context(ctx)
    c.natoms === nothing && throw(ArgumentError(
        "the number of particles of this context is unknown: create it with " *
        "OpenMMContext(ptr; natoms=system.getNumParticles()), or from a Python Context with PythonCall"))
    return c.natoms
end

"""
    OpenMMGraph.compute_forces!(ctx)

Have OpenMM evaluate the forces at the current positions (Python:
`context.getState(getForces=True)`), so that the FORCES view holds them.
After `integrator.step(n)` the force buffer holds the forces OpenMM used last,
which are not those of the final positions.  Needs a context made from a
Python Context (PythonCall).
"""
function compute_forces!(ctx)
    c = _context(ctx)
    _compute_forces!(c.owner)
    return c
end

_compute_forces!(owner) = throw(ArgumentError(
    "compute_forces! needs an OpenMMContext made from a Python openmm.Context (using PythonCall); " *
    "otherwise evaluate the forces yourself (e.g. context.getState(getForces=True) in Python)"))
