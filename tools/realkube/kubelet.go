package main

import (
	"context"

	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// runKubelet is the kubelet with its upstream flags: `realkube node` starts it against the
// containerd it supervises, in the node's private mount namespace.
func runKubelet(args []string) int {
	return runCobra(kubelet.NewKubeletCommand(context.Background()), args)
}
