"""amdtop serve: one node runtime, many viewers over a Unix socket (see amdtop.serve.server)."""
