"""The environments that ship with Forge Kernels; importing this module registers them.

Each built-in environment module applies ``@register_environment`` when imported: list it here.
"""

from forge_kernels.env import cuda  # noqa: F401  (registers "cuda")
from forge_kernels.env import triton  # noqa: F401  (registers "triton")
