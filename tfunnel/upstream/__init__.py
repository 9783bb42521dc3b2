"""Upstream MCP servers: config, isolation guard, child processes, sessions, the supervisor."""
