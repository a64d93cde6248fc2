"""python -m scripts.scorecard: an attention's row on every testbed (see __main__.py)."""
