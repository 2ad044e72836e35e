// Command coredns is CoreDNS with only the plugins a cluster's DNS needs to answer for Services
// from their EndpointSlices (kubernetes, log, errors): the consumer whose per-port SRV records and
// union A records docs/consumers.md describes, run by the tests against the real control plane.
// Its flags are CoreDNS's (-conf, -dns.port). A module of its own, so CoreDNS's dependency
// versions never move those of the control plane (tools/realkube).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func main() {
	dnsserver.Directives = []string{"errors", "log", "kubernetes"}
	coremain.Run()
}
