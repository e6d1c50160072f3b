import sys
from pathlib import Path

# Test helper modules (loss_helpers, ...) live beside the tests.
sys.path.insert(0, str(Path(__file__).parent))
