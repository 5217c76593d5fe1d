import os
import sys

# tests/ is importable as a package of helpers (tests.helpers, tests.autodiff.opinfo_samples)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
