"""Data and loaders: GPU catalog, model architectures and the vLLM version catalog."""
