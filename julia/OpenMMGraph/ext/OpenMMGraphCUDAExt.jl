# Loaded when CUDA.jl is (a package extension, Julia >= 1.9).  DLPack.jl's own
# CUDA extension, loaded at the same time, turns kDLCUDA tensors into CuArrays;
# this one selects OpenMM's device, supplies CUDA.jl's stream for the handshake
# and converts the CUDA views to System order on the GPU.
module OpenMMGraphCUDAExt

using OpenMMGraph
using CUDA

# DLPack.jl wraps device pointers in the task's current CUDA.jl context, so
# that must be on OpenMM's device.
function OpenMMGraph._cuda_select_device(devid::Integer)
    CUDA.device!(Int(devid))
    return nothing
end

# The CUstream handle of the current task's stream, on which CUDA.jl launches
# that task's kernels and copies.
OpenMMGraph._cuda_stream() = UInt(CUDA.stream().handle)

function _forces_kernel!(out, raw, order, n, scale)
    s = (blockIdx().x - 1) * blockDim().x + threadIdx().x
    if s <= n
        @inbounds begin
            i = order[s] + 1
            out[1, i] = raw[s, 1] * scale
            out[2, i] = raw[s, 2] * scale
            out[3, i] = raw[s, 3] * scale
        end
    end
    return nothing
end

function _xyz_kernel!(out, raw, order, n)
    s = (blockIdx().x - 1) * blockDim().x + threadIdx().x
    if s <= n
        @inbounds begin
            i = order[s] + 1
            out[1, i] = Float64(raw[1, s])
            out[2, i] = Float64(raw[2, s])
            out[3, i] = Float64(raw[3, s])
        end
    end
    return nothing
end

const THREADS = 256

# raw: Int64 padded×3 fixed point (OpenMM's [3][padded], dims reversed);
# order: Int32 padded, the 0-based System index of each sorted slot.
function OpenMMGraph._forces_to_system(raw::CuArray{Int64,2}, order::CuArray{Int32,1}, n::Int)
    out = CuArray{Float64}(undef, 3, n)
    n == 0 && return out
    @cuda threads=THREADS blocks=cld(n, THREADS) _forces_kernel!(out, raw, order, n, OpenMMGraph.FORCE_SCALE)
    return out
end

# raw: posq / velm, 4×padded (x, y, z, w) in Float32 or Float64.
function OpenMMGraph._xyz_to_system(raw::CuArray{T,2}, order::CuArray{Int32,1}, n::Int) where {T<:AbstractFloat}
    out = CuArray{Float64}(undef, 3, n)
    n == 0 && return out
    @cuda threads=THREADS blocks=cld(n, THREADS) _xyz_kernel!(out, raw, order, n)
    return out
end

end # module OpenMMGraphCUDAExt
