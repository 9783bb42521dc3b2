"""The config home as a whole: every file read by one rule, checked before serving, and kept live."""
