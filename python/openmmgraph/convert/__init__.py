"""Converters from other model families into the openmm-graph format.

- ``deepmd``: DeePMD-kit se_e2_a energy models (PyTorch backend), see
  docs/deepmd-import.md.
"""

from .deepmd import DeepmdConversionError, convert_deepmd, load_deepmd

__all__ = ["DeepmdConversionError", "convert_deepmd", "load_deepmd"]
