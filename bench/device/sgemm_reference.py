"""cuBLAS SGEMM (through PyTorch, TF32 off) at the shapes of the medium grade's dense layers at 100,800 particles.

The per-type products of one evaluation (4 types of 25,200 rows): the first layer forward (K 1536, N 240) and its
input-gradient backward (K 240, N 1536), and a hidden layer (K 240, N 240), each as one batched product over the
types.  Plain products without the plugin's epilogues (bias, activation, act'(z), residual, timestep), so a bound on
what a general fp32 GEMM reaches on this device for these shapes, beside the plugin's kernels in the same call.
Prints ms and TFLOP/s per product (median of 20 after 5 warm-ups, CUDA events).
"""

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
types, rows = 4, 25200
shapes = {"first forward": (1536, 240), "first backward": (240, 1536), "hidden": (240, 240)}
print(torch.cuda.get_device_name(), "torch", torch.__version__)
for name, (k, n) in shapes.items():
    a = torch.randn(types, rows, k, device="cuda")
    b = torch.randn(types, k, n, device="cuda")
    for _ in range(5):
        torch.bmm(a, b)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.bmm(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    print(f"{name:15} M {types}x{rows} K {k:5} N {n:5}: {ms:.4f} ms, {2 * types * rows * k * n / ms / 1e9:.1f} TFLOP/s")
