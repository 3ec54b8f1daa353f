# Per-particle arrays in System order and OpenMM units, from the views.
#
#   platform        view        raw Julia array (DLPack.jl reverses dims)       result
#   Reference/CPU   FORCES      Float64 3×n, kJ/mol/nm, System order            copy
#                   POSITIONS   Float64 3×n, nm                                 copy
#   CUDA            FORCES      Int64 padded×3, 2^32 per kJ/mol/nm, sorted      out[:, order[s]+1] = raw[s, :] / 2^32
#                   POSITIONS   Float32/64 4×padded (x, y, z, q), sorted         out[:, order[s]+1] = raw[1:3, s]
#                   VELOCITIES  Float32/64 4×padded (vx, vy, vz, 1/m), sorted    likewise
#                   ATOM_ORDER  Int32 padded: System index (0-based) of slot s
#
# Every result is a new Float64 3×n array (column i = particle i of the System):
# an Array, or a CuArray when the context is on CUDA and CUDA.jl is loaded.  On
# the CUDA platform without CUDA.jl the helpers read host copies
# (OMMGRAPH_VIEW_COPY | OMMGRAPH_VIEW_HOST) and return Arrays.

"""Fixed-point scale of OpenMM's CUDA force buffer: 2^32 units per kJ/mol/nm."""
const FORCE_SCALE = 1.0 / 4294967296.0

# Host versions; the CUDA extension adds methods for CuArrays (one kernel each).
function _forces_to_system(raw::AbstractMatrix{Int64}, order::AbstractVector{Int32}, n::Int)
    out = Matrix{Float64}(undef, 3, n)
    for s in 1:n
        i = Int(order[s]) + 1
        1 <= i <= n || throw(ErrorException("ATOM_ORDER[$s] = $(i - 1) is not a System index below $n"))
        @inbounds for d in 1:3
            out[d, i] = raw[s, d] * FORCE_SCALE
        end
    end
    return out
end

function _xyz_to_system(raw::AbstractMatrix{<:AbstractFloat}, order::AbstractVector{Int32}, n::Int)
    out = Matrix{Float64}(undef, 3, n)
    for s in 1:n
        i = Int(order[s]) + 1
        1 <= i <= n || throw(ErrorException("ATOM_ORDER[$s] = $(i - 1) is not a System index below $n"))
        @inbounds for d in 1:3
            out[d, i] = raw[d, s]
        end
    end
    return out
end

function _check_padded(raw, dim::Int, n::Int, what)
    size(raw, dim) >= n || throw(DimensionMismatch(
        "the $what view has $(size(raw, dim)) rows, fewer than natoms = $n"))
    return nothing
end

function _host_platform_copy(c::OpenMMContext, v::View)
    raw = view(c, v)
    size(raw, 1) == 3 || throw(DimensionMismatch("the $(_viewname(v)) view is $(size(raw)), expected 3×n"))
    c.natoms === nothing || size(raw, 2) == c.natoms ||
        throw(DimensionMismatch("the $(_viewname(v)) view has $(size(raw, 2)) particles, the context $(c.natoms)"))
    return Matrix{Float64}(raw)   # a copy: the result does not alias the Context
end

# On the CUDA platform: (raw, order) as device views after the stream
# handshake (CUDA.jl loaded), or as host copies.
function _cuda_platform_views(c::OpenMMContext, v::View)
    if cuda_extension() === nothing
        return view(c, v; copy=true, host=true), view(c, ATOM_ORDER; copy=true, host=true)
    end
    synchronize(c)
    return view(c, v), view(c, ATOM_ORDER)
end

"""
    OpenMMGraph.forces(ctx) -> 3×n Float64 array

The forces OpenMM holds, in kJ/mol/nm, column `i` = particle `i` of the
System: a `CuArray` on the CUDA platform (with `using CUDA`), else an `Array`.
A new array (on CUDA the fixed-point buffer is converted and reordered by one
kernel on CUDA.jl's stream, after [`OpenMMGraph.synchronize`](@ref)).
The buffer holds the forces of the last evaluation: call
[`OpenMMGraph.compute_forces!`](@ref) (or `context.getState(getForces=True)`)
first for the forces at the current positions.
"""
function forces(ctx)
    c = _context(ctx)
    devtype, _ = view_device(c)
    devtype == kDLCUDA || return _host_platform_copy(c, FORCES)
    n = natoms(c)
    raw, order = _cuda_platform_views(c, FORCES)
    _check_padded(raw, 1, n, "forces")
    size(raw, 2) == 3 || throw(DimensionMismatch("the CUDA forces view is $(size(raw)), expected padded×3"))
    return _forces_to_system(raw, order, n)
end

"""
    OpenMMGraph.positions(ctx) -> 3×n Float64 array

Positions in nm, column `i` = particle `i` of the System (an `Array`, or a
`CuArray` on CUDA with CUDA.jl).  On the CUDA platform these are the
coordinates OpenMM computes with: for periodic systems OpenMM may have wrapped
them into the box (it keeps the image offsets on the host), so they can differ
from `State.getPositions()` by lattice vectors.  In mixed precision posq is
Float32 and the position correction is added, so the result is the full
position, as in Python's `openmmgraph.dlpack.positions`.
"""
function positions(ctx)
    c = _context(ctx)
    devtype, _ = view_device(c)
    devtype == kDLCUDA || return _host_platform_copy(c, POSITIONS)
    n = natoms(c)
    raw, order = _cuda_platform_views(c, POSITIONS)
    size(raw, 1) == 4 || throw(DimensionMismatch("the CUDA posq view is $(size(raw)), expected 4×padded"))
    _check_padded(raw, 2, n, "positions")
    result = _xyz_to_system(raw, order, n)
    eltype(raw) == Float32 || return result
    correction = try
        first(_cuda_platform_views(c, POSITION_CORRECTION))
    catch e
        # Single precision has no correction; anything else is an error.
        e isa OpenMMGraphError && e.status == OMMGRAPH_ERROR_UNAVAILABLE || rethrow()
        nothing
    end
    correction === nothing && return result
    size(correction, 1) == 4 || throw(DimensionMismatch(
        "the CUDA position correction view is $(size(correction)), expected 4×padded"))
    _check_padded(correction, 2, n, "position correction")
    return result .+ _xyz_to_system(correction, order, n)
end

"""
    OpenMMGraph.velocities(ctx) -> 3×n Float64 array

Velocities in nm/ps, column `i` = particle `i` of the System.
"""
function velocities(ctx)
    c = _context(ctx)
    devtype, _ = view_device(c)
    devtype == kDLCUDA || return _host_platform_copy(c, VELOCITIES)
    n = natoms(c)
    raw, order = _cuda_platform_views(c, VELOCITIES)
    size(raw, 1) == 4 || throw(DimensionMismatch("the CUDA velm view is $(size(raw)), expected 4×padded"))
    _check_padded(raw, 2, n, "velocities")
    return _xyz_to_system(raw, order, n)
end

"""
    OpenMMGraph.atom_order(ctx) -> Vector{Int}

For each of the first `n` slots of the platform's arrays, the (1-based) index
of the System particle stored there: the identity on Reference/CPU, OpenMM's
current sorting on CUDA (it changes when OpenMM reorders atoms).  A host copy.
"""
function atom_order(ctx)
    c = _context(ctx)
    order = view(c, ATOM_ORDER; copy=true, host=true)
    n = c.natoms === nothing ? length(order) : c.natoms
    length(order) >= n || throw(DimensionMismatch("ATOM_ORDER has $(length(order)) entries, fewer than natoms = $n"))
    return Int[Int(order[s]) + 1 for s in 1:n]
end

"""
    OpenMMGraph.box(ctx) -> 3×3 Matrix{Float64}

The periodic box vectors in nm, one per column: `box(ctx)[:, 1]` is `a`,
`[:, 2]` is `b`, `[:, 3]` is `c` (the C tensor is `[3][3]` with rows a, b, c;
DLPack.jl reverses the dimensions).  A host copy.
"""
function box(ctx)
    c = _context(ctx)
    b = view(c, BOX; copy=true, host=true)
    size(b) == (3, 3) || throw(DimensionMismatch("the box view is $(size(b)), expected 3×3"))
    return Matrix{Float64}(b)
end
