"""The study database through Optuna's public API: inspection, recommender, import, REST service."""
