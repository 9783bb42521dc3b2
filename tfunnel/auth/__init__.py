"""The OAuth 2.1 resource server of the HTTP service: its config file, bearer-token verification,
the signing-key cache, the challenges, and the per-request check (SPEC §8.3, PROTOCOL.md §4)."""
