"""NVML gateway: the only package importing pynvml (nvidia-ml-py), used by `vllm-operator probe`."""
