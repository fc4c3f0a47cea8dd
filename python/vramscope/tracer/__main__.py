"""``python -m vramscope.tracer ...``: see vramscope/tracer/cli.py and docs/design/tracer.md."""

import sys

from .cli import main

sys.exit(main())
