"""`python -m spillover_harness.cli`: the same as the `spillover-harness` command."""

import sys

from spillover_harness.cli import main

sys.exit(main())
