"""Tiny training data written by hand (no ASE needed), shared by test_training.py and test_cli.py."""

import numpy as np


def write_tiny_extxyz(path, frames=3):
    """Frames of 4 Si atoms in an 8 angstrom periodic cell, with random energies and forces."""
    rng = np.random.default_rng(0)
    with open(path, "w") as stream:
        for _ in range(frames):
            stream.write('4\nLattice="8.0 0.0 0.0 0.0 8.0 0.0 0.0 0.0 8.0" Properties=species:S:1:pos:R:3:forces:R:3 '
                         f'energy={-10.0 + rng.normal():.6f} pbc="T T T"\n')
            for position in np.array([[0, 0, 0], [2, 2, 0], [0, 2, 2], [2, 0, 2]]) + rng.uniform(-0.2, 0.2, (4, 3)):
                stream.write("Si " + " ".join(f"{v:.6f}" for v in (*position, *rng.normal(size=3))) + "\n")
