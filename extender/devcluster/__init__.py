"""A real local control plane on loopback (etcd, kube-apiserver, controller-manager, kube-scheduler, kwok) for tests and the demo."""
