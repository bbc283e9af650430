"""Session-wide test setup.

Triton decides at *import* time whether its standard-library ``@jit`` helpers (``tl.sum``,
``tl.sigmoid``, ...) are interpreted, and importing torch already imports triton. So on a
machine without an NVIDIA GPU the interpreter must be switched on before anything imports torch:
here, before pytest collects any test module.
"""

import os

if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
