"""cuBLAS GEMM (through PyTorch, TF32 off) at the shapes of the medium grade's dense layers at 100,800 particles.

The per-type products of one evaluation (4 types of 25,200 rows): the first layer forward (K 1536, N 240) and its
input-gradient backward (K 240, N 1536), and a hidden layer (K 240, N 240), each as one batched product over the
types.  Plain products without the plugin's epilogues (bias, activation, act'(z), residual, timestep), so a bound on
what a general GEMM reaches on this device for these shapes, beside the plugin's kernels in the same call.

Each product in float32 (SGEMM: the fp32 SIMT units) and in float64 (DGEMM: on Hopper the FP64 tensor cores, 67 TFLOP/s
on an H100 SXM or H200, the same peak as fp32 SIMT), each with its relative error, rounded to float32, against a
float64 product of the same float32 inputs (for DGEMM that error is the rounding alone): to say whether fp64
tensor-core products would be a faster and no less accurate way to form fp32 layers (bench/NOTES.md v50: slower).

Also, for a decision the plugin cannot take alone (issue 3 forbids TF32 in single and mixed precision): the same
products on the TF32 tensor cores, once (1xTF32, the forbidden kind: its error is TF32's) and split (3xTF32: each
operand x = hi + lo with hi = x rounded to TF32 and lo = x - hi, exact in fp32, and x y formed as hi_x hi_y +
hi_x lo_y + lo_x hi_y, three TF32 products accumulated in fp32, the lo_x lo_y term dropped), whose error is meant to
stay at fp32's.  3xTF32 is timed two ways: the three products alone (what a kernel that splits its operands in
registers as it loads them would pay) and with the splits formed by separate elementwise kernels, as here.
Prints ms and TFLOP/s per product (median of 20 after 5 warm-ups, CUDA events; TFLOP/s count the product's own
2 M N K, not the three products').
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


def tf32_split(x):
    """(hi, lo): hi = x rounded to the nearest TF32 value (10 mantissa bits, ties away from zero), lo = x - hi (exact)."""
    bits = x.view(torch.int32)
    hi = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return hi, x - hi


def tf32_products(pairs):
    """sum over (x, y) pairs of the batched products x y on the TF32 tensor cores, each added by cuBLAS's epilogue
    (beta 1) in fp32, in the order given."""
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        (x, y), rest = pairs[0], pairs[1:]
        total = torch.bmm(x, y)
        for x, y in rest:
            total = torch.baddbmm(total, x, y)
        return total
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def three_tf32(a_parts, b_parts):
    """x y from the splits of x and y: the two small cross terms first, then hi hi."""
    (a_hi, a_lo), (b_hi, b_lo) = a_parts, b_parts
    return tf32_products([(a_hi, b_lo), (a_lo, b_hi), (a_hi, b_hi)])


print(torch.cuda.get_device_name(), "torch", torch.__version__)
totals = {torch.float32: 0.0, torch.float64: 0.0, "1xTF32": 0.0, "3xTF32": 0.0, "3xTF32+split": 0.0}
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
    a_parts, b_parts = tf32_split(a), tf32_split(b)
    variants = {  # label: the product (for its error), and what is timed
        "1xTF32": (lambda: tf32_products([(a, b)]),) * 2,
        "3xTF32": (lambda: three_tf32(a_parts, b_parts),) * 2,
        "3xTF32+split": (lambda: three_tf32(a_parts, b_parts), lambda: three_tf32(tf32_split(a), tf32_split(b))),
    }
    for label, (result, timed) in variants.items():
        ms = median_ms(timed)
        error = ((result().double() - exact).norm() / exact.norm()).item()
        totals[label] += counts[name] * ms
        print(f"{name:15} {label} M {types}x{rows} K {k:5} N {n:5}: {ms:.4f} ms, "
              f"{2 * types * rows * k * n / ms / 1e9:.1f} TFLOP/s, rel. error {error:.2e}")
    del a, b, a64, b64, exact, a_parts, b_parts
print("one evaluation's six products: " + ", ".join(
    f"{'SGEMM' if key is torch.float32 else 'DGEMM' if key is torch.float64 else key} {value:.3f} ms"
    for key, value in totals.items()))
