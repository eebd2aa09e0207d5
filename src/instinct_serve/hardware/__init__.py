"""GPU inventory: pure parsers for amd-smi (every JSON shape), rocm-smi, rocminfo and KFD/DRM
sysfs, the ``detect`` adapter that runs them on a ``Host``, and named GPU profiles."""
