"""bench/ is not installed: its tests import it as ``bench.…`` from the repository root, as
``python -m bench.<name>`` does. Appended, so an installed build of ``streams`` still wins."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[3])
if ROOT not in sys.path:
    sys.path.append(ROOT)
