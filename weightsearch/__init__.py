"""weightsearch: find the loss weight a central task should get in multi-task NLU training."""

__version__ = "0.1.0"
