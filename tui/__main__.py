"""``python -m tui``: the same as the ``amdtop`` command."""

from tui.entry import main

raise SystemExit(main())
