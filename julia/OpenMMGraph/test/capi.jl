# Tests of OpenMMGraph.jl without Python: Contexts made through OpenMM's own C
# API (OpenMMCWrapper.h, exported by libOpenMM) on the Reference and CPU
# platforms, given to the package as raw `OpenMM_Context*` pointers, and a
# CallbackForce whose function is a Julia `@cfunction`.
#
# Needs only DLPack.jl and the C library (OPENMMGRAPH_LIB, or `python3 -c
# "import openmmgraph"`); libOpenMM is the one that library loaded.  Run alone
# (`julia --project=julia/OpenMMGraph julia/OpenMMGraph/test/capi.jl`) or from
# runtests.jl.
using Test
using Libdl
using DLPack
using OpenMMGraph
using OpenMMGraph: OpenMMContext, OpenMMGraphError

module CAPI

using Libdl
using OpenMMGraph

# OpenMM_Vec3, passed by value.
struct Vec3
    x::Cdouble
    y::Cdouble
    z::Cdouble
end

const STATE_POSITIONS = Cint(1)
const STATE_VELOCITIES = Cint(2)
const STATE_FORCES = Cint(4)
const STATE_ENERGY = Cint(8)

# OpenMM's C API through the package's own lookup (libOpenMM is a dependency
# of libOpenMMGraphDLPack).
fn(name::Symbol) = OpenMMGraph._fn(name)

# OpenMM's own plugin folder (the CPU and CUDA platforms), beside the libOpenMM
# that the package's library loaded.
function plugins_directory()
    OpenMMGraph.libpath()
    paths = filter(p -> basename(p) in ("libOpenMM.so", "libOpenMM.dylib") || startswith(basename(p), "libOpenMM.so."),
                   Libdl.dllist())
    isempty(paths) && error("libOpenMM is not loaded beside $(OpenMMGraph.libpath())")
    return joinpath(dirname(first(paths)), "plugins")
end

function load_plugins()
    list = ccall(fn(:OpenMM_Platform_loadPluginsFromDirectory), Ptr{Cvoid}, (Cstring,), plugins_directory())
    ccall(fn(:OpenMM_StringArray_destroy), Cvoid, (Ptr{Cvoid},), list)
    return nothing
end

function platform_names()
    n = ccall(fn(:OpenMM_Platform_getNumPlatforms), Cint, ())
    return [unsafe_string(ccall(fn(:OpenMM_Platform_getName), Cstring, (Ptr{Cvoid},),
                                ccall(fn(:OpenMM_Platform_getPlatform), Ptr{Cvoid}, (Cint,), i)))
            for i in 0:n-1]
end

function vec3array(m::AbstractMatrix)
    arr = ccall(fn(:OpenMM_Vec3Array_create), Ptr{Cvoid}, (Cint,), 0)
    for i in 1:size(m, 2)
        ccall(fn(:OpenMM_Vec3Array_append), Cvoid, (Ptr{Cvoid}, Vec3), arr, Vec3(m[1, i], m[2, i], m[3, i]))
    end
    return arr
end

function matrix(arr::Ptr{Cvoid})
    n = ccall(fn(:OpenMM_Vec3Array_getSize), Cint, (Ptr{Cvoid},), arr)
    out = Matrix{Float64}(undef, 3, n)
    for i in 1:n
        v = unsafe_load(ccall(fn(:OpenMM_Vec3Array_get), Ptr{Vec3}, (Ptr{Cvoid}, Cint), arr, i - 1))
        out[:, i] = [v.x, v.y, v.z]
    end
    return out
end

"""A System, integrator and Context of OpenMM's C API; `destroy` frees them."""
mutable struct Simulation
    system::Ptr{Cvoid}
    integrator::Ptr{Cvoid}
    integrator_kind::Symbol   # :VerletIntegrator or :CustomIntegrator
    context::Ptr{Cvoid}
    natoms::Int
end

# forces: OpenMM_Force* to add (the System owns them).  With energy_integrator
# the integrator is a CustomIntegrator whose one step computes the global
# "e" = energy, which OpenMM evaluates without forces.
# properties: the platform's property defaults for this Context (OpenMM's C
# API has no property map to pass), e.g. "Precision" => "mixed".
function Simulation(platform::AbstractString, masses::AbstractVector, forces::AbstractVector{Ptr{Cvoid}};
                    energy_integrator::Bool=false, properties=Dict{String,String}())
    system = ccall(fn(:OpenMM_System_create), Ptr{Cvoid}, ())
    for m in masses
        ccall(fn(:OpenMM_System_addParticle), Cint, (Ptr{Cvoid}, Cdouble), system, m)
    end
    for f in forces
        ccall(fn(:OpenMM_System_addForce), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), system, f)
    end
    kind = energy_integrator ? :CustomIntegrator : :VerletIntegrator
    integrator = ccall(fn(Symbol(:OpenMM_, kind, :_create)), Ptr{Cvoid}, (Cdouble,), 0.001)
    if energy_integrator
        ccall(fn(:OpenMM_CustomIntegrator_addGlobalVariable), Cint, (Ptr{Cvoid}, Cstring, Cdouble), integrator, "e", 0.0)
        ccall(fn(:OpenMM_CustomIntegrator_addComputeGlobal), Cint, (Ptr{Cvoid}, Cstring, Cstring), integrator, "e", "energy")
    end
    p = ccall(fn(:OpenMM_Platform_getPlatformByName), Ptr{Cvoid}, (Cstring,), platform)
    for (name, value) in properties
        ccall(fn(:OpenMM_Platform_setPropertyDefaultValue), Cvoid, (Ptr{Cvoid}, Cstring, Cstring), p, name, value)
    end
    context = ccall(fn(:OpenMM_Context_create_2), Ptr{Cvoid}, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}), system, integrator, p)
    return Simulation(system, integrator, kind, context, length(masses))
end

function property(s::Simulation, name::AbstractString)
    p = ccall(fn(:OpenMM_Context_getPlatform), Ptr{Cvoid}, (Ptr{Cvoid},), s.context)
    return unsafe_string(ccall(fn(:OpenMM_Platform_getPropertyValue), Cstring, (Ptr{Cvoid}, Ptr{Cvoid}, Cstring),
                               p, s.context, name))
end

step!(s::Simulation, n::Integer) = ccall(fn(Symbol(:OpenMM_, s.integrator_kind, :_step)), Cvoid, (Ptr{Cvoid}, Cint),
                                         s.integrator, n)

function global_variable(s::Simulation, name::AbstractString)
    s.integrator_kind === :CustomIntegrator || throw(ArgumentError("a $(s.integrator_kind) has no global variables"))
    return ccall(fn(:OpenMM_CustomIntegrator_getGlobalVariableByName), Cdouble, (Ptr{Cvoid}, Cstring), s.integrator, name)
end

function destroy(s::Simulation)
    ccall(fn(:OpenMM_Context_destroy), Cvoid, (Ptr{Cvoid},), s.context)
    ccall(fn(Symbol(:OpenMM_, s.integrator_kind, :_destroy)), Cvoid, (Ptr{Cvoid},), s.integrator)
    ccall(fn(:OpenMM_System_destroy), Cvoid, (Ptr{Cvoid},), s.system)
    s.context = s.integrator = s.system = C_NULL
    return nothing
end

function set_positions!(s::Simulation, x::AbstractMatrix)
    arr = vec3array(x)
    ccall(fn(:OpenMM_Context_setPositions), Cvoid, (Ptr{Cvoid}, Ptr{Cvoid}), s.context, arr)
    ccall(fn(:OpenMM_Vec3Array_destroy), Cvoid, (Ptr{Cvoid},), arr)
end

function set_velocities!(s::Simulation, v::AbstractMatrix)
    arr = vec3array(v)
    ccall(fn(:OpenMM_Context_setVelocities), Cvoid, (Ptr{Cvoid}, Ptr{Cvoid}), s.context, arr)
    ccall(fn(:OpenMM_Vec3Array_destroy), Cvoid, (Ptr{Cvoid},), arr)
end

"""(positions, forces, energy) of a State with everything, in System order."""
function state(s::Simulation)
    st = ccall(fn(:OpenMM_Context_getState), Ptr{Cvoid}, (Ptr{Cvoid}, Cint, Cint), s.context,
               STATE_POSITIONS | STATE_FORCES | STATE_ENERGY, 0)
    x = matrix(ccall(fn(:OpenMM_State_getPositions), Ptr{Cvoid}, (Ptr{Cvoid},), st))
    f = matrix(ccall(fn(:OpenMM_State_getForces), Ptr{Cvoid}, (Ptr{Cvoid},), st))
    e = ccall(fn(:OpenMM_State_getPotentialEnergy), Cdouble, (Ptr{Cvoid},), st)
    ccall(fn(:OpenMM_State_destroy), Cvoid, (Ptr{Cvoid},), st)
    return x, f, e
end

# E = k (x^2 + 2 y^2 + 3 z^2) per particle, as in runtests.jl.
function external_force(k::Real, n::Integer)
    force = ccall(fn(:OpenMM_CustomExternalForce_create), Ptr{Cvoid}, (Cstring,), "k*(x^2 + 2*y^2 + 3*z^2)")
    ccall(fn(:OpenMM_CustomExternalForce_addGlobalParameter), Cint, (Ptr{Cvoid}, Cstring, Cdouble), force, "k", k)
    params = ccall(fn(:OpenMM_DoubleArray_create), Ptr{Cvoid}, (Cint,), 0)
    for i in 0:n-1
        ccall(fn(:OpenMM_CustomExternalForce_addParticle), Cint, (Ptr{Cvoid}, Cint, Ptr{Cvoid}), force, i, params)
    end
    ccall(fn(:OpenMM_DoubleArray_destroy), Cvoid, (Ptr{Cvoid},), params)
    return force
end

# A NonbondedForce with a cut-off and no charges or well depths: no energy or
# force, but on the CUDA platform it makes OpenMM sort the atoms spatially.
function sorting_force(n::Integer)
    force = ccall(fn(:OpenMM_NonbondedForce_create), Ptr{Cvoid}, ())
    ccall(fn(:OpenMM_NonbondedForce_setNonbondedMethod), Cvoid, (Ptr{Cvoid}, Cint), force, 1)   # CutoffNonPeriodic
    ccall(fn(:OpenMM_NonbondedForce_setCutoffDistance), Cvoid, (Ptr{Cvoid}, Cdouble), force, 1.0)
    for _ in 1:n
        ccall(fn(:OpenMM_NonbondedForce_addParticle), Cint, (Ptr{Cvoid}, Cdouble, Cdouble, Cdouble), force, 0.0, 0.3, 0.0)
    end
    return force
end

end # module CAPI

const KC = 10.0
capi_expected_forces(pos) = vcat(-2KC .* pos[1:1, :], -4KC .* pos[2:2, :], -6KC .* pos[3:3, :])

function capi_settle_gc()
    for _ in 1:6
        GC.gc(true)
    end
end

# Views made inside a function are garbage once it returns (a local set to
# `nothing` may stay rooted in its frame), so the live-view counts can be
# checked after a collection.
function capi_two_force_views(ctx)
    f = OpenMMGraph.view(ctx, :forces)
    fv = OpenMMGraph.view(ctx, OpenMMGraph.FORCES; versioned=true, readonly=true)
    return (type=typeof(f), size=size(f), values=copy(f), same=(fv == f), live=OpenMMGraph.live_views(),
            live_of_context=OpenMMGraph.live_views(ctx), live_forces=OpenMMGraph.live_views(ctx, :forces),
            live_positions=OpenMMGraph.live_views(ctx, OpenMMGraph.POSITIONS))
end

function capi_write_through_view(sim, ctx, pos)
    x = OpenMMGraph.view(ctx, :positions)
    x == pos || return (by_openmm=NaN, by_view=NaN, unchanged=NaN)
    x[2, 3] = 0.625
    xs, _, _ = CAPI.state(sim)
    moved = copy(pos)
    moved[1, 4] = -0.375
    CAPI.set_positions!(sim, moved)
    return (by_openmm=xs[2, 3], by_view=x[1, 4], unchanged=x[2, 3])
end

function capi_write_to_copy(ctx)
    xc = OpenMMGraph.view(ctx, :positions; copy=true)
    xc[1, 1] = 9.0
    return nothing
end

# A CallbackForce function that fails (status 5).
failing_callback(userdata::Ptr{Cvoid}, positions::Ptr{Cvoid}, forces::Ptr{Cvoid}, box::Ptr{Cvoid}, order::Ptr{Cvoid},
                 stream::UInt, energy::Ptr{Cdouble}) = Cint(5)

# The CallbackForce's function: E = 1/2 k_s sum |r|^2, F = -k_s r, written
# into OpenMM's own force buffer through borrowed tensors.  `userdata` points
# to k_s.  The calls it saw are counted (with and without forces).
const CALLBACK_CALLS = Ref(0)
const CALLBACK_ENERGY_ONLY = Ref(0)

function spring_callback(userdata::Ptr{Cvoid}, positions::Ptr{Cvoid}, forces::Ptr{Cvoid}, box::Ptr{Cvoid},
                         order::Ptr{Cvoid}, stream::UInt, energy::Ptr{Cdouble})::Cint
    try
        ks = unsafe_load(Ptr{Cdouble}(userdata))
        x = OpenMMGraph.borrowed_array(positions)
        e = 0.0
        for i in eachindex(x)
            e += 0.5 * ks * x[i]^2
        end
        CALLBACK_CALLS[] += 1
        if forces == C_NULL
            CALLBACK_ENERGY_ONLY[] += 1
        else
            f = OpenMMGraph.borrowed_array(forces)
            size(f) == size(x) || return Cint(2)
            for i in eachindex(f)
                f[i] -= ks * x[i]
            end
        end
        unsafe_store!(energy, e)
        return Cint(0)
    catch err
        # The CallbackForce turns a nonzero status into an OpenMMException that
        # tells the user to look here.
        Base.showerror(stderr, err, catch_backtrace())
        return Cint(1)
    end
end

@testset "OpenMMGraph.jl through OpenMM's C API" begin
    CAPI.load_plugins()
    @test OpenMMGraph.load_plugins() isa Vector{String}   # openmm-graph's (the CUDA views need them)
    @test OpenMMGraph._reference_has_kernels()
    @test isempty(OpenMMGraph.load_plugins())             # once: a second call loads nothing again
    names = CAPI.platform_names()
    @test "Reference" in names

    for platform in ("Reference", "CPU")
        platform in names || continue
        @testset "$platform platform (C API Context)" begin
            n = 5
            sim = CAPI.Simulation(platform, [1.0 + i for i in 1:n], [CAPI.external_force(KC, n)])
            pos = reduce(hcat, [[0.1 * i, -0.2 * i + 0.05, 0.3 + 0.05 * i] for i in 0:n-1])
            vel = reduce(hcat, [[0.01 * i, 0.02, -0.03 * i] for i in 0:n-1])
            CAPI.set_positions!(sim, pos)
            CAPI.set_velocities!(sim, vel)
            _, fstate, _ = CAPI.state(sim)   # fills OpenMM's force buffer
            @test fstate ≈ capi_expected_forces(pos) rtol = 1e-6

            ctx = OpenMMContext(sim.context; natoms=n)
            @test ctx.natoms == n
            @test OpenMMGraph.view_device(ctx) == (Int32(1), Int32(0))
            @test OpenMMGraph.view_device(sim.context) == (Int32(1), Int32(0))   # a raw pointer works too
            OpenMMGraph.synchronize(ctx)

            capi_settle_gc()   # arrays of earlier test sets (a callback's borrowed ones too) are gone
            base = OpenMMGraph.live_views()
            made = capi_two_force_views(ctx)
            @test made.type == Matrix{Float64}
            @test made.size == (3, n)
            @test made.values == fstate
            @test made.same
            @test made.live == base + 2
            @test made.live_of_context == 2
            @test made.live_forces == 2
            @test made.live_positions == 0
            capi_settle_gc()
            @test OpenMMGraph.live_views() == base   # every deleter ran, once
            @test OpenMMGraph.live_views(ctx) == 0

            # Zero copy, both ways: what OpenMM's State reports is what the view holds.
            seen = capi_write_through_view(sim, ctx, pos)
            @test seen.by_openmm == 0.625
            @test seen.by_view == -0.375
            @test seen.unchanged == pos[2, 3]
            CAPI.set_positions!(sim, pos)
            _, fstate, _ = CAPI.state(sim)   # the buffer held the forces at the written positions
            capi_settle_gc()
            @test OpenMMGraph.live_views(ctx) == 0

            # A copy does not alias the Context.
            capi_write_to_copy(ctx)
            @test OpenMMGraph.positions(ctx) == pos

            @test OpenMMGraph.positions(ctx) == pos
            @test OpenMMGraph.velocities(ctx) == vel
            @test OpenMMGraph.forces(ctx) == fstate
            @test OpenMMGraph.atom_order(ctx) == collect(1:n)
            @test OpenMMGraph.atom_order(sim.context) == collect(1:n)   # without natoms: every slot
            @test OpenMMGraph.box(ctx) == 2.0 * [1 0 0; 0 1 0; 0 0 1]   # OpenMM's default box

            # The helpers copy: a force buffer refilled at new positions leaves an old result alone.
            old = OpenMMGraph.forces(ctx)
            newpos = pos .+ 0.1
            CAPI.set_positions!(sim, newpos)
            _, fnew, _ = CAPI.state(sim)
            @test OpenMMGraph.forces(ctx) == fnew
            @test fnew ≈ capi_expected_forces(newpos) rtol = 1e-6
            @test old == fstate

            # compute_forces! evaluates the forces at the current positions, as getState does, without its copy.
            CAPI.set_positions!(sim, pos)
            @test OpenMMGraph.forces(ctx) == fnew   # not evaluated at pos yet
            e = OpenMMGraph.compute_forces!(ctx)
            @test OpenMMGraph.forces(ctx) == fstate
            @test e == CAPI.state(sim)[3]
            @test OpenMMGraph.compute_forces!(sim.context; groups=1 << 5) == 0.0   # no force in group 5
            # Every 32-bit mask, whatever its integer type, is the same C int.
            @test OpenMMGraph.compute_forces!(ctx; groups=0xffffffff % UInt) == e
            @test OpenMMGraph.compute_forces!(ctx; groups=UInt32(1)) == e
            @test OpenMMGraph.compute_forces!(ctx; groups=UInt(1) << 31) == 0.0
            @test OpenMMGraph.compute_forces!(ctx; groups=Int64(-2)^31) == 0.0
            @test_throws ArgumentError OpenMMGraph.compute_forces!(ctx; groups=Int64(2)^33)
            @test_throws ArgumentError OpenMMGraph.compute_forces!(ctx; groups=true)
            # The forces alone: no energy, the buffer refilled all the same.
            CAPI.set_positions!(sim, newpos)
            CAPI.state(sim)
            CAPI.set_positions!(sim, pos)
            @test OpenMMGraph.compute_forces!(ctx; energy=false) === nothing
            @test OpenMMGraph.forces(ctx) == fstate

            # Errors of the C library name the function, the view and the status.
            err = try
                OpenMMGraph.view(ctx, :position_correction)
                nothing
            catch e
                e
            end
            @test err isa OpenMMGraphError
            @test err.func === :ommgraph_view_legacy
            @test err.view === :position_correction
            @test err.status == OpenMMGraph.OMMGRAPH_ERROR_UNAVAILABLE
            @test occursin("position_correction", sprint(showerror, err))
            @test !isempty(OpenMMGraph.last_error())
            @test_throws ArgumentError OpenMMGraph.view(ctx, :no_such_view)
            @test_throws ArgumentError OpenMMGraph.view(ctx, :forces; host=true)
            @test_throws ArgumentError OpenMMContext(C_NULL)
            @test_throws ArgumentError OpenMMContext(sim.context; natoms=-1)
            @test_throws ArgumentError OpenMMGraph.natoms(sim.context)
            capi_settle_gc()
            @test OpenMMGraph.live_views() == base

            CAPI.destroy(sim)
        end

        @testset "$platform platform: a CallbackForce with a Julia function" begin
            n = 4
            ks = Ref(3.0)
            cfun = @cfunction(spring_callback, Cint,
                              (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, UInt, Ptr{Cdouble}))
            GC.@preserve ks begin
                force = OpenMMGraph.callback_force_create(cfun, Ptr{Cvoid}(pointer_from_objref(ks)))
                @test force != C_NULL
                sim = CAPI.Simulation(platform, ones(n), [force, CAPI.external_force(KC, n)])
                pos = reduce(hcat, [[0.2 * i - 0.3, 0.1 * i, 0.25 - 0.1 * i] for i in 0:n-1])
                CAPI.set_positions!(sim, pos)
                calls = CALLBACK_CALLS[]
                _, f, e = CAPI.state(sim)
                @test CALLBACK_CALLS[] == calls + 1
                @test f ≈ capi_expected_forces(pos) .- ks[] .* pos rtol = 1e-12
                eext = sum(KC .* (pos[1, :] .^ 2 .+ 2 .* pos[2, :] .^ 2 .+ 3 .* pos[3, :] .^ 2))
                @test e ≈ eext + 0.5 * ks[] * sum(pos .^ 2) rtol = 1e-12
                ctx = OpenMMContext(sim.context; natoms=n)
                @test OpenMMGraph.forces(ctx) == f
                # A step runs the callback too.
                CAPI.step!(sim, 3)
                @test CALLBACK_CALLS[] >= calls + 4
                CAPI.destroy(sim)

                # A CustomIntegrator's "energy" is evaluated without forces: the function's forces are NULL.
                force = OpenMMGraph.callback_force_create(cfun, Ptr{Cvoid}(pointer_from_objref(ks)))
                sim = CAPI.Simulation(platform, ones(n), [force]; energy_integrator=true)
                CAPI.set_positions!(sim, pos)
                only = CALLBACK_ENERGY_ONLY[]
                CAPI.step!(sim, 1)
                @test CALLBACK_ENERGY_ONLY[] == only + 1
                @test CAPI.global_variable(sim, "e") ≈ 0.5 * ks[] * sum(pos .^ 2) rtol = 1e-12
                CAPI.destroy(sim)

                # A failing function: compute_forces! throws (OpenMM's own getState would end the process).
                failing = @cfunction(failing_callback, Cint,
                                     (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, UInt, Ptr{Cdouble}))
                sim = CAPI.Simulation(platform, ones(n), [OpenMMGraph.callback_force_create(failing)])
                CAPI.set_positions!(sim, pos)
                err = try
                    OpenMMGraph.compute_forces!(OpenMMContext(sim.context; natoms=n))
                    nothing
                catch e
                    e
                end
                @test err isa OpenMMGraphError
                @test err.func === :ommgraph_compute_forces
                @test err.status == OpenMMGraph.OMMGRAPH_ERROR_RUNTIME
                @test occursin("status 5", err.message)
                CAPI.destroy(sim)
            end
        end
    end

    for platform in ("Reference", "CPU")
        platform in names || continue
        @testset "$platform platform: callback_force_create with a Julia function" begin
            n = 4
            pos = reduce(hcat, [[0.2 * i - 0.3, 0.1 * i, 0.25 - 0.1 * i] for i in 0:n-1])
            seen = Dict(:calls => 0, :energy_only => 0, :fail => false)
            kspring = 2.5
            function spring(x, f, box, order, stream)
                seen[:fail] && error("failing on purpose")
                seen[:calls] += 1
                @assert size(x) == (3, n) && size(box) == (3, 3) && order == Int32.(0:n-1) && stream == 0
                if f === nothing
                    seen[:energy_only] += 1
                else
                    f .-= kspring .* x
                end
                return 0.5 * kspring * sum(abs2, x)
            end
            sim = CAPI.Simulation(platform, ones(n), [OpenMMGraph.callback_force_create(spring)])
            CAPI.set_positions!(sim, pos)
            ctx = OpenMMContext(sim.context; natoms=n)
            @test OpenMMGraph.compute_forces!(ctx) ≈ 0.5 * kspring * sum(abs2, pos) rtol = 1e-12
            @test OpenMMGraph.forces(ctx) ≈ -kspring .* pos rtol = 1e-12
            @test seen[:calls] == 1
            # What the function throws fails the evaluation, named; the Context keeps working.
            seen[:fail] = true
            err = try
                OpenMMGraph.compute_forces!(ctx)
                nothing
            catch e
                e
            end
            @test err isa OpenMMGraphError
            @test occursin("CallbackForce", err.message)
            seen[:fail] = false
            @test OpenMMGraph.compute_forces!(ctx) ≈ 0.5 * kspring * sum(abs2, pos) rtol = 1e-12
            CAPI.step!(sim, 2)
            @test seen[:calls] >= 4
            CAPI.destroy(sim)
            # The energy alone: forces === nothing.
            sim = CAPI.Simulation(platform, ones(n), [OpenMMGraph.callback_force_create(spring)]; energy_integrator=true)
            CAPI.set_positions!(sim, pos)
            CAPI.step!(sim, 1)
            @test seen[:energy_only] == 1
            @test CAPI.global_variable(sim, "e") ≈ 0.5 * kspring * sum(abs2, pos) rtol = 1e-12
            CAPI.destroy(sim)
        end
    end

    # The CUDA platform without CUDA.jl (or before Julia 1.9, without package
    # extensions): the raw views refuse to wrap device memory, and the helpers
    # read host copies, converting the fixed-point forces and the sorted,
    # padded rows into System order.
    if "CUDA" in names && OpenMMGraph.cuda_extension() === nothing
        for precision in ("single", "mixed", "double")
            @testset "CUDA platform ($precision) without CUDA.jl: host copies" begin
                n = 100   # padded by OpenMM
                # Scattered over a 3 nm cube (a fixed sequence), so that the spatial sort permutes them.
                pos = reduce(hcat, [[mod(0.618034 * i, 1.0), mod(0.414214 * i, 1.0), mod(0.732051 * i, 1.0)] .* 3.0
                                    for i in 1:n])
                vel = reduce(hcat, [[0.01 * i, -0.02 * mod(i, 7), 0.003 * i] for i in 1:n])
                masses = [1.0 + mod(i, 3) for i in 1:n]
                ref = CAPI.Simulation("Reference", masses, [CAPI.external_force(KC, n), CAPI.sorting_force(n)])
                gpu = CAPI.Simulation("CUDA", masses, [CAPI.external_force(KC, n), CAPI.sorting_force(n)];
                                      properties=Dict("Precision" => precision))
                @test CAPI.property(gpu, "Precision") == precision
                for sim in (ref, gpu)
                    CAPI.set_positions!(sim, pos)
                    CAPI.set_velocities!(sim, vel)
                end
                _, fref, _ = CAPI.state(ref)
                _, fgpu, _ = CAPI.state(gpu)
                ctx = OpenMMContext(gpu.context; natoms=n)
                @test OpenMMGraph.view_device(ctx)[1] == Int32(2)
                OpenMMGraph.synchronize(ctx; stream=0)

                err = try
                    OpenMMGraph.view(ctx, :forces)
                    nothing
                catch e
                    e
                end
                @test err isa ErrorException
                @test occursin("using CUDA", sprint(showerror, err))

                order = OpenMMGraph.atom_order(ctx)
                @test sort(order) == collect(1:n)
                @test order != collect(1:n)   # the sort moved atoms, so the helpers' reordering is exercised
                f = OpenMMGraph.forces(ctx)
                @test f isa Matrix{Float64}
                @test size(f) == (3, n)
                @test f ≈ fgpu rtol = 1e-12   # the State's forces: the same fixed-point buffer
                @test f ≈ fref rtol = 1e-5
                tol = precision == "single" ? 1e-6 : 1e-12
                @test isapprox(OpenMMGraph.positions(ctx), pos; atol=3 * tol)
                @test isapprox(OpenMMGraph.velocities(ctx), vel; atol=tol)
                @test OpenMMGraph.box(ctx) == 2.0 * [1 0 0; 0 1 0; 0 0 1]
                raw = OpenMMGraph.view(ctx, :forces; copy=true, host=true)
                @test raw isa Matrix{Int64}
                @test size(raw, 2) == 3 && size(raw, 1) >= n
                raw = nothing
                capi_settle_gc()
                @test OpenMMGraph.live_views(ctx) == 0
                CAPI.destroy(gpu)
                CAPI.destroy(ref)
            end
        end
    else
        @info "No OpenMM CUDA platform here, or CUDA.jl is loaded (runtests.jl's CUDA tests): the CUDA host-copy tests are skipped"
    end
end
