"""The only package that talks to the Kubernetes API: watch cache, binder, writers, controller."""
