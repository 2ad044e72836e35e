// Command realkube is a real Kubernetes control plane for portmapper's tests and benches: one
// multi-call binary (etcd, kube-apiserver, kube-controller-manager, kube-proxy) built from the
// unforked Go modules, and `up`, which starts the first three as separate processes on loopback.
//
// Each component runs in its own process, configured by the upstream binaries' own flags: the
// flags are the stable interface of k8s.io/kubernetes, its Go APIs are not.
package main

import (
	"fmt"
	"os"
	"strings"
	_ "time/tzdata" // kube-apiserver and kube-controller-manager validate CronJob time zones

	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json, as upstream mains
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream mains
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as upstream mains
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
)

const usage = `usage: realkube COMMAND [FLAGS]

commands:
  up                       etcd, kube-apiserver and (with --controllers) kube-controller-manager
                           as separate processes on loopback; see 'realkube up --help'
  etcd                     etcd, with etcd's own flags
  kube-apiserver           kube-apiserver, with its own flags
  kube-controller-manager  kube-controller-manager, with its own flags
  kube-proxy               kube-proxy, with its own flags
  kubelet                  the kubelet, with its own flags
  node                     containerd and a kubelet as a node of the plane in --dir, in a private
                           mount namespace; see 'realkube node --help'
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	command, args := os.Args[1], os.Args[2:]
	if os.Getenv(dieWithParentEnv) != "" {
		exitWhenParentDies()
	}
	switch command {
	case "up":
		os.Exit(up(args))
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		os.Exit(runCobra(apiserver.NewAPIServerCommand(), args))
	case "kube-controller-manager":
		os.Exit(runCobra(kcm.NewControllerManagerCommand(), args))
	case "kube-proxy":
		os.Exit(runCobra(proxy.NewProxyCommand(), args))
	case "kubelet":
		if len(args) > 0 && strings.HasPrefix(args[0], kubeletMountNSFlag) {
			os.Exit(enterMountNS(strings.TrimPrefix(args[0], kubeletMountNSFlag), args[1:]))
		}
		os.Exit(runKubelet(args))
	case "node":
		os.Exit(node(args))
	case nodeHolderCommand:
		os.Exit(nodeHolder(args))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "realkube: unknown command %q\n%s", command, usage)
		os.Exit(2)
	}
}
