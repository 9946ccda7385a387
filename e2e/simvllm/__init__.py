"""A simulated vLLM for tests: /health and /metrics in the pinned version's exact exposition,
driven by scenario files with a time axis (steady, burst OOM, chronic creep, KV saturation,
low prefix-cache hit rate). One HTTP listener per simulated pod."""
