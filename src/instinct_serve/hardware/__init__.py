"""GPU inventory: parsers for amd-smi (every JSON shape), rocm-smi and KFD/DRM sysfs."""
