"""The MCP wire layer, sans-IO: no trio, no sockets, no files (a test enforces this)."""
