"""Benchmarks of gang-extender against the stock kube-scheduler and scheduler-plugins coscheduling."""
