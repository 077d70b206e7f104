"""``ember_core.optim``: SGD, Adam, AdamW and learning-rate schedules, in core ops only (every
backend runs them).  Modelled on ``torch.optim``."""

from ember_core.optim import lr_scheduler
from ember_core.optim.adam import Adam, AdamW
from ember_core.optim.lr_scheduler import CosineAnnealingLR, LRScheduler, StepLR
from ember_core.optim.optimizer import Optimizer
from ember_core.optim.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "CosineAnnealingLR", "LRScheduler", "Optimizer", "StepLR", "lr_scheduler"]
