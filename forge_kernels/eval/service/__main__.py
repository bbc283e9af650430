"""``python -m forge_kernels.eval.service [flags]``: the same as ``forge-kernels eval-server``."""

import sys

from forge_kernels.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["eval-server", *sys.argv[1:]]))
