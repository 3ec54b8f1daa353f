"""Training tools: the uncompressed model, compression/export, data readers, training.

    from openmmgraph.training import EmbeddingModel, compress, export, train

See docs/training.md.
"""

from .compress import CompressedModelFile, CompressionReport, compress, export, sample_configuration
from .data import Dataset, Frame, frame_pairs, load_data, read_deepmd, read_extxyz
from .model import EmbeddingModel

__all__ = [
    "EmbeddingModel", "compress", "export", "CompressionReport", "CompressedModelFile", "sample_configuration",
    "Dataset", "Frame", "frame_pairs", "load_data", "read_deepmd", "read_extxyz",
]

from .train import TrainingConfig, TrainResult, evaluate, load_checkpoint, train

__all__ += ["TrainingConfig", "TrainResult", "train", "evaluate", "load_checkpoint"]
