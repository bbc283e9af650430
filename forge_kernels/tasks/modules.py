"""Import task and solution source text as real modules.

Triton's JIT reads a kernel's source with ``inspect.getsource``, which needs a file on disk, so
source text is written to a directory and imported from there (``exec`` of a string would work
only on the interpreter). On CPU, ``TRITON_INTERPRET=1`` must be set before the module is
imported: ``@triton.jit`` decides at decoration time whether a kernel is interpreted.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["import_source"]

_counter = itertools.count()


def import_source(source: str, stem: str, directory: Path) -> ModuleType:
    """Write ``source`` to ``directory/<stem>_<n>.py``, import it and return the module.

    The module is registered in ``sys.modules`` under a unique name (dataclasses and pickling need
    that); errors raised while executing the module propagate unchanged.
    """
    safe_stem = re.sub(r"\W", "_", stem) or "module"
    module_name = f"forge_task_{safe_stem}_{next(_counter)}"
    path = Path(directory) / f"{module_name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot build an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
