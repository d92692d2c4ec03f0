"""``python -m amdtop``."""

from amdtop.cli.main import main

raise SystemExit(main())
