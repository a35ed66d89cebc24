//go:build tools

// The node binaries this module builds (hack/build-node.sh): kubelet at the
// control plane's release; cmd/fake-gpu-plugin imports the device plugin API.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
