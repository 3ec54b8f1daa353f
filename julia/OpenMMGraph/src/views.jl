"""
    OpenMMGraph.View

The views of the C API (`OMMGraphView`): `POSITIONS`, `POSITION_CORRECTION`,
`VELOCITIES`, `FORCES`, `ATOM_ORDER`, `BOX`.  Functions also accept the
symbols `:positions`, `:position_correction`, `:velocities`, `:forces`,
`:atom_order`, `:box`.
"""
@enum View::Cint begin
    POSITIONS = 0
    POSITION_CORRECTION = 1
    VELOCITIES = 2
    FORCES = 3
    ATOM_ORDER = 4
    BOX = 5
end

const VIEW_SYMBOLS = Dict{Symbol,View}(
    :positions => POSITIONS,
    :position_correction => POSITION_CORRECTION,
    :velocities => VELOCITIES,
    :forces => FORCES,
    :atom_order => ATOM_ORDER,
    :box => BOX,
)

_view(v::View) = v
_view(v::Integer) = View(v)   # throws ArgumentError for an unknown value
function _view(s::Symbol)
    v = get(VIEW_SYMBOLS, s, nothing)
    v === nothing && throw(ArgumentError("unknown view :$s; the views are " *
                                         join((":$k" for k in sort!(collect(keys(VIEW_SYMBOLS)))), ", ")))
    return v
end
_view(x) = throw(ArgumentError("a view is a Symbol or an OpenMMGraph.View, got $(repr(x))"))

_viewname(v::View) = Symbol(lowercase(string(v)))

# Julia before 1.9 has no package extensions, so no CUDA extension either.
cuda_extension() = isdefined(Base, :get_extension) ? Base.get_extension(@__MODULE__, :OpenMMGraphCUDAExt) : nothing

function _require_cuda(what)
    cuda_extension() === nothing && error(
        "the $what lives in CUDA device memory: `using CUDA` (CUDA.jl 5) first, " *
        "which loads OpenMMGraph's and DLPack's CUDA extensions")
    return nothing
end

# Methods added by the CUDA extension.
function _cuda_select_device end
function _cuda_stream end

# What an array is of, in messages: a view's name, or e.g. :borrowed.
_label(v::View) = _viewname(v)
_label(s::Symbol) = s

function _managed_from_versioned(ptr::Ptr{DLManagedTensorVersionedC}, v::View)
    mt = unsafe_load(ptr)
    if mt.version.major != 1
        mt.deleter == C_NULL || ccall(mt.deleter, Cvoid, (Ptr{DLManagedTensorVersionedC},), ptr)
        throw(OpenMMGraphError(:ommgraph_view_versioned, _viewname(v), OMMGRAPH_ERROR_RUNTIME,
                               "DLPack major version $(mt.version.major), expected 1"))
    end
    # DLPack.jl's finalizer calls `deleter(manager_ctx)`: the versioned
    # deleter with the versioned tensor, exactly once.
    return DLPack.DLManagedTensor(mt.dl_tensor, Ptr{Cvoid}(ptr), mt.deleter)
end

# DLPack.jl ignores byte_offset and handles only contiguous row- or
# column-major tensors; refuse anything else rather than misread memory.
function _check_layout(manager::DLPack.DLManagedTensor, v::Union{View,Symbol})
    t = manager.dl_tensor
    t.byte_offset == 0 || throw(OpenMMGraphError(:view, _label(v), OMMGRAPH_ERROR_RUNTIME,
                                                  "byte_offset $(t.byte_offset) != 0 is not supported"))
    t.strides == C_NULL && return nothing
    nd = Int(t.ndim)
    shape = [unsafe_load(t.shape, k) for k in 1:nd]
    strides = [unsafe_load(t.strides, k) for k in 1:nd]
    rowmajor = similar(shape)
    colmajor = similar(shape)
    acc = 1
    for k in nd:-1:1
        rowmajor[k] = acc
        acc *= shape[k]
    end
    acc = 1
    for k in 1:nd
        colmajor[k] = acc
        acc *= shape[k]
    end
    relevant = shape .> 1
    (strides[relevant] == rowmajor[relevant] || strides[relevant] == colmajor[relevant]) ||
        throw(OpenMMGraphError(:view, _label(v), OMMGRAPH_ERROR_RUNTIME,
                               "non-contiguous strides $strides for shape $shape"))
    return nothing
end

"""
    OpenMMGraph.view(ctx, v; versioned=false, readonly=false, copy=false, host=false)

A zero-copy array over view `v` (a `Symbol` such as `:forces`, or a
[`OpenMMGraph.View`](@ref)) of the Context's memory, in the platform's own
layout (see the header): an `Array` for host memory, a `CuArray` for CUDA
device memory (needs `using CUDA`).  DLPack.jl reverses the dimensions of
row-major tensors: a C `[n][3]` tensor is a `3×n` matrix, the CUDA forces
`int64 [3][padded]` a `padded×3` matrix, posq `[padded][4]` a `4×padded` matrix.

  - `versioned`: go through `ommgraph_view_versioned` (DLPack 1.1) instead of
    `ommgraph_view_legacy`; the array is the same.
  - `readonly`: sets OMMGRAPH_VIEW_READ_ONLY (Julia arrays cannot enforce it).
  - `copy`: an owned copy instead of a view; with `host=true` the copy is in
    host memory (an `Array`, also on the CUDA platform).

The array holds the tensor (whose deleter runs once the array is garbage) and
`ctx` (hence the object that keeps the Context alive).  It stays valid until
the Context is destroyed or reinitialised.  On CUDA, call
[`OpenMMGraph.synchronize`](@ref) before reading, and `CUDA.synchronize()`
after writing and before OpenMM runs again; rows are in OpenMM's sorted order
(see `:atom_order`), which changes when OpenMM reorders atoms.

Not exported (it would clash with `Base.view`): call it as `OpenMMGraph.view`.
"""
function view(ctx, v; versioned::Bool=false, readonly::Bool=false, copy::Bool=false, host::Bool=false)
    c = _context(ctx)
    vw = _view(v)
    host && !copy && throw(ArgumentError("host=true needs copy=true"))
    flags = (readonly ? VIEW_READ_ONLY : Cuint(0)) | (copy ? VIEW_COPY : Cuint(0)) | (host ? VIEW_HOST : Cuint(0))
    manager = if versioned
        _managed_from_versioned(view_versioned(c, vw, flags), vw)
    else
        DLPack.DLManagedTensor(view_legacy(c, vw, flags))
    end
    # From here on the deleter runs when `manager` is garbage collected.
    # DLPack.jl keeps the `foreign` object alive as long as the array: the
    # tensor (so its deleter, which frees copies, waits) and the context.
    return _wrap(manager, vw, (manager, c))
end

# The array over `manager`'s tensor, after the checks every array gets.
function _wrap(manager::DLPack.DLManagedTensor, what::Union{View,Symbol}, foreign)
    _check_layout(manager, what)
    devtype = Int32(DLPack.device_type(manager))
    if devtype == kDLCUDA
        _require_cuda("$(what isa View ? "view" : "tensor") :$(_label(what))")
        _cuda_select_device(manager.dl_tensor.ctx.device_id)
    elseif devtype != kDLCPU
        throw(OpenMMGraphError(:view, _label(what), OMMGRAPH_ERROR_PLATFORM,
                               "the tensor is on DLPack device type $devtype, which OpenMMGraph.jl cannot wrap"))
    end
    return unsafe_wrap(manager, foreign)
end

"""
    OpenMMGraph.borrowed_array(tensor::Ptr)

A zero-copy array over a borrowed `DLTensor*`: an argument of the C function
of a CallbackForce made by [`OpenMMGraph.callback_force_create`](@ref)
(positions, forces, box, atom order), in the platform's layout with the
dimensions reversed, as [`OpenMMGraph.view`](@ref) gives them: on
Reference/CPU `3×n` `Float64` positions and forces in System order.  The
memory is OpenMM's and is valid only during that call: do not keep the array
(or anything made from it without copying) after the function returns.
`nothing` for a null pointer (the forces of an evaluation of the energy
alone).  Julia arrays cannot be read-only: do not write into the positions.
"""
function borrowed_array(tensor::Ptr)
    tensor == C_NULL && return nothing
    manager = DLPack.DLManagedTensor(borrow_tensor(tensor))
    return _wrap(manager, :borrowed, manager)
end

"""
    OpenMMGraph.synchronize(ctx; stream=nothing)

The stream handshake before reading (or writing) a CUDA view: makes `stream`
wait for the work OpenMM has queued.  By default `stream` is CUDA.jl's stream
of the current task (`CUDA.stream()`), on which CUDA.jl runs the kernels of
that task.  A no-op on host platforms.
"""
function synchronize(ctx; stream::Union{Nothing,Integer}=nothing)
    c = _context(ctx)
    if stream === nothing
        devtype, devid = view_device(c)
        devtype == kDLCUDA || return nothing
        _require_cuda("context")
        _cuda_select_device(devid)
        stream = _cuda_stream()
    end
    synchronize_stream(c, stream)
    return nothing
end
