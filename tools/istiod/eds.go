package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"istio.io/istio/pilot/pkg/model"
	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pkg/adsc"
	"istio.io/istio/pkg/log"
)

// lbEndpoint is one endpoint of a ClusterLoadAssignment as the sidecar gets it.
type lbEndpoint struct {
	// Address is the socket address's IP, Port its port.
	Address string `json:"address"`
	Port    uint32 `json:"port"`
	// Addresses lists the additional addresses of a dual-stack endpoint (Envoy's
	// additional_addresses), as "ip:port".
	Addresses []string `json:"additionalAddresses,omitempty"`
	// Health is Envoy's HealthStatus name: HEALTHY, UNHEALTHY, DRAINING, …
	Health string `json:"health"`
}

// snapshot is one line of output: the endpoints of every cluster asked for, after an EDS response.
type snapshot struct {
	// Time is when the response was received (RFC 3339, nanoseconds).
	Time string `json:"time"`
	// Version is the EDS response's version_info.
	Version string `json:"version"`
	// Clusters maps each cluster asked for to its endpoints, sorted; a cluster istiod has not
	// sent (yet) is absent.
	Clusters map[string][]lbEndpoint `json:"clusters"`
}

// edsState merges EDS responses: istiod answers an incremental push with the changed clusters
// only, so the last response alone is not the sidecar's state.
type edsState struct {
	mu       sync.Mutex
	want     []string
	clusters map[string][]lbEndpoint
	out      *json.Encoder
	seen     map[string]bool
}

func (s *edsState) HandleResponse(_ *adsc.ADSC, msg *discovery.DiscoveryResponse) {
	if msg.TypeUrl != v3.EndpointType {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rsc := range msg.Resources {
		cla := &endpoint.ClusterLoadAssignment{}
		if err := proto.Unmarshal(rsc.Value, cla); err != nil {
			fmt.Fprintf(os.Stderr, "eds: decoding a ClusterLoadAssignment: %v\n", err)
			continue
		}
		if !slices.Contains(s.want, cla.ClusterName) {
			continue
		}
		s.seen[cla.ClusterName] = true
		s.clusters[cla.ClusterName] = endpointsOf(cla)
	}
	line := snapshot{
		Time:     time.Now().UTC().Format(time.RFC3339Nano),
		Version:  msg.VersionInfo,
		Clusters: map[string][]lbEndpoint{},
	}
	for _, name := range s.want {
		if s.seen[name] {
			line.Clusters[name] = s.clusters[name]
		}
	}
	if err := s.out.Encode(line); err != nil {
		fmt.Fprintf(os.Stderr, "eds: writing: %v\n", err)
		os.Exit(1)
	}
}

func endpointsOf(cla *endpoint.ClusterLoadAssignment) []lbEndpoint {
	out := []lbEndpoint{}
	for _, locality := range cla.Endpoints {
		for _, lb := range locality.LbEndpoints {
			ep := lb.GetEndpoint()
			sock := ep.GetAddress().GetSocketAddress()
			if sock == nil {
				continue
			}
			e := lbEndpoint{
				Address: sock.GetAddress(),
				Port:    sock.GetPortValue(),
				Health:  lb.GetHealthStatus().String(),
			}
			for _, extra := range ep.GetAdditionalAddresses() {
				if a := extra.GetAddress().GetSocketAddress(); a != nil {
					if ip, err := netip.ParseAddr(a.GetAddress()); err == nil {
						e.Addresses = append(e.Addresses, netip.AddrPortFrom(ip, uint16(a.GetPortValue())).String())
					}
				}
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Address != out[j].Address {
			return out[i].Address < out[j].Address
		}
		return out[i].Port < out[j].Port
	})
	return out
}

func edsCommand() *cobra.Command {
	var (
		addr, namespace, workload, ip, clusterID string
		clusters                                 []string
		once                                     bool
		timeout                                  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "eds --cluster 'outbound|8080||svc.ns.svc.cluster.local' …",
		Short: "Connect to istiod's xDS as a sidecar (Istio's pkg/adsc) and print the EDS of the given clusters as JSON lines",
		Long: `Connects to istiod's plaintext xDS port as a sidecar proxy, with Istio's own ADS client
(pkg/adsc: CDS, then EDS of every EDS cluster), and prints one JSON line after every EDS response:
{"time", "version", "clusters": {name: [{"address", "port", "additionalAddresses", "health"}]}},
with the merged state of the clusters given by --cluster (those istiod has sent). Runs until
killed, or with --once exits after the first line that has every cluster.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if len(clusters) == 0 {
				return fmt.Errorf("no --cluster given")
			}
			// Istio logs to stdout by default; stdout is the JSON lines'.
			logging := log.DefaultOptions()
			logging.OutputPaths = []string{"stderr"}
			logging.ErrorOutputPaths = []string{"stderr"}
			if err := log.Configure(logging); err != nil {
				return err
			}
			state := &edsState{
				want:     clusters,
				clusters: map[string][]lbEndpoint{},
				seen:     map[string]bool{},
				out:      json.NewEncoder(os.Stdout),
			}
			client, err := adsc.New(addr, &adsc.ADSConfig{
				Config: adsc.Config{
					Namespace: namespace,
					Workload:  workload,
					IP:        ip,
					NodeType:  model.SidecarProxy,
					// What an injected sidecar sends (its cluster is istiod's default one).
					Meta: &structpb.Struct{Fields: map[string]*structpb.Value{
						"CLUSTER_ID": structpb.NewStringValue(clusterID),
					}},
				},
				InitialDiscoveryRequests: []*discovery.DiscoveryRequest{{TypeUrl: v3.ClusterType}},
				ResponseHandler:          state,
			})
			if err != nil {
				return fmt.Errorf("connecting to %s: %w", addr, err)
			}
			defer client.Close()
			if err := client.Run(); err != nil {
				return fmt.Errorf("starting the ADS stream to %s: %w", addr, err)
			}
			deadline := time.Now().Add(timeout)
			for {
				if once {
					state.mu.Lock()
					all := len(state.seen) == len(state.want)
					state.mu.Unlock()
					if all {
						return nil
					}
				}
				if timeout > 0 && time.Now().After(deadline) {
					return fmt.Errorf("timed out after %s waiting for the EDS of %s", timeout, strings.Join(clusters, ", "))
				}
				time.Sleep(50 * time.Millisecond)
			}
		},
	}
	cmd.Flags().StringVar(&addr, "xds", "127.0.0.1:15010", "istiod's plaintext xDS address")
	cmd.Flags().StringVar(&namespace, "namespace", "default", "the sidecar's namespace")
	cmd.Flags().StringVar(&workload, "workload", "eds-client", "the sidecar's workload name")
	cmd.Flags().StringVar(&ip, "ip", "10.255.255.1", "the sidecar's IP (node ID)")
	cmd.Flags().StringVar(&clusterID, "cluster-id", "Kubernetes", "the sidecar's CLUSTER_ID metadata (istiod's --clusterID)")
	cmd.Flags().StringArrayVar(&clusters, "cluster", nil, "a cluster whose ClusterLoadAssignment to print (repeatable)")
	cmd.Flags().BoolVar(&once, "once", false, "exit after the first line that has every cluster")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: never)")
	return cmd
}
