"""Test fixtures that ship with tfunnel: a real stdio MCP upstream with fault modes."""
