# The forces of an OpenMM Context in Julia, without copies: the task of the
# Julia question that openmm-graph grew from, done with the OpenMMGraph
# package (julia/OpenMMGraph) through DLPack.jl.
#
# PythonCall and CUDA are weak dependencies of OpenMMGraph (package extensions),
# so run it in an environment of its own that holds all three (once):
#
#   julia --project=@openmmgraph-example -e 'using Pkg; Pkg.develop(path="julia/OpenMMGraph"); Pkg.add("PythonCall")'
#   (add "CUDA" too for the CUDA platform)
#
# then, with the Python that has openmm and openmmgraph installed:
#
#   JULIA_CONDAPKG_BACKEND=Null JULIA_PYTHONCALL_EXE=$(which python) julia --project=@openmmgraph-example examples/julia_forces.jl
#
# Uses the CUDA platform (and CUDA.jl) when present, else the CPU platform.  Not
# run in this project's CI (no Julia there): its syntax is checked by
# python/tests/test_julia_sources.py.
using PythonCall, OpenMMGraph

omm = pyimport("openmm")
unit = pyimport("openmm.unit")
pyimport("sys").path.insert(0, @__DIR__)                    # for examples/run_md.py
example = pyimport("importlib").import_module("run_md")

platforms = [pyconvert(String, omm.Platform.getPlatform(i).getName()) for i in 0:(pyconvert(Int, omm.Platform.getNumPlatforms()) - 1)]
use_cuda = "CUDA" in platforms
if use_cuda
    using CUDA
end

topology, system, positions = example.build_system(example.DEFAULT_MODEL, 512, 1)
integrator = omm.VerletIntegrator(0.001)
context = omm.Context(system, integrator, omm.Platform.getPlatformByName(use_cuda ? "CUDA" : "CPU"))
context.setPositions(positions)

ctx = OpenMMContext(context)        # the Context pointer, kept alive by the handle
OpenMMGraph.compute_forces!(ctx)    # forces at the current positions
F = OpenMMGraph.forces(ctx)         # 3×n Float64 in kJ/mol/nm, System order (a CuArray on CUDA)

# The same forces from OpenMM itself, for comparison.
state = context.getState(getForces=true)
expected = pyconvert(Matrix{Float64}, state.getForces(asNumpy=true).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))
err = maximum(abs.(Array(F)' .- expected)) / maximum(abs.(expected))
println("forces through DLPack match State.getForces() to ", err)
