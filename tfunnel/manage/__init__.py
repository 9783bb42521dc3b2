"""Operator commands that change the home (CLI, later tf_* tools)."""
