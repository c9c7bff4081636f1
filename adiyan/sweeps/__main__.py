"""``python -m adiyan.sweeps NAME``: see :mod:`adiyan.sweeps.cli`."""

import sys

from .cli import main

sys.exit(main())
