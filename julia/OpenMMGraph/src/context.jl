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
    OpenMMGraph.compute_forces!(ctx; groups=-1, energy=true) -> Float64 (or nothing)

Have OpenMM evaluate the forces of the force `groups` (a 32-bit mask, -1 for
all) at the current positions, so that the FORCES view holds them, and return
their potential energy in kJ/mol (`nothing` with `energy=false`, which spares
the energy's reduction and, on CUDA, its download): `ommgraph_compute_forces`,
what Python's `context.getState(getForces=True, getEnergy=True,
groups=groups)` computes without copying the forces out (on CUDA they stay on
the device).  After `integrator.step(n)` the force buffer holds the forces
OpenMM used last, which are not those of the final positions.  An error of the
evaluation (e.g. a CallbackForce whose function failed) throws an
`OpenMMGraphError`, where OpenMM's own C API (`OpenMM_Context_getState`) would
end the process.
"""
function compute_forces!(ctx; groups::Integer=-1, energy::Bool=true)
    c = _context(ctx)
    groups isa Bool && throw(ArgumentError("groups is a bit mask (an integer), found $groups"))
    -(Int64(2)^31) <= groups < Int64(2)^32 || throw(ArgumentError("the groups mask $groups does not fit 32 bits"))
    mask = reinterpret(Cint, UInt32(mod(groups, Int64(2)^32)))   # the same 32 bits as a C int
    value = Ref{Cdouble}(NaN)
    rc = GC.@preserve c value ccall(_fn(:ommgraph_compute_forces), Cint, (Ptr{Cvoid}, Cint, Ptr{Cdouble}), c.ptr, mask,
                                    energy ? Base.unsafe_convert(Ptr{Cdouble}, value) : Ptr{Cdouble}(C_NULL))
    _check(rc, :ommgraph_compute_forces)
    return energy ? value[] : nothing
end
