"""``python -m sglang.launch_server ARGS``: the simulated server in SGLang's flavour with SGLang's own argv."""

import sys

from amdtop.simserver.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(["--flavour", "sglang", *sys.argv[1:]]))
