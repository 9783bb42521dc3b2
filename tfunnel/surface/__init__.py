"""What clients see: the catalog of surfaced names, the four meta-tools, search."""
