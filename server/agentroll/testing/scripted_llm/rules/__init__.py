"""Built-in scripted rules: one per bundled task family, the harness and red-team rules,
and the steps they share (`steps.py`)."""
