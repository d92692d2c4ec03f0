"""`vllm bench serve`, kept running between rounds: run with vLLM's own Python, it reads one JSON list of
`vllm bench serve` arguments per line on stdin and answers `DONE <exit status>` on stdout once that run has finished.

The side-by-side tests (test_ramp_vllm.py) run eight rounds in one loop; as a command each one spent ~10 s (more on
a busy box) importing torch and vLLM before its first request. This is the function the `vllm bench serve` command calls
(vllm/entrypoints/cli/benchmark/serve.py: ``add_cli_args`` then ``main``), with the same arguments, run in one process.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback

from vllm.benchmarks.serve import add_cli_args, main  # type: ignore[import-not-found]
from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]


def run() -> None:
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    out = sys.stdout
    print("READY", file=out, flush=True)
    for line in sys.stdin:
        status = 0
        try:
            with contextlib.redirect_stdout(sys.stderr):  # its report goes to stderr; stdout carries only answers
                main(parser.parse_args(json.loads(line)))
        except SystemExit as exc:  # argparse and vLLM's own checks exit
            status = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # reported to the test as a failed run, with its traceback on stderr
            traceback.print_exc()
            status = 1
        print(f"DONE {status}", file=out, flush=True)


if __name__ == "__main__":
    run()
