"""Clean-room float64 NumPy oracle for the openmm-graph model format, version 1.

Written only from docs/model-format.md (the contract), by a reviewer who had
not read the project's implementation (bench/NOTES.md v65); test_spec_oracle.py
checks the platforms against it.  Self-contained: needs NumPy only.  Keep it
independent: change it only where the contract changes, never to follow the
implementation.

Public API
----------
write_model(path, meta, tensors)        write a safetensors model file
read_model(path_or_bytes) -> model      parse a model file (own reader)
energy_forces(model, positions_nm, types, box_nm_or_None)
                                        -> (E kJ/mol, F kJ/mol/nm) NumPy arrays
random_model(seed, **options) -> (meta, tensors)
random_positions(seed, model, ...)      a random configuration for a model
finite_difference_check(...)            forces vs central differences
"""

import json
import math
import struct

import numpy as np

LENGTH_UNITS = {"nm": 1.0, "angstrom": 0.1, "bohr": 0.052917721090}
ENERGY_UNITS = {"kJ/mol": 1.0, "kcal/mol": 4.184, "eV": 96.48533212331,
                "hartree": 2625.4996394799}

SQ3 = math.sqrt(3.0)


# ---------------------------------------------------------------------------
# safetensors writer / reader
# ---------------------------------------------------------------------------

def _meta_str(v):
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    return json.dumps(v)


def model_bytes(meta, tensors, header_extra=None, raw_header=None):
    """Bytes of a safetensors file.  meta: dict of metadata (non-strings are
    converted: bool -> true/false, float -> repr, list -> JSON).  tensors:
    dict name -> NumPy array (float64 or float32 kept as given)."""
    header = {"__metadata__": {k: _meta_str(v) for k, v in meta.items()}}
    chunks = []
    off = 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if arr.dtype == np.float64:
            dt, a = "F64", arr.astype("<f8")
        elif arr.dtype == np.float32:
            dt, a = "F32", arr.astype("<f4")
        else:
            raise TypeError("tensor %s: dtype %s not float32/float64" % (name, arr.dtype))
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    if header_extra:
        header.update(header_extra)
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    pad = (-len(h)) % 8
    h = h + b" " * pad
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)


def write_model(path, meta, tensors):
    """Write a model file (safetensors) from metadata and NumPy tensors."""
    with open(path, "wb") as f:
        f.write(model_bytes(meta, tensors))


def read_model(src):
    """Parse a model file (path or bytes) into {'meta': {...}, 'tensors': {...}}
    with every tensor converted to float64."""
    if isinstance(src, (bytes, bytearray)):
        data = bytes(src)
    else:
        with open(src, "rb") as f:
            data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode())
    base = 8 + n
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, d in header.items():
        dt = {"F64": "<f8", "F32": "<f4"}[d["dtype"]]
        s, e = d["data_offsets"]
        a = np.frombuffer(data[base + s:base + e], dtype=dt).reshape(d["shape"])
        tensors[name] = a.astype(np.float64)
    return {"meta": meta, "tensors": tensors}


def _as_model(model):
    if isinstance(model, dict) and "meta" in model:
        meta = {k: _meta_str(v) for k, v in model["meta"].items()}
        tensors = {k: np.asarray(v, dtype=np.float64) for k, v in model["tensors"].items()}
        return {"meta": meta, "tensors": tensors}
    if isinstance(model, tuple) and len(model) == 2:
        return _as_model({"meta": model[0], "tensors": model[1]})
    return read_model(model)


# ---------------------------------------------------------------------------
# model pieces
# ---------------------------------------------------------------------------

class _Net:
    """A network of section 7 (hidden layers + linear output)."""

    def __init__(self, tensors, prefix, residual, act):
        self.layers = []
        for n, res in enumerate(residual):
            W = tensors["%s.%d.weight" % (prefix, n)]
            b = tensors["%s.%d.bias" % (prefix, n)]
            s = tensors.get("%s.%d.timestep" % (prefix, n))
            if res:
                assert W.shape[0] == W.shape[1], "residual layer needs out == in"
                if s is None:
                    s = np.ones(W.shape[0])
            self.layers.append((W, b, bool(res), s))
        self.Wout = tensors[prefix + ".out.weight"]
        self.bout = tensors[prefix + ".out.bias"]
        self.act = act

    def _act(self, z):
        if self.act == "tanh":
            y = np.tanh(z)
            return y, 1.0 - y * y
        if self.act == "silu":
            sg = 1.0 / (1.0 + np.exp(-z))
            return z * sg, sg * (1.0 + z * (1.0 - sg))
        raise ValueError(self.act)

    def forward(self, x):
        """x: [N, in] -> out [N, n_out], cache."""
        h = x
        cache = []
        for W, b, res, s in self.layers:
            z = h @ W.T + b
            y, dy = self._act(z)
            cache.append(dy)
            h = h + s * y if res else y
        out = h @ self.Wout.T + self.bout
        return out, cache

    def backward(self, gout, cache):
        """gout: [N, n_out] = dE/dout -> dE/dx [N, in]."""
        g = gout @ self.Wout
        for (W, b, res, s), dy in zip(reversed(self.layers), reversed(cache)):
            if res:
                gz = g * s * dy
                g = g + gz @ W
            else:
                gz = g * dy
                g = gz @ W
        return g


def _hermite(table, r, r0, dr, K):
    """table: [E, K+1, 3, M] rows already selected per edge; r: [E].
    Returns R [E, M], dR/dr [E, M]."""
    E = r.shape[0]
    q = np.floor((r - r0) / dr).astype(np.int64)
    q = np.clip(q, 0, K - 1)
    t = (r - (r0 + q * dr)) / dr
    idx = np.arange(E)
    k0 = table[idx, q]          # [E, 3, M]
    k1 = table[idx, q + 1]
    p0, v0, a0 = k0[:, 0], k0[:, 1] * dr, k0[:, 2] * dr * dr
    p1, v1, a1 = k1[:, 0], k1[:, 1] * dr, k1[:, 2] * dr * dr
    t = t[:, None]
    t2, t3, t4, t5 = t * t, t ** 3, t ** 4, t ** 5
    h0 = 1 - 10 * t3 + 15 * t4 - 6 * t5
    h5 = 10 * t3 - 15 * t4 + 6 * t5
    h1 = t - 6 * t3 + 8 * t4 - 3 * t5
    h4 = -4 * t3 + 7 * t4 - 3 * t5
    h2 = (t2 - 3 * t3 + 3 * t4 - t5) / 2
    h3 = (t3 - 2 * t4 + t5) / 2
    d0 = -30 * t2 + 60 * t3 - 30 * t4
    d5 = -d0
    d1 = 1 - 18 * t2 + 32 * t3 - 15 * t4
    d4 = -12 * t2 + 28 * t3 - 15 * t4
    d2 = (2 * t - 9 * t2 + 12 * t3 - 5 * t4) / 2
    d3 = (3 * t2 - 8 * t3 + 5 * t4) / 2
    R = p0 * h0 + v0 * h1 + a0 * h2 + a1 * h3 + v1 * h4 + p1 * h5
    dR = (p0 * d0 + v0 * d1 + a0 * d2 + a1 * d3 + v1 * d4 + p1 * d5) / dr
    return R, dR


def _sph(u, L):
    """Y [E, L+1, 5] (padded) and dY/du [E, L+1, 5, 3]."""
    E = u.shape[0]
    Y = np.zeros((E, L + 1, 5))
    dY = np.zeros((E, L + 1, 5, 3))
    Y[:, 0, 0] = 1.0
    if L >= 1:
        Y[:, 1, :3] = u
        for m in range(3):
            dY[:, 1, m, m] = 1.0
    if L >= 2:
        x, y, z = u[:, 0], u[:, 1], u[:, 2]
        Y[:, 2, 0] = SQ3 * x * y
        Y[:, 2, 1] = SQ3 * y * z
        Y[:, 2, 2] = SQ3 * z * x
        Y[:, 2, 3] = SQ3 / 2 * (x * x - y * y)
        Y[:, 2, 4] = (3 * z * z - 1) / 2
        dY[:, 2, 0, 0] = SQ3 * y
        dY[:, 2, 0, 1] = SQ3 * x
        dY[:, 2, 1, 1] = SQ3 * z
        dY[:, 2, 1, 2] = SQ3 * y
        dY[:, 2, 2, 2] = SQ3 * x
        dY[:, 2, 2, 0] = SQ3 * z
        dY[:, 2, 3, 0] = SQ3 * x
        dY[:, 2, 3, 1] = -SQ3 * y
        dY[:, 2, 4, 2] = 3 * z
    return Y, dY


def _mmask(L):
    """[L+1, 5] mask of valid m per l."""
    m = np.zeros((L + 1, 5))
    for l in range(L + 1):
        m[l, :2 * l + 1] = 1.0
    return m


def _min_image(d, box):
    """d: [E,3] raw differences, box: 3x3 rows a, b, c (reduced form)."""
    a, b, c = box
    d = d - np.outer(np.floor(d[:, 2] / c[2] + 0.5), c)
    d = d - np.outer(np.floor(d[:, 1] / b[1] + 0.5), b)
    d = d - np.outer(np.floor(d[:, 0] / a[0] + 0.5), a)
    # brute-force check of the neighbouring images (robustness)
    best = d.copy()
    bestr = np.einsum("ij,ij->i", d, d)
    for i in (-1, 0, 1):
        for j in (-1, 0, 1):
            for k in (-1, 0, 1):
                if i == j == k == 0:
                    continue
                dd = d + i * a + j * b + k * c
                rr = np.einsum("ij,ij->i", dd, dd)
                sel = rr < bestr
                best[sel] = dd[sel]
                bestr[sel] = rr[sel]
    return best


# ---------------------------------------------------------------------------
# energy and forces
# ---------------------------------------------------------------------------

def energy_forces(model, positions_nm, types, box_nm_or_None=None, per_particle=False):
    """Energy (kJ/mol) and forces (kJ/mol/nm) of sections 1-8.

    model: a path, file bytes, {'meta','tensors'} dict or (meta, tensors).
    positions_nm: [n,3]; types: [n] ints; box_nm_or_None: None or 3x3 rows
    (a, b, c) in OpenMM's reduced triclinic form, nm."""
    mdl = _as_model(model)
    meta, T_ = mdl["meta"], mdl["tensors"]
    lf = LENGTH_UNITS[meta["length_unit"]]
    ef = ENERGY_UNITS[meta["energy_unit"]]
    rc = float(meta["cutoff"])
    M = int(meta["n_channels"])
    Ma = int(meta["n_axis"])
    L = int(meta["l_max"])
    lsum = json.loads(meta["descriptor_l_sum"])
    nn = float(meta["n_norm"])
    r0 = float(meta["radial_r0"])
    dr = float(meta["radial_dr"])
    K = int(meta["radial_intervals"])
    act = meta["activation"]
    fres = json.loads(meta["fitting_residual"])
    nint = int(meta["n_interactions"])
    ntypes = len(json.loads(meta["type_names"]))

    x = np.asarray(positions_nm, dtype=np.float64) / lf
    types = np.asarray(types, dtype=np.int64)
    n = x.shape[0]
    box = None
    if box_nm_or_None is not None:
        box = np.asarray(box_nm_or_None, dtype=np.float64).reshape(3, 3) / lf
        if rc > 0.5 * min(box[0, 0], box[1, 1], box[2, 2]):
            raise ValueError("cutoff exceeds half the smallest box height")

    # --- edges (i -> j), all ordered pairs within the cut-off
    ii, jj = np.nonzero(~np.eye(n, dtype=bool))
    d = x[jj] - x[ii]
    if box is not None:
        d = _min_image(d, box)
    r2 = np.einsum("ij,ij->i", d, d)
    if np.any(r2 == 0):
        e = np.nonzero(r2 == 0)[0][0]
        raise ValueError("particles %d and %d at distance 0" % (ii[e], jj[e]))
    sel = r2 < rc * rc
    ii, jj, d = ii[sel], jj[sel], d[sel]
    r = np.sqrt(np.einsum("ij,ij->i", d, d))
    u = d / r[:, None]
    E_ = len(r)
    ti, tj = types[ii], types[jj]

    tab = T_["radial.table"]  # [T, T, L+1, K+1, 3, M]
    Y, dY = _sph(u, L)              # [E, L+1, 5], [E, L+1, 5, 3]
    mm = _mmask(L)

    def radial(table):
        R = np.zeros((E_, L + 1, M))
        dR = np.zeros((E_, L + 1, M))
        for l in range(L + 1):
            R[:, l], dR[:, l] = _hermite(table[ti, tj, l], r, r0, dr, K)
        return R, dR

    R, dR = radial(tab)
    # moments A [n, L+1, 5, M]
    A = np.zeros((n, L + 1, 5, M))
    np.add.at(A, ii, R[:, :, None, :] * Y[:, :, :, None] / nn)

    def invariants(P, Q):
        # sum_m P[l][m][k] Q[l][m][k'] for k' < Ma -> [n, L+1, M, Ma]
        Dl = np.einsum("nlmk,nlmq->nlkq", P, Q[:, :, :, :Ma])
        if lsum:
            return Dl.sum(axis=1).reshape(n, -1)
        return Dl.reshape(n, -1)

    def invariants_grad(G):
        # G flat -> [n, L+1, M, Ma]
        if lsum:
            G = G.reshape(n, 1, M, Ma)
            return np.broadcast_to(G, (n, L + 1, M, Ma))
        return G.reshape(n, L + 1, M, Ma)

    D = invariants(A, A)
    nD = D.shape[1]

    if nint == 1:
        nres = json.loads(meta["node_residual"])
        R2, dR2 = radial(T_["interaction.radial.table"])
        phi = np.zeros((n, M))
        node_cache = {}
        for a in range(ntypes):
            s = np.nonzero(types == a)[0]
            if len(s) == 0:
                continue
            net = _Net(T_, "node.%d" % a, nres, act)
            out, cache = net.forward(D[s])
            phi[s] = out
            node_cache[a] = (s, net, cache)
        W2 = R2 * phi[jj][:, None, :]               # [E, L+1, M]
        B = np.zeros((n, L + 1, 5, M))
        np.add.at(B, ii, W2[:, :, None, :] * Y[:, :, :, None] / nn)
        D2 = invariants(B, A)
        X = np.concatenate([D, D2], axis=1)
    else:
        X = D

    # --- fitting networks
    Ei = np.zeros(n)
    GX = np.zeros_like(X)
    eshift = T_["energy_shift"]
    for a in range(ntypes):
        s = np.nonzero(types == a)[0]
        if len(s) == 0:
            continue
        net = _Net(T_, "fitting.%d" % a, fres, act)
        out, cache = net.forward(X[s])
        Ei[s] = out[:, 0] + eshift[a]
        GX[s] = net.backward(np.ones((len(s), 1)), cache)

    # --- backward
    G1 = invariants_grad(GX[:, :nD])               # dE/dD [n, L+1, M, Ma]
    gA = np.zeros((n, L + 1, 5, M))
    gA += np.einsum("nlkq,nlmq->nlmk", G1, A[:, :, :, :Ma])
    gA[:, :, :, :Ma] += np.einsum("nlkq,nlmk->nlmq", G1, A)
    if nint == 1:
        G2 = invariants_grad(GX[:, nD:])
        gB = np.einsum("nlkq,nlmq->nlmk", G2, A[:, :, :, :Ma])
        gA[:, :, :, :Ma] += np.einsum("nlkq,nlmk->nlmq", G2, B)
        # dE/dphi_j
        gW2 = np.einsum("elmk,elm->elk", gB[ii], Y) / nn   # dE/dW2 [E,L+1,M]
        gphi = np.zeros((n, M))
        np.add.at(gphi, jj, (gW2 * R2).sum(axis=1))
        gD = np.zeros((n, nD))
        for a, (s, net, cache) in node_cache.items():
            gD[s] = net.backward(gphi[s], cache)
        G3 = invariants_grad(gD)
        gA += np.einsum("nlkq,nlmq->nlmk", G3, A[:, :, :, :Ma])
        gA[:, :, :, :Ma] += np.einsum("nlkq,nlmk->nlmq", G3, A)
    gA *= mm[None, :, :, None]

    gAe = gA[ii]                                        # [E, L+1, 5, M]
    gR = np.einsum("elmk,elm->elk", gAe, Y) / nn        # dE/dR
    gY = np.einsum("elmk,elk->elm", gAe, R) / nn        # dE/dY
    gr = (gR * dR).sum(axis=(1, 2))
    if nint == 1:
        gBe = gB[ii]
        gR2 = np.einsum("elmk,elm->elk", gBe, Y) / nn * phi[jj][:, None, :]
        gY += np.einsum("elmk,elk->elm", gBe, W2) / nn
        gr += (gR2 * dR2).sum(axis=(1, 2))
    gu = np.einsum("elm,elmc->ec", gY * mm[None], dY)
    # d = x_j - x_i ; dE/dd = gr u + (I - u u^T) gu / r
    gd = gr[:, None] * u + (gu - u * np.einsum("ec,ec->e", u, gu)[:, None]) / r[:, None]
    F = np.zeros((n, 3))
    np.add.at(F, jj, -gd)
    np.add.at(F, ii, gd)

    E = Ei.sum() * ef
    F = F * ef / lf
    if per_particle:
        return E, F, Ei * ef
    return E, F


def finite_difference_check(model, pos, types, box=None, h=1e-6, nsample=None, seed=0):
    """Max abs and relative (to force RMS) error of analytic forces versus
    central differences of the energy."""
    E, F = energy_forces(model, pos, types, box)
    n = len(pos)
    rng = np.random.default_rng(seed)
    idx = np.arange(n) if nsample is None else rng.choice(n, min(n, nsample), replace=False)
    err = []
    for i in idx:
        for c in range(3):
            p = np.array(pos, dtype=float)
            p[i, c] += h
            Ep, _ = energy_forces(model, p, types, box)
            p[i, c] -= 2 * h
            Em, _ = energy_forces(model, p, types, box)
            err.append(abs(-(Ep - Em) / (2 * h) - F[i, c]))
    rms = np.sqrt(np.mean(F ** 2))
    return max(err), max(err) / rms


# ---------------------------------------------------------------------------
# random well-formed models
# ---------------------------------------------------------------------------

GRIDS = {  # unit -> (r0, dr, K): r0 + K dr = r_c exactly in binary
    "nm": (0.0625, 0.03125, 16),            # r_c = 0.5625 nm
    "angstrom": (0.5, 0.25, 22),            # r_c = 6 A
    "bohr": (1.0, 0.5, 18),                 # r_c = 10 bohr = 0.529 nm
}


def _smooth_table(rng, T, L, M, r0, dr, K, scale=1.0):
    """Random smooth radial functions, f = f' = f'' = 0 at r_c."""
    rc = r0 + K * dr
    rq = r0 + dr * np.arange(K + 1)
    tab = np.zeros((T, T, L + 1, K + 1, 3, M))
    for a in range(T):
        for b in range(T):
            for l in range(L + 1):
                for k in range(M):
                    c0, c1, c2 = rng.normal(size=3) * scale
                    mu = rng.uniform(r0, rc)
                    w = rng.uniform(0.15, 0.4) * rc
                    om = rng.uniform(2, 8) / rc
                    ph = rng.uniform(0, 2 * np.pi)
                    G = np.exp(-((rq - mu) / w) ** 2)
                    G1 = -2 * (rq - mu) / w ** 2 * G
                    G2 = (-2 / w ** 2 + 4 * (rq - mu) ** 2 / w ** 4) * G
                    C = np.cos(om * rq + ph)
                    C1 = -om * np.sin(om * rq + ph)
                    C2 = -om * om * C
                    g, g1, g2 = c0 + c1 * G + c2 * C, c1 * G1 + c2 * C1, c1 * G2 + c2 * C2
                    s = 1 - rq / rc
                    hh, h1, h2 = s ** 3, -3 / rc * s ** 2, 6 / rc ** 2 * s
                    tab[a, b, l, :, 0, k] = g * hh
                    tab[a, b, l, :, 1, k] = g1 * hh + g * h1
                    tab[a, b, l, :, 2, k] = g2 * hh + 2 * g1 * h1 + g * h2
    tab[:, :, :, K, :, :] = 0.0
    return tab


def _net_tensors(rng, prefix, nin, widths, residual, nout, timestep, tensors, wscale=1.0):
    prev = nin
    for n, (w, res) in enumerate(zip(widths, residual)):
        if res:
            assert w == prev
        tensors["%s.%d.weight" % (prefix, n)] = rng.normal(size=(w, prev)) * wscale / np.sqrt(prev)
        tensors["%s.%d.bias" % (prefix, n)] = rng.normal(size=w) * 0.3
        if res and timestep:
            tensors["%s.%d.timestep" % (prefix, n)] = rng.uniform(0.05, 0.6, size=w)
        prev = w
    tensors[prefix + ".out.weight"] = rng.normal(size=(nout, prev)) / np.sqrt(prev)
    tensors[prefix + ".out.bias"] = rng.normal(size=nout) * 0.3


def random_model(seed, T=2, L=1, M=4, Ma=2, lsum=True, nint=0, H=3, act="tanh",
                 timestep=True, length_unit="nm", energy_unit="kJ/mol",
                 n_norm=8.0, width=None, dtype=np.float64, grid=None):
    """A random well-formed model: returns (meta, tensors).  Hidden layer 0
    maps the input to `width`, later layers are residual (width -> width)."""
    rng = np.random.default_rng(seed)
    r0, dr, K = grid if grid is not None else GRIDS[length_unit]
    rc = r0 + K * dr
    width = width or 6
    nd = (1 if lsum else L + 1) * M * Ma
    nin = nd * (2 if nint else 1)
    widths = [width] * H
    fres = [False] + [True] * (H - 1)
    names = ["O", "H", "C"][:T]
    Z = [8, 1, 0][:T]
    meta = {
        "format": "openmm-graph", "format_version": "1",
        "length_unit": length_unit, "energy_unit": energy_unit,
        "type_names": json.dumps(names), "type_atomic_numbers": json.dumps(Z),
        "cutoff": repr(rc), "n_channels": str(M), "n_axis": str(Ma), "l_max": str(L),
        "descriptor_l_sum": "true" if lsum else "false", "n_norm": repr(float(n_norm)),
        "radial_r0": repr(r0), "radial_dr": repr(dr), "radial_intervals": str(K),
        "activation": act, "fitting_residual": json.dumps(fres),
        "n_interactions": str(nint),
    }
    tensors = {"radial.table": _smooth_table(rng, T, L, M, r0, dr, K)}
    for a in range(T):
        # mix of residual with and without timestep when timestep == 'mixed'
        ts = timestep if timestep != "mixed" else (a % 2 == 0)
        _net_tensors(rng, "fitting.%d" % a, nin, widths, fres, 1, ts, tensors)
    tensors["energy_shift"] = rng.normal(size=T) * 2.0
    if nint:
        nres = [False, True]
        meta["node_residual"] = json.dumps(nres)
        tensors["interaction.radial.table"] = _smooth_table(rng, T, L, M, r0, dr, K)
        for a in range(T):
            _net_tensors(rng, "node.%d" % a, nd, [5, 5], nres, M, timestep is not False, tensors)
    if dtype != np.float64:
        tensors = {k: v.astype(dtype) for k, v in tensors.items()}
    return meta, tensors


def random_positions(seed, model, n=40, box=None, density_nm3=18.0,
                     close_pair=True, knot_pair=True, isolated=True, ntypes=None):
    """Random positions (nm) and types for a model.  box: None,
    'rect' or 'tric'.  Returns (pos, types, box_rows_or_None)."""
    mdl = _as_model(model)
    meta = mdl["meta"]
    lf = LENGTH_UNITS[meta["length_unit"]]
    rc_nm = float(meta["cutoff"]) * lf
    r0_nm = float(meta["radial_r0"]) * lf
    dr_nm = float(meta["radial_dr"]) * lf
    T = len(json.loads(meta["type_names"]))
    rng = np.random.default_rng(seed)
    boxv = None
    if box is None:
        side = (n / density_nm3) ** (1 / 3)
        pos = rng.uniform(0, side, size=(n, 3))
    else:
        h = 2.0 * rc_nm * 1.02
        side = max(h, (n / density_nm3) ** (1 / 3))
        if box == "rect":
            boxv = np.diag([side * 1.1, side, side * 1.05])
        else:
            boxv = np.array([[side * 1.1, 0, 0],
                             [0.3 * side, side, 0],
                             [-0.4 * side, 0.35 * side, side * 1.05]])
        pos = rng.uniform(-0.5 * side, 1.5 * side, size=(n, 3))  # some outside the box
    # push apart pairs closer than 0.6 * r0 (keeps extrapolation modest)
    for _ in range(200):
        moved = False
        for i in range(n):
            for j in range(i):
                dd = pos[j] - pos[i]
                if boxv is not None:
                    dd = _min_image(dd[None], boxv)[0]
                if np.linalg.norm(dd) < max(0.6 * r0_nm, 0.03):
                    pos[j] = pos[j] + rng.normal(size=3) * 0.05
                    moved = True
        if not moved:
            break
    types = rng.integers(0, T, size=n)
    extra = []
    base = pos.mean(axis=0)
    if close_pair and r0_nm > 0:  # a pair closer than r0: t < 0 in the first interval
        if boxv is None:   # a separate pair
            p = base + np.array([0.0, 0.0, 2.5 * rc_nm])
            extra += [p, p + np.array([0.75 * r0_nm, 0, 0])]
        else:              # in a box: a particle 0.75 r0 from particle 0
            extra += [pos[0] + np.array([0.0, 0.75 * r0_nm, 0])]
    if knot_pair:   # a pair exactly on a knot (nm grid: exact binary distance)
        if boxv is None:
            p = np.round((base + np.array([0.0, 2.5 * rc_nm, 0.0])) * 64) / 64
            extra += [p, p + np.array([r0_nm + 3 * dr_nm, 0, 0])]
    if isolated and boxv is None:
        extra += [base + np.array([5 * rc_nm + 1.0, 0, 0])]
    if extra:
        pos = np.concatenate([pos, np.array(extra)])
        types = np.concatenate([types, rng.integers(0, T, size=len(extra))])
    return pos, types, boxv


if __name__ == "__main__":  # pragma: no cover
    # self-check: analytic forces against central differences of the energy
    for seed, kw, box in [(1, dict(T=2, L=2, nint=1, lsum=False, act="silu"), "tric"),
                          (2, dict(T=3, L=1, nint=1, length_unit="angstrom", energy_unit="eV"), None),
                          (3, dict(T=1, L=0, nint=0, length_unit="bohr", energy_unit="hartree"), "rect")]:
        meta, ten = random_model(seed, **kw)
        pos, types, bx = random_positions(seed, (meta, ten), n=20, box=box)
        E, F = energy_forces((meta, ten), pos, types, bx)
        ea, er = finite_difference_check((meta, ten), pos, types, bx, h=1e-6, nsample=5)
        print("seed %d: E = %.10g kJ/mol, |F - F_fd| / F_rms = %.1e" % (seed, E, er))
