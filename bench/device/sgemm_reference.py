"""cuBLAS GEMM (through PyTorch, TF32 off) at the shapes of the medium grade's dense layers at 100,800 particles.

The per-type products of one evaluation (4 types of 25,200 rows): the first layer forward (K 1536, N 240) and its
input-gradient backward (K 240, N 1536), and a hidden layer (K 240, N 240), each as one batched product over the
types.  Plain products without the plugin's epilogues (bias, activation, act'(z), residual, timestep), so a bound on
what a general GEMM reaches on this device for these shapes, beside the plugin's kernels in the same call.

Each product in float32 (SGEMM: the fp32 SIMT units) and in float64 (DGEMM: on Hopper the FP64 tensor cores, 67 TFLOP/s
on an H100 SXM or H200, the same peak as fp32 SIMT), each with its relative error, rounded to float32, against a
float64 product of the same float32 inputs (for DGEMM that error is the rounding alone): to say whether fp64
tensor-core products would be a faster and no less accurate way to form fp32 layers (bench/NOTES.md v50: slower).
Prints ms and TFLOP/s per product (median of 20 after 5 warm-ups, CUDA events).
"""

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
types, rows = 4, 25200
shapes = {"first forward": (1536, 240), "first backward": (240, 1536), "hidden": (240, 240)}


def median_ms(function):
    for _ in range(5):
        function()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


print(torch.cuda.get_device_name(), "torch", torch.__version__)
totals = {torch.float32: 0.0, torch.float64: 0.0}
counts = {"first forward": 1, "first backward": 1, "hidden": 4}  # one evaluation: two hidden layers, forward and backward
for name, (k, n) in shapes.items():
    a = torch.randn(types, rows, k, device="cuda")
    b = torch.randn(types, k, n, device="cuda") / k**0.5
    a64, b64 = a.double(), b.double()
    exact = torch.bmm(a64, b64)
    for dtype in (torch.float32, torch.float64):
        x, y = (a, b) if dtype == torch.float32 else (a64, b64)
        ms = median_ms(lambda: torch.bmm(x, y))
        error = ((torch.bmm(x, y).float().double() - exact).norm() / exact.norm()).item()
        totals[dtype] += counts[name] * ms
        label = "SGEMM" if dtype == torch.float32 else "DGEMM"
        print(f"{name:15} {label} M {types}x{rows} K {k:5} N {n:5}: {ms:.4f} ms, "
              f"{2 * types * rows * k * n / ms / 1e9:.1f} TFLOP/s, rel. error {error:.2e}")
    del a, b, a64, b64, exact
print(f"one evaluation's six products: SGEMM {totals[torch.float32]:.3f} ms, DGEMM {totals[torch.float64]:.3f} ms")
