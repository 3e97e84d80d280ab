"""`python -m planner.guide` (make guide): write PARALLELISM_GUIDE.md and PLANNER_VALIDATION.md (guide.py says how)."""

import sys

from .guide import main

sys.exit(main())
