"""A simulated OpenAI-compatible server that streams like vLLM (demo workers and known-ground-truth tests).

Run it with ``python -m amdtop.simserver --port P --model NAME --capacity N --tokens-per-s X --ttft-ms T``.
"""

from amdtop.simserver.engine import SimConfig, SimEngine

__all__ = ["SimConfig", "SimEngine"]
