"""The link probe: measured GPU-to-GPU copy and all-reduce bandwidth (no UI; torch only inside the runner)."""
