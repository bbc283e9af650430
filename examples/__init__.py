"""Example extensions of Forge Kernels (importable as ``examples.<module>``)."""
