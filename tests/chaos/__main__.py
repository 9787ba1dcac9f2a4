"""``python -m chaos``: see ``chaos.harness.main``."""

import sys

from chaos.harness import main

sys.exit(main())
