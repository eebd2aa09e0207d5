"""The native engine route: vLLM in a Python environment instead of a container.

Many Instinct hosts (HPC clusters, WSL, locked-down nodes) cannot run Docker. This package
finds a vLLM that can serve there (``discovery``), installs one into a managed ``uv`` venv
pinned to the host's ROCm SDK (``pins``, ``install``, ``alignment``), and supervises
``vllm serve`` as a plain process over a ``Host`` (``launcher``, ``gpus``).

Pure pieces (``versions``, ``pins``, ``alignment``, ``gpus``' ranking and parsing, the
probe parser) do no I/O; the adapters run argv through ``instinct_serve.hosts.Host`` so
everything works the same over ``--host``.
"""
