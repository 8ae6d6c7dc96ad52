"""Weight-search studies: Ray Tune runs the trials, the driver writes every result to Optuna.

The only package that imports ray, and only inside the modules that run a study (`launch`,
`searcher`, `trainable`); `spec` and `cli` import neither ray nor torch.
"""

from sweep.spec import GridSearch, GuidedSearch, StudySpec, load_study_spec

__all__ = ["GridSearch", "GuidedSearch", "StudySpec", "load_study_spec"]
