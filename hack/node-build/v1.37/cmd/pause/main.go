// pause: the sandbox process of every pod on the local real nodes, imported as
// registry.k8s.io/pause:3.10 (the image containerd's CRI asks for; no registry
// is reachable). Like the upstream one it only waits, and reaps the zombies a
// shared PID namespace leaves it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
