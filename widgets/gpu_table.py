"""Per-GPU table: util, history sparkline, VRAM bar, power, temperature, owning worker and flags."""

from __future__ import annotations

from widgets.row_table import RowTable


class GpuTable(RowTable):
    COLUMNS = (
        ("gpu", "GPU"),
        ("util", "Util"),
        ("vram", "VRAM used/total"),
        ("power", "Power"),
        ("temp", "Temp"),
        ("worker", "Worker/rank"),
        ("flags", "Flags"),
        ("hist", "Util history"),  # last: the first column to scroll off on an 80-column terminal
    )
