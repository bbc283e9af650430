"""The built-in task set: reference modules and Triton solutions under ``level{1,2,3}/``.

Each task is two files, ``levelN/<stem>.py`` (the KernelBench-format reference) and
``levelN/<stem>_solution.py`` (a ``ModelNew`` built from ``@triton.jit`` kernels), plus one
entry in :mod:`forge_kernels.tasks.builtin.registry` giving its shapes and tags.
"""
