# Tests of OpenMMGraph.jl against the real C library on Reference and CPU
# Contexts created through PythonCall (and on CUDA when a GPU is there).
#
# Needs: the Python package openmmgraph (with lib/libOpenMMGraphDLPack.so) and
# openmm importable by PythonCall's Python (e.g. JULIA_CONDAPKG_BACKEND=Null
# JULIA_PYTHONCALL_EXE=$(which python)), or OPENMMGRAPH_LIB set.
using Test
using OpenMMGraph
using OpenMMGraph: OpenMMContext, OpenMMGraphError
using PythonCall
using CUDA

const omm = pyimport("openmm")

# E = k (x^2 + 2 y^2 + 3 z^2) per particle, so F = (-2k x, -4k y, -6k z).
const K = 10.0

function make_context(platform::AbstractString, n::Integer)
    system = omm.System()
    for i in 1:n
        system.addParticle(1.0 + i)
    end
    force = omm.CustomExternalForce("k*(x^2 + 2*y^2 + 3*z^2)")
    force.addGlobalParameter("k", K)
    for i in 0:n-1
        force.addParticle(i, pylist())
    end
    system.addForce(force)
    integrator = omm.VerletIntegrator(0.001)
    ctx = omm.Context(system, integrator, omm.Platform.getPlatformByName(platform))
    pos = [(0.1 * i, -0.2 * i + 0.05, 0.3 + 0.05 * i) for i in 0:n-1]
    vel = [(0.01 * i, 0.02, -0.03 * i) for i in 0:n-1]
    ctx.setPositions(pylist([omm.Vec3(p...) for p in pos]))
    ctx.setVelocities(pylist([omm.Vec3(v...) for v in vel]))
    return ctx, (system, integrator), reduce(hcat, [collect(p) for p in pos]), reduce(hcat, [collect(v) for v in vel])
end

expected_forces(pos) = vcat(-2K .* pos[1:1, :], -4K .* pos[2:2, :], -6K .* pos[3:3, :])

function settle_gc()
    for _ in 1:6
        GC.gc(true)
    end
end

available(platform) = any(i -> pyconvert(String, omm.Platform.getPlatform(i).getName()) == platform,
                          0:pyconvert(Int, omm.Platform.getNumPlatforms())-1)

@testset "OpenMMGraph.jl" begin
    @testset "library" begin
        @test isfile(OpenMMGraph.libpath())
        @test OpenMMGraph.live_views() isa Int
        @test OpenMMGraph.last_error() isa String
    end

    @testset "context pointer" begin
        ctx, keep, _, _ = make_context("Reference", 4)
        p = OpenMMGraph.context_pointer(ctx)
        @test p == Ptr{Cvoid}(pyconvert(UInt, pybuiltins.int(ctx.this)))
        c = OpenMMContext(ctx)
        @test c.ptr == p
        @test c.natoms == 4
        @test c.owner === ctx || pyis(c.owner, ctx)
        @test_throws ArgumentError OpenMMContext(C_NULL)
        @test_throws ArgumentError OpenMMContext(pybuiltins.object())
        @test_throws ArgumentError OpenMMGraph.view(ctx, :no_such_view)
        @test_throws ArgumentError OpenMMGraph.view(ctx, :forces; host=true)
    end

    for platform in ("Reference", "CPU")
        available(platform) || continue
        @testset "$platform platform" begin
            n = 5
            ctx, keep, pos, vel = make_context(platform, n)
            ctx.getState(getForces=true)
            @test OpenMMGraph.view_device(ctx) == (Int32(1), Int32(0))
            OpenMMGraph.synchronize(ctx)   # a no-op on host platforms

            base = OpenMMGraph.live_views()
            f = OpenMMGraph.view(ctx, :forces)
            @test f isa Array{Float64,2}
            @test size(f) == (3, n)
            @test f ≈ expected_forces(pos) rtol = 1e-6
            @test OpenMMGraph.live_views() == base + 1
            fv = OpenMMGraph.view(ctx, OpenMMGraph.FORCES; versioned=true)
            @test fv == f
            @test OpenMMGraph.live_views() == base + 2
            @test OpenMMGraph.live_views(ctx) == 2
            @test OpenMMGraph.live_views(ctx, :forces) == 2
            @test OpenMMGraph.live_views(ctx, :positions) == 0
            @test_throws ArgumentError OpenMMGraph.live_views(ctx, :force)
            f = nothing
            fv = nothing
            settle_gc()
            @test OpenMMGraph.live_views() == base   # every deleter ran, once
            @test OpenMMGraph.live_views(ctx) == 0

            # Zero copy: a write through the view is what OpenMM sees.
            x = OpenMMGraph.view(ctx, :positions)
            @test size(x) == (3, n)
            @test x ≈ pos
            x[1, 2] = 0.75
            state_pos = ctx.getState(getPositions=true).getPositions(asNumpy=true)
            @test pyconvert(Float64, state_pos._value[1, 0]) ≈ 0.75
            x[1, 2] = pos[1, 2]
            x = nothing

            # A copy does not alias the Context.
            xc = OpenMMGraph.view(ctx, :positions; copy=true)
            xc[1, 1] = 9.0
            @test OpenMMGraph.positions(ctx)[1, 1] ≈ pos[1, 1]
            xc = nothing

            @test OpenMMGraph.forces(ctx) ≈ expected_forces(pos) rtol = 1e-6
            @test OpenMMGraph.positions(ctx) ≈ pos
            @test OpenMMGraph.velocities(ctx) ≈ vel
            @test OpenMMGraph.atom_order(ctx) == collect(1:n)
            @test OpenMMGraph.box(ctx) ≈ 2.0 * [1 0 0; 0 1 0; 0 0 1]   # OpenMM's default box

            # After moving the particles, compute_forces! refreshes the buffer.
            newpos = pos .+ 0.1
            ctx.setPositions(pylist([omm.Vec3(newpos[:, i]...) for i in 1:n]))
            e = OpenMMGraph.compute_forces!(ctx)
            @test OpenMMGraph.forces(ctx) ≈ expected_forces(newpos) rtol = 1e-6
            @test e ≈ pyconvert(Float64, ctx.getState(getEnergy=true).getPotentialEnergy()._value) rtol = 1e-12

            # (The C library's errors as OpenMMGraphErrors: capi.jl.)
            settle_gc()
            @test OpenMMGraph.live_views() == base

            # A raw pointer works too; natoms is then unknown but not needed here.
            raw = OpenMMContext(OpenMMGraph.context_pointer(ctx))
            @test size(OpenMMGraph.view(raw, :forces)) == (3, n)
        end
    end

    if available("CUDA") && CUDA.functional()
        @testset "CUDA platform" begin
            n = 100   # padded to 128 by OpenMM
            ref, keepref, pos, vel = make_context("Reference", n)
            ctx, keep, _, _ = make_context("CUDA", n)
            ref.getState(getForces=true)
            ctx.getState(getForces=true)
            devtype, devid = OpenMMGraph.view_device(ctx)
            @test devtype == Int32(2)
            OpenMMGraph.synchronize(ctx)
            raw = OpenMMGraph.view(ctx, :forces)
            @test raw isa CuArray{Int64,2}
            @test size(raw, 2) == 3 && size(raw, 1) >= n
            raw = nothing
            f = OpenMMGraph.forces(ctx)
            @test f isa CuArray{Float64,2}
            @test size(f) == (3, n)
            @test Array(f) ≈ OpenMMGraph.forces(ref) rtol = 1e-4
            @test Array(OpenMMGraph.positions(ctx)) ≈ pos rtol = 1e-6
            @test Array(OpenMMGraph.velocities(ctx)) ≈ vel rtol = 1e-6 atol = 1e-7
            @test sort(OpenMMGraph.atom_order(ctx)) == collect(1:n)
        end
    else
        @info "No CUDA GPU (or no OpenMM CUDA platform): CUDA tests skipped"
    end
end

# The same package through OpenMM's C API, without Python (its own test set; its
# CUDA host-copy checks skip themselves here, where CUDA.jl is loaded).
include("capi.jl")
