"""The admin web UI (`serve --http --ui`, `tfunnel ui`): views of the home and the gateway, and the
management operations behind buttons, on loopback only (docs/ui.md)."""
