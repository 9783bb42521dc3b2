"""Inbound transports: they own bytes, connections and cancel-on-disconnect."""
