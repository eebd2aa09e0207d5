"""instinct-serve: "serve this Hugging Face model" on AMD Instinct GPUs, as a vLLM endpoint."""

__version__ = "0.1.0"
