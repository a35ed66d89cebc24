"""gang-extender: gang scheduling for GPU jobs beside the stock kube-scheduler."""

__version__ = "0.1.0"
