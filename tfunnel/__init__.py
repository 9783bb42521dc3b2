"""tfunnel: an MCP gateway on Trio."""

__version__ = "0.1.0"
