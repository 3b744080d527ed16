#!/usr/bin/env python3
"""Boot a SkyMemory constellation: see `--help` and skymemory/launcher/__init__.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ground"))  # run from a checkout, no install needed

from skymemory.launcher import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
