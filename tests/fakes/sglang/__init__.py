"""Stand-in ``sglang`` package for tests: ``python -m sglang.launch_server ...`` runs amdtop's simulated server in
SGLang's flavour, so a hand-started "SGLang server" has SGLang's command line, titled rank processes and routes.
Never on the path outside the tests that put ``tests/fakes`` there."""
