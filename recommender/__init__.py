"""The recommender: a central weight for a new task from its training-set size, learned from
the study database and the published results."""
