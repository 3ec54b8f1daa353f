# A CallbackForce whose function is a Julia function, for Systems built
# through OpenMM's C API (or C++): one C trampoline for every such force, the
# Julia functions in a registry keyed by the force's userdata.  The trampoline
# catches everything the function throws: a Julia exception must never unwind
# through OpenMM's C++ frames (that skips their cleanup and leaves the Context
# refusing every later evaluation, and ends the process at the next step).

# id => function.  A force's function stays here for the life of the process:
# the System owns the force and nothing reports when it is destroyed.
const _CALLBACKS = Dict{UInt,Any}()
const _CALLBACKS_LOCK = ReentrantLock()
const _CALLBACK_COUNT = Ref{UInt}(0)
const _TRAMPOLINE = Ref{Ptr{Cvoid}}(C_NULL)   # set by __init__ (a @cfunction's address is not precompiled)

function _callback_trampoline(userdata::Ptr{Cvoid}, positions::Ptr{Cvoid}, forces::Ptr{Cvoid}, box::Ptr{Cvoid},
                              order::Ptr{Cvoid}, stream::UInt, energy::Ptr{Cdouble})::Cint
    try
        f = lock(() -> _CALLBACKS[UInt(userdata)], _CALLBACKS_LOCK)
        value = f(borrowed_array(positions), borrowed_array(forces), borrowed_array(box), borrowed_array(order), stream)
        unsafe_store!(energy, Float64(value))
        return Cint(0)
    catch err
        try
            print(stderr, "OpenMMGraph: the CallbackForce's Julia function failed: ")
            showerror(stderr, err, catch_backtrace())
            println(stderr)
        catch
        end
        return Cint(1)   # the evaluation throws an OpenMMException pointing here
    end
end

function _init_callbacks()
    _TRAMPOLINE[] = @cfunction(_callback_trampoline, Cint,
                               (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, UInt, Ptr{Cdouble}))
    return nothing
end

"""
    OpenMMGraph.callback_force_create(f::Function) -> Ptr{Cvoid}

A new `GraphPlugin::CallbackForce` (an `OpenMM::Force*` for a System built
through OpenMM's C API or C++, which then owns it) that calls
`f(positions, forces, box, atom_order, stream)` inside every force
evaluation and takes its return value as the energy in kJ/mol.  The arguments
are [`OpenMMGraph.borrowed_array`](@ref)s of OpenMM's own memory, valid during
the call only (on Reference/CPU: `3×n` `Float64` positions and forces in
System order, in nm and kJ/mol/nm); add the forces in place; `forces` is
`nothing` when OpenMM asks for the energy alone.  Whatever `f` throws is
printed to `stderr` and makes the evaluation fail (an `OpenMMGraphError` from
[`OpenMMGraph.compute_forces!`](@ref)); the Context stays usable.  `f` is kept
for the life of the process.
"""
function callback_force_create(f::Function)
    id = lock(_CALLBACKS_LOCK) do
        _CALLBACK_COUNT[] += 1
        _CALLBACKS[_CALLBACK_COUNT[]] = f
        _CALLBACK_COUNT[]
    end
    return callback_force_create(_TRAMPOLINE[], Ptr{Cvoid}(id))
end
