"""`python -m skymemory.launcher ...`: the same as tools/launch_constellation.py, for an installed package."""

import sys

from skymemory.launcher import main

sys.exit(main())
