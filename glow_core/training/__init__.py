"""Training: reverse-mode differentiation of graphs, optimizers and losses (docs/training.md)."""

from glow_core.training.differentiate import LEARNING_RATE, LOSS_OUTPUT, TrainingFunction, differentiate
from glow_core.training.losses import mean_squared_error, softmax_cross_entropy
from glow_core.training.optimizers import SGD, Adam, Optimizer
from glow_core.training.trainer import Trainer

__all__ = [
    "LEARNING_RATE",
    "LOSS_OUTPUT",
    "SGD",
    "Adam",
    "Optimizer",
    "Trainer",
    "TrainingFunction",
    "differentiate",
    "mean_squared_error",
    "softmax_cross_entropy",
]
