"""Pure scheduling core: no I/O, no kubernetes/fastapi/prometheus imports."""
