"""The ``amdtop`` command line (headless commands and the TUI launcher)."""
