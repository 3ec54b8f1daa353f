# Loading openmm-graph's OpenMM plugins (the GraphForce's kernels and the CUDA
# views) from a Julia program that builds its Contexts through OpenMM's C API,
# as Python's `import openmmgraph` does.  `_fn` finds OpenMM's C API functions
# through libOpenMMGraphDLPack's handle (libOpenMM is its dependency).

const _KERNEL_NAME = "CalcGraphForce"

function _string_array(array::Ptr{Cvoid})
    n = ccall(_fn(:OpenMM_StringArray_getSize), Cint, (Ptr{Cvoid},), array)
    return [unsafe_string(ccall(_fn(:OpenMM_StringArray_get), Cstring, (Ptr{Cvoid}, Cint), array, i)) for i in 0:n-1]
end

function _reference_has_kernels()
    reference = ccall(_fn(:OpenMM_Platform_getPlatformByName), Ptr{Cvoid}, (Cstring,), "Reference")
    names = ccall(_fn(:OpenMM_StringArray_create), Ptr{Cvoid}, (Cint,), 0)
    ccall(_fn(:OpenMM_StringArray_append), Cvoid, (Ptr{Cvoid}, Cstring), names, _KERNEL_NAME)
    supported = ccall(_fn(:OpenMM_Platform_supportsKernels), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), reference, names)
    ccall(_fn(:OpenMM_StringArray_destroy), Cvoid, (Ptr{Cvoid},), names)
    return supported != 0
end

"""
    OpenMMGraph.load_plugins() -> Vector{String}

Load openmm-graph's OpenMM plugins (the `plugins` folder beside
`libOpenMMGraphDLPack`: the GraphForce's kernels, and the CUDA platform's
views, which the C API needs for a CUDA Context) into OpenMM, unless OpenMM
has them already (Python's `import openmmgraph` loads them, and loading a
second copy would register the kernels twice).  Call it before creating a
Context through OpenMM's C API.  Returns OpenMM's messages about plugins it
could not load (typically the CUDA one on a machine without a CUDA driver;
not an error).
"""
function load_plugins()
    _reference_has_kernels() && return String[]
    folder = joinpath(dirname(libpath()), "plugins")
    isdir(folder) || error("openmm-graph's plugin folder $(repr(folder)) does not exist beside $(libpath())")
    loaded = ccall(_fn(:OpenMM_Platform_loadPluginsFromDirectory), Ptr{Cvoid}, (Cstring,), folder)
    ccall(_fn(:OpenMM_StringArray_destroy), Cvoid, (Ptr{Cvoid},), loaded)
    failures = ccall(_fn(:OpenMM_Platform_getPluginLoadFailures), Ptr{Cvoid}, ())
    messages = filter(m -> occursin("Graph", m), _string_array(failures))
    ccall(_fn(:OpenMM_StringArray_destroy), Cvoid, (Ptr{Cvoid},), failures)
    _reference_has_kernels() || error("the Reference platform has no $_KERNEL_NAME kernel after loading $(repr(folder)): " *
                                      join(messages, "; "))
    return messages
end
