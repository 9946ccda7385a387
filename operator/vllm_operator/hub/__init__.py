"""Hugging Face Hub gateway: the only package importing huggingface_hub."""
