"""``python -m forge_kernels.eval.service [flags]``: the same as ``forge-kernels eval-server``."""

from forge_kernels.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["eval-server", *__import__("sys").argv[1:]]))
