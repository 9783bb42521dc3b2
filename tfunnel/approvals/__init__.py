"""Descriptor pinning: what upstreams showed the model, approved once, held when it changes."""
