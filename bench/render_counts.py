"""Which widgets a dashboard frame renders, and how many lines: ``Widget.render_lines`` counted by widget and crop size
(and each ``TextPane._build``, a pane comparing its lines again: "lines" 0)
over frames 20-60 of the in-process dashboard (``python -m tui`` or ``bench/replay_tui.py``), written to ``--out`` when
frame 60 is drawn. Run it under a pty (``bench/tui_cpu.py`` or ``bench/pty_profile.py``) for 70 s; issue 53, session 25
found the idle frame's history pane rendering 7 lines and the Processes pane 26 lines every 3 s this way.

    .venv/bin/python bench/tui_cpu.py --runs 1 --seconds 50 --marker nvml -- .venv/bin/python bench/render_counts.py \\
        --out /tmp/counts.txt bench/replay_tui.py tests/fixtures/nvml/h200_health_idle_replay.json --no-discovery -- \\
        --no-attach --readonly --interval 1 --state-dir /tmp/rc --config /tmp/none.toml
"""

from __future__ import annotations

import collections
import runpy
import sys
from typing import Any

from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

import tui.app as app
from widgets.text_pane import TextPane


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[1] != "--out":
        raise SystemExit("usage: render_counts.py --out FILE SCRIPT ARGS...")
    out, rest = sys.argv[2], sys.argv[3:]
    counts: collections.Counter[tuple[str, str | None, int, int]] = collections.Counter()
    frames = [0]
    render_lines, show, build = Widget.render_lines, app.AmdtopApp._show, TextPane._build

    def counted(self: Widget, crop: Region) -> list[Strip]:
        counts[(type(self).__name__, self.id, crop.height, crop.width)] += 1
        return render_lines(self, crop)

    def built(self: TextPane, width: int) -> list[int]:
        # A TextPane comparing its lines again (line by line, each wrapped or matched): no line rendered, but work.
        counts[("TextPane._build", self.id, 0, width)] += 1
        return build(self, width)

    def shown(self: app.AmdtopApp, frame: Any) -> None:
        frames[0] += 1
        if frames[0] == 20:
            counts.clear()
        if frames[0] == 60:
            with open(out, "w") as fh:
                fh.write("renders (widget, id, lines, width) over 40 frames\n")
                fh.writelines(f"{n:4d} {key}\n" for key, n in counts.most_common())
        show(self, frame)

    Widget.render_lines = counted  # type: ignore[method-assign]
    TextPane._build = built  # type: ignore[method-assign]
    app.AmdtopApp._show = shown  # type: ignore[method-assign]
    sys.argv = rest
    runpy.run_path(rest[0], run_name="__main__")


if __name__ == "__main__":
    main()
