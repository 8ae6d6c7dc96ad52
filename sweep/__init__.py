"""Weight-search studies: Ray Tune runs the trials, the driver writes every result to Optuna.

The only package that imports ray, and only inside the modules that run a study (`launch`,
`tuning`, `searcher`, `trainable`); `spec`, `space`, `strategies` and `cli` import neither ray
nor torch.
"""

from weightsearch.sweep.spec import Search, StudySpec, load_study_spec

__all__ = ["Search", "StudySpec", "load_study_spec"]
