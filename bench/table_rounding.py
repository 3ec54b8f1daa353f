#!/usr/bin/env python
"""The force error of the radial table lookups alone, evaluated in fp32 as the CUDA kernels do (CPU emulation).

    python bench/table_rounding.py [--models silicon,small,medium] [--n 512]

For each model: the forces of the PyTorch implementation in float64, and the same with the radial functions R and
dR/dr replaced by an emulation of the CUDA edge scans' fp32 arithmetic (GraphDeviceFunctions.cuh): the table's knots
rounded to float32, r rounded to float32, the Hermite coefficients (HermiteBasis) in float32, and each channel's sum
over the six knot values in the kernels' parity order with one rounding per fused multiply-add, in the plain form
(f_even c0 + ... + f_odd c3 + ..., the kernels before v47) and in the difference form (f_even + (f_odd - f_even) c3
+ ..., knotValue/knotSlope).
Everything else stays float64, so the relative force RMS error printed is the tables' share alone (bench/NOTES.md v47).
Models: "silicon" (examples/models/silicon-sw.safetensors, float32 tables, on its 512-atom diamond lattice jittered
by sw.jittered_diamond) and the benchmark grades (float64 tables) on the standard lattice of n particles.
"""

import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
F32 = np.float32


def fma(a, b, c):
    """a * b + c rounded once to float32 (the product exact in float64)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def hermite_coefficients(t, dr):
    """HermiteBasis's coefficients in float32, in table order (f, f', f'' of the first knot; f, f', f'' of the second):
    (value[6], slope[6]) for R and dR/dr."""
    t, dr = t.astype(F32), F32(dr)
    inv = F32(1.0) / dr
    t2 = t * t
    t3 = t2 * t
    t4 = t3 * t
    t5 = t4 * t
    d0 = F32(-30) * t2 + F32(60) * t3 - F32(30) * t4
    value = [F32(1) - F32(10) * t3 + F32(15) * t4 - F32(6) * t5, (t - F32(6) * t3 + F32(8) * t4 - F32(3) * t5) * dr,
             F32(0.5) * (t2 - F32(3) * t3 + F32(3) * t4 - t5) * dr * dr,
             F32(10) * t3 - F32(15) * t4 + F32(6) * t5, (F32(-4) * t3 + F32(7) * t4 - F32(3) * t5) * dr,
             F32(0.5) * (t3 - F32(2) * t4 + t5) * dr * dr]
    slope = [d0 * inv, F32(1) - F32(18) * t2 + F32(32) * t3 - F32(15) * t4,
             F32(0.5) * (F32(2) * t - F32(9) * t2 + F32(12) * t3 - F32(5) * t4) * dr,
             -d0 * inv, F32(-12) * t2 + F32(28) * t3 - F32(15) * t4, F32(0.5) * (F32(3) * t2 - F32(8) * t3 + F32(5) * t4) * dr]
    return value, slope


def parity_order(items, odd):
    """Table-order slots (first knot's three, then the second's) in the kernels' parity order: the even knot's three
    first.  items: six arrays whose first axis is the edge; odd [E]: the interval is odd (its first knot is odd)."""
    def pick(a, b):
        shape = (-1,) + (1,) * (np.ndim(a) - 1)
        return np.where(odd.reshape(shape), b, a)

    return [pick(items[s], items[(s + 3) % 6]) for s in range(6)]


def table_sums(k, value, slope, form):
    """R and dR/dr [E, L+1, M] from the six knot values k (float32, [E, L+1, M] each) and the coefficients, all in
    parity order, as the kernels sum them: "plain" (before v47: a multiply and five fma in slot order) or
    "difference" (knotValue, knotSlope)."""
    def b(x):
        return x[:, None, None]

    if form == "plain":
        R, dR = k[0] * b(value[0]), k[0] * b(slope[0])
        for s in range(1, 6):
            R, dR = fma(k[s], b(value[s]), R), fma(k[s], b(slope[s]), dR)
        return R, dR
    delta = k[3] - k[0]
    R, dR = fma(delta, b(value[3]), k[0]), delta * b(slope[3])
    for s in (1, 2, 4, 5):
        R, dR = fma(k[s], b(value[s]), R), fma(k[s], b(slope[s]), dR)
    return R, dR


class _Radial(torch.autograd.Function):
    """R in the forward pass, dR/dr (given) in the backward pass."""

    @staticmethod
    def forward(ctx, r, R, dR):
        ctx.save_for_backward(dR)
        return R

    @staticmethod
    def backward(ctx, gradient):
        (dR,) = ctx.saved_tensors
        return (gradient * dR).sum(dim=(1, 2)), None, None


def emulated_radial(knots, form):
    """A GraphModelTorch._radial whose R and dR/dr come from table_sums (knots [T, T, L+1, K+1, 3, M] in float32)."""
    def _radial(self, intervals_table, pair_types, r):
        K = self.radial_intervals
        rr = r.detach().numpy().astype(F32)
        q = np.clip(np.floor((rr - F32(self.radial_r0)) * F32(1 / self.radial_dr)), 0, K - 1).astype(np.int64)
        t = (rr - (F32(self.radial_r0) + q.astype(F32) * F32(self.radial_dr))) * F32(1 / self.radial_dr)
        odd = (q & 1).astype(bool)
        value, slope = (parity_order(c, odd) for c in hermite_coefficients(t, self.radial_dr))
        a, b = np.divmod(pair_types.numpy(), self.n_types)
        lower, upper = knots[a, b, :, q], knots[a, b, :, q + 1]  # [E, L+1, 3, M]
        k = parity_order([lower[:, :, 0], lower[:, :, 1], lower[:, :, 2], upper[:, :, 0], upper[:, :, 1], upper[:, :, 2]], odd)
        R, dR = table_sums(k, value, slope, form)
        out = _Radial.apply(r, torch.as_tensor(R.astype(np.float64)), torch.as_tensor(dR.astype(np.float64)))
        return torch.where((r < self.cutoff)[:, None, None], out, torch.zeros_like(out))

    return _radial


def model_and_system(name, n):
    """(ModelFile, positions nm, types, box nm) of a model name."""
    from openmmgraph import grades
    from openmmgraph.modelfile import read_model

    if name == "silicon":
        sys.path.insert(0, os.path.join(REPO, "examples", "silicon"))
        import sw

        lattice, edge = sw.jittered_diamond()
        return (read_model(os.path.join(REPO, "examples", "models", "silicon-sw.safetensors")), lattice * sw.ANGSTROM,
                np.zeros(len(lattice), dtype=np.int64), np.eye(3) * edge * sw.ANGSTROM)
    model = grades.make_model(name, seed=0)
    positions, types, box = grades.lattice_system(n, n_types=len(model.type_names), seed=0)
    return model, np.asarray(positions), np.asarray(types), np.asarray(box)


def table_force_errors(name, n=512):
    """{"plain": error, "difference": error}: the relative force RMS error of the emulated fp32 tables (the rest
    float64) against float64, and the table's dtype in the file."""
    from openmmgraph.torch_model import GraphModelTorch, neighbor_pairs

    model_file, positions, types, box = model_and_system(name, n)
    model = GraphModelTorch(model_file, torch.float64)
    positions, types, box = torch.as_tensor(positions), torch.as_tensor(types), torch.as_tensor(box)
    pairs = neighbor_pairs(positions, box, model.cutoff_nm)

    def forces():
        p = positions.clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(model.energy(p, types, box, pairs=pairs), p)
        return -gradient

    exact = forces()
    scale = float(torch.sqrt((exact ** 2).mean()))
    table = np.asarray(model_file.tensors["radial.table"])
    errors = {"table_dtype": str(table.dtype)}
    knots = table.astype(F32)
    for form in ("plain", "difference"):
        model._radial = emulated_radial(knots, form).__get__(model)
        errors[form] = float(torch.sqrt(((forces() - exact) ** 2).mean())) / scale
    return errors


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="silicon,small,medium", help="comma-separated, of silicon,small,medium,large")
    parser.add_argument("--n", type=int, default=512, help="particles of the grades' lattice (default 512)")
    args = parser.parse_args(argv)
    for name in args.models.split(","):
        errors = table_force_errors(name, args.n)
        print(f"{name:8s} ({errors['table_dtype']} tables): relative force RMS error of the fp32 tables alone: "
              f"plain sum {errors['plain']:.2e}, difference form {errors['difference']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
