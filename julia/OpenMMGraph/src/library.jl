# Locating libOpenMMGraphDLPack and the ccall wrappers of every function of
# wrappers/include/OpenMMGraphDLPack.h.  The library is found at run time, so
# every ccall takes its function pointer from `_fn(:name)` (dlsym on the handle
# that `libpath()` opened once): a pointer works in every Julia version, where a
# `(name, libpath())` tuple needs the run-time library specifications of newer
# ones (Julia 1.5 refuses it: "first argument not a pointer or valid constant
# expression").

const LIBNAME = Sys.isapple() ? "libOpenMMGraphDLPack.dylib" :
                Sys.iswindows() ? "OpenMMGraphDLPack.dll" : "libOpenMMGraphDLPack.so"

const PYTHON_QUERY = "import openmmgraph, os; " *
    "print(os.path.join(os.path.dirname(openmmgraph.__file__), 'lib', '$LIBNAME'))"

const _LIBPATH = Ref{String}("")
const _LIBHANDLE = Ref{Ptr{Cvoid}}(C_NULL)

# Set by the PythonCall extension: asks the embedded interpreter, the one whose
# openmm created the Contexts, where its openmmgraph package is.
const _PYTHON_LIBPATH_HOOK = Ref{Any}(nothing)

function _find_library()
    env = get(ENV, "OPENMMGRAPH_LIB", "")
    if !isempty(env)
        isfile(env) || error("OPENMMGRAPH_LIB=$(repr(env)) is not a file")
        return env
    end
    hook = _PYTHON_LIBPATH_HOOK[]
    if hook !== nothing
        path = hook()
        path isa AbstractString && isfile(path) && return String(path)
    end
    python = get(ENV, "OPENMMGRAPH_PYTHON", Sys.iswindows() ? "python" : "python3")
    path = try
        String(strip(read(Cmd([python, "-c", PYTHON_QUERY]), String)))
    catch err
        error("cannot locate $LIBNAME: set OPENMMGRAPH_LIB to its path, or make " *
              "`$python -c \"import openmmgraph\"` work (OPENMMGRAPH_PYTHON names the " *
              "interpreter); asking Python failed: $(sprint(showerror, err))")
    end
    isfile(path) || error("openmmgraph (asked through $python) names $(repr(path)), which is not a file; " *
                          "set OPENMMGRAPH_LIB to the library's path")
    return path
end

"""
    OpenMMGraph.libpath() -> String

The path of `libOpenMMGraphDLPack`, found once and cached: the environment
variable `OPENMMGRAPH_LIB`; else, with PythonCall loaded, the `openmmgraph`
package of the embedded Python; else `python3 -c "import openmmgraph ..."`
(`OPENMMGRAPH_PYTHON` overrides the interpreter).  The library is opened with
`RTLD_GLOBAL` so that it shares libOpenMM with the Python `openmm` module.
"""
function libpath()
    if isempty(_LIBPATH[])
        path = _find_library()
        _LIBHANDLE[] = Libdl.dlopen(path, Libdl.RTLD_NOW | Libdl.RTLD_GLOBAL)   # fails early, with the loader's message
        _LIBPATH[] = path
    end
    return _LIBPATH[]
end

# The address of the C function `name` of the library, or of OpenMM's C API
# (libOpenMM is its dependency): a lookup in the loaded libraries' symbol
# tables, cheap beside the call it serves.
function _fn(name::Symbol)
    libpath()
    return Libdl.dlsym(_LIBHANDLE[], name)
end

## Status codes and flags (OMMGraphStatus, OMMGRAPH_VIEW_*)

const OMMGRAPH_OK = 0
const OMMGRAPH_ERROR_ARGUMENT = 1
const OMMGRAPH_ERROR_UNAVAILABLE = 2
const OMMGRAPH_ERROR_PLATFORM = 3
const OMMGRAPH_ERROR_RUNTIME = 4

const STATUS_NAMES = Dict(
    OMMGRAPH_ERROR_ARGUMENT => "OMMGRAPH_ERROR_ARGUMENT",
    OMMGRAPH_ERROR_UNAVAILABLE => "OMMGRAPH_ERROR_UNAVAILABLE",
    OMMGRAPH_ERROR_PLATFORM => "OMMGRAPH_ERROR_PLATFORM",
    OMMGRAPH_ERROR_RUNTIME => "OMMGRAPH_ERROR_RUNTIME",
)

const VIEW_READ_ONLY = Cuint(1)
const VIEW_COPY = Cuint(2)
const VIEW_HOST = Cuint(4)

# DLDeviceType values of the DLPack ABI.
const kDLCPU = Int32(1)
const kDLCUDA = Int32(2)

"""
    OpenMMGraphError(func, view, status, message)

A call of the C API failed: `func` is the C function, `view` the view asked
for (a `Symbol`, or `nothing`), `status` the `OMMGraphStatus` and `message`
what `ommgraph_last_error()` said.
"""
struct OpenMMGraphError <: Exception
    func::Symbol
    view::Union{Nothing,Symbol}
    status::Int
    message::String
end

function Base.showerror(io::IO, e::OpenMMGraphError)
    print(io, "OpenMMGraphError: ", e.func)
    e.view === nothing || print(io, " (view :", e.view, ")")
    print(io, " failed with ", get(STATUS_NAMES, e.status, "status $(e.status)"))
    isempty(e.message) || print(io, ": ", e.message)
end

## Raw wrappers.  `ctx` is anything `_context` accepts; the OpenMMContext is
## preserved across each call so that its owner keeps the Context alive.

"""
    OpenMMGraph.last_error() -> String

`ommgraph_last_error()`: the message of the last failed call on this thread ("" if none).
"""
function last_error()
    p = ccall(_fn(:ommgraph_last_error), Ptr{UInt8}, ())
    return p == C_NULL ? "" : unsafe_string(p)
end

"""
    OpenMMGraph.live_views() -> Int

`ommgraph_live_views()`: the number of views whose deleter has not run yet.
"""
live_views() = Int(ccall(_fn(:ommgraph_live_views), Int64, ()))

"""
    OpenMMGraph.live_views(ctx, view=nothing) -> Int

`ommgraph_context_live_views`: the number of arrays of `ctx` (of one
view, e.g. `:forces`, or of every view with `nothing`) whose deleter has not run
yet and whose memory the Context owns: zero-copy views, and on CUDA device
copies (host copies are not counted).
`Context.reinitialize()` frees that memory, so check that this is 0 (after
`GC.gc()`) before reinitializing a Context from Julia; the Python binding
refuses the reinitialize itself only for the views Python exported.
"""
function live_views(ctx, view=nothing)
    c = _context(ctx)
    v = view === nothing ? Cint(-1) : Cint(_view(view))
    count = Ref{Int64}(0)
    rc = GC.@preserve c ccall(_fn(:ommgraph_context_live_views), Cint,
                              (Ptr{Cvoid}, Cint, Ref{Int64}), c.ptr, v, count)
    _check(rc, :ommgraph_context_live_views, view === nothing ? nothing : _viewname(_view(view)))
    return Int(count[])
end

function _check(rc::Integer, func::Symbol, view::Union{Nothing,Symbol}=nothing)
    rc == OMMGRAPH_OK && return nothing
    # The message is per thread; nothing between the failed call and this one yields.
    throw(OpenMMGraphError(func, view, Int(rc), last_error()))
end

"""
    OpenMMGraph.view_device(ctx) -> (device_type::Int32, device_id::Int32)

`ommgraph_view_device`: `(2, ordinal)` (kDLCUDA) on the CUDA platform, `(1, 0)`
(kDLCPU) on Reference and CPU.
"""
function view_device(ctx)
    c = _context(ctx)
    devtype = Ref{Int32}(0)
    devid = Ref{Int32}(0)
    rc = GC.@preserve c ccall(_fn(:ommgraph_view_device), Cint,
                              (Ptr{Cvoid}, Ref{Int32}, Ref{Int32}), c.ptr, devtype, devid)
    _check(rc, :ommgraph_view_device)
    return (devtype[], devid[])
end

"""
    OpenMMGraph.synchronize_stream(ctx, stream::Integer)

`ommgraph_synchronize_stream`: make the CUDA stream `stream` (a `CUstream`
handle; 0 is the legacy default stream, 2 the per-thread one) wait for the work
OpenMM has queued so far.  A no-op on host platforms.  See
[`OpenMMGraph.synchronize`](@ref) for the form that uses CUDA.jl's stream.
"""
function synchronize_stream(ctx, stream::Integer)
    c = _context(ctx)
    rc = GC.@preserve c ccall(_fn(:ommgraph_synchronize_stream), Cint,
                              (Ptr{Cvoid}, UInt), c.ptr, UInt(stream))
    _check(rc, :ommgraph_synchronize_stream)
    return nothing
end

"""
    OpenMMGraph.view_legacy(ctx, view, flags=0) -> Ptr{DLPack.DLManagedTensor}

`ommgraph_view_legacy` with no owner: the caller owns the tensor and must call
its deleter exactly once (`DLPack.DLManagedTensor(ptr)` arranges that through a
finalizer).  Prefer [`OpenMMGraph.view`](@ref).
"""
function view_legacy(ctx, view, flags::Integer=0)
    c = _context(ctx)
    v = _view(view)
    out = Ref{Ptr{DLPack.DLManagedTensor}}(C_NULL)
    rc = GC.@preserve c ccall(_fn(:ommgraph_view_legacy), Cint,
                              (Ptr{Cvoid}, Cint, Cuint, Ptr{Cvoid}, Ptr{Cvoid}, Ref{Ptr{DLPack.DLManagedTensor}}),
                              c.ptr, Cint(v), Cuint(flags), C_NULL, C_NULL, out)
    _check(rc, :ommgraph_view_legacy, _viewname(v))
    out[] == C_NULL && throw(OpenMMGraphError(:ommgraph_view_legacy, _viewname(v), OMMGRAPH_ERROR_RUNTIME,
                                              "returned success and a null tensor"))
    return out[]
end

# The C layout of DLManagedTensorVersioned (DLPack >= 1.0).  DLPack.jl 0.3 has a
# mutable struct of that name but no way to wrap one; the versioned view is
# handed to DLPack.jl as a DLManagedTensor whose deleter is the versioned one.
struct DLPackVersionC
    major::Cuint
    minor::Cuint
end

struct DLManagedTensorVersionedC
    version::DLPackVersionC
    manager_ctx::Ptr{Cvoid}
    deleter::Ptr{Cvoid}
    flags::UInt64
    dl_tensor::DLPack.DLTensor
end

const DLPACK_FLAG_BITMASK_READ_ONLY = UInt64(1)
const DLPACK_FLAG_BITMASK_IS_COPIED = UInt64(2)

"""
    OpenMMGraph.view_versioned(ctx, view, flags=0) -> Ptr{OpenMMGraph.DLManagedTensorVersionedC}

`ommgraph_view_versioned` with no owner (DLPack 1.1 tensor); the caller must
call its deleter exactly once.  Prefer [`OpenMMGraph.view`](@ref) with
`versioned=true`.
"""
function view_versioned(ctx, view, flags::Integer=0)
    c = _context(ctx)
    v = _view(view)
    out = Ref{Ptr{DLManagedTensorVersionedC}}(C_NULL)
    rc = GC.@preserve c ccall(_fn(:ommgraph_view_versioned), Cint,
                              (Ptr{Cvoid}, Cint, Cuint, Ptr{Cvoid}, Ptr{Cvoid}, Ref{Ptr{DLManagedTensorVersionedC}}),
                              c.ptr, Cint(v), Cuint(flags), C_NULL, C_NULL, out)
    _check(rc, :ommgraph_view_versioned, _viewname(v))
    out[] == C_NULL && throw(OpenMMGraphError(:ommgraph_view_versioned, _viewname(v), OMMGRAPH_ERROR_RUNTIME,
                                              "returned success and a null tensor"))
    return out[]
end

"""
    OpenMMGraph.callback_force_create(function_pointer::Ptr{Cvoid}, userdata::Ptr{Cvoid}=C_NULL) -> Ptr{Cvoid}

`ommgraph_callback_force_create`: a new `GraphPlugin::CallbackForce` (an
`OpenMM::Force*`, for C++ or OpenMM's C API, which then owns it) calling the C
function `function_pointer` (from `@cfunction`, with the signature of
`OMMGraphForceCallback`).  Low level: the function must catch everything and
return a nonzero status instead of throwing (a Julia exception must not unwind
through OpenMM's C++ frames); `callback_force_create(f::Function)` does that for
a Julia function, and from Python Systems use [`OpenMMGraph.callback_force`](@ref).
"""
function callback_force_create(function_pointer::Ptr{Cvoid}, userdata::Ptr{Cvoid}=C_NULL)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    rc = ccall(_fn(:ommgraph_callback_force_create), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ref{Ptr{Cvoid}}),
               function_pointer, userdata, out)
    _check(rc, :ommgraph_callback_force_create)
    return out[]
end

"""
    OpenMMGraph.borrow_tensor(tensor::Ptr; versioned=false, readonly=false)
        -> Ptr{DLPack.DLManagedTensor} (or Ptr{OpenMMGraph.DLManagedTensorVersionedC} with versioned=true)

`ommgraph_borrow_tensor`: wrap a borrowed `DLTensor*` (an argument of a
callback) as a managed tensor whose deleter frees only the wrapper, e.g. for
`unsafe_wrap(DLPack.DLManagedTensor(ptr), owner)`.  The data stays valid only
as long as the borrowed tensor does.  [`OpenMMGraph.borrowed_array`](@ref)
does all of it.
"""
function borrow_tensor(tensor::Ptr; versioned::Bool=false, readonly::Bool=false)
    tensor == C_NULL && throw(ArgumentError("borrow_tensor: a null DLTensor pointer (a CallbackForce's forces are " *
                                            "NULL in an evaluation of the energy alone)"))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    rc = ccall(_fn(:ommgraph_borrow_tensor), Cint, (Ptr{Cvoid}, Cint, Cuint, Ref{Ptr{Cvoid}}),
               Ptr{Cvoid}(tensor), versioned ? 1 : 0, readonly ? VIEW_READ_ONLY : Cuint(0), out)
    _check(rc, :ommgraph_borrow_tensor)
    return versioned ? Ptr{DLManagedTensorVersionedC}(out[]) : Ptr{DLPack.DLManagedTensor}(out[])
end
