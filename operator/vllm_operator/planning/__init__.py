"""Pure planning: model, GPU, intent and vLLM version in, an engine plan or reasons out."""
