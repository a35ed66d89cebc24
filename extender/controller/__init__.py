"""The group controller: cluster state from the watch cache, API writes, the reconciler."""
