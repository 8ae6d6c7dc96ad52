"""The REST service over the study database, the recommender and the sweep."""
