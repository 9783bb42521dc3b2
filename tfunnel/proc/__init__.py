"""Operating-system resources: child processes (one stop sequence), their reaping, and
whole-line writes to pipes."""
