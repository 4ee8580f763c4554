"""st.py — the parity scripts' safetensors reader/writer: the project's own
python/scanprop_torch.py (numpy only), under the short names the scripts use."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from scanprop_torch import read_safetensors as read, write_safetensors as write  # noqa: E402,F401
