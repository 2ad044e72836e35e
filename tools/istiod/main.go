// Command istiod is Istio's pilot-discovery (istiod), unmodified, plus one subcommand of ours,
// `eds`: a sidecar's view of the endpoints istiod sends, read with Istio's own ADS client
// (istio.io/istio/pkg/adsc). The tests run `istiod discovery --kubeconfig …` out of cluster
// against the real control plane and `istiod eds` against its plaintext xDS port, and compare the
// ClusterLoadAssignment of each Service port's cluster (`outbound|<port>||<svc>.<ns>.svc.<domain>`)
// with the EndpointSlices portmapper published (docs/consumers.md, Istio).
//
// A module of its own, so Istio's dependency versions never move those of the control plane
// (tools/realkube). istio.io/istio tags its releases without a `v` (`1.30.3`), so the Go module
// proxy serves only pseudo-versions of it; go.mod pins the newest one the proxy serves.
package main

import (
	"os"
	"syscall"
	"time"

	"istio.io/istio/pilot/cmd/pilot-discovery/app"
	"istio.io/istio/pkg/log"
)

// dieWithParentEnv makes the process exit once the process that started it is gone, as realkube's
// components do: a test harness's child outlives the test thread that started it, so the
// thread-bound Pdeathsig is not enough.
const dieWithParentEnv = "REALKUBE_DIE_WITH_PARENT"

func main() {
	if os.Getenv(dieWithParentEnv) != "" {
		exitWhenParentDies()
	}
	log.EnableKlogWithCobra()
	root := app.NewRootCommand()
	root.AddCommand(edsCommand())
	if err := root.Execute(); err != nil {
		log.Error(err)
		os.Exit(1)
	}
}

// exitWhenParentDies polls the parent pid: a reparented process has lost the process that owned it.
func exitWhenParentDies() {
	parent := os.Getppid()
	go func() {
		for range time.Tick(250 * time.Millisecond) {
			if os.Getppid() != parent {
				// SIGTERM first: istiod shuts down as it does in a pod.
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
				time.Sleep(5 * time.Second)
				os.Exit(1)
			}
		}
	}()
}
