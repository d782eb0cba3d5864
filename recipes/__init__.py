"""Media recipes shipped with vlmforge (user-editable YAML, one per subset; see schemas/recipes.py)."""
