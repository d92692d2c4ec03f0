"""Count, over 40 busy frames, how often the layout is planned and how often a strip is swept from the samples."""

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, "bench")
import dashboard_frames as df

import widgets.gpu_history as gh
from tui import layout

counts = {"plan": 0, "sweep_level": 0, "advance": 0}


def wrap(mod, name, key):
    f = getattr(mod, name)

    def g(*a, **k):
        counts[key] += 1
        return f(*a, **k)

    setattr(mod, name, g)


wrap(layout, "plan", "plan")
wrap(gh, "sweep_level", "sweep_level")
orig = gh.GpuHistory._advance


def adv(self):
    counts["advance"] += 1
    return orig(self)


gh.GpuHistory._advance = adv
asyncio.run(df.measure(Path("tests/fixtures/nvml/h200_health_replay.json"), 40, 20, True))
print("after 20 warm-up frames and 40 measured:", counts)
