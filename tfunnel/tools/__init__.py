"""Register tool execution: resolving an invoke to a command, running it, mapping the result."""
