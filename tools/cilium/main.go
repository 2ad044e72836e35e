// cilium-lb runs Cilium's load-balancing control plane, the cells cilium-agent runs for
// Kubernetes Services (pkg/loadbalancer/cell: the Kubernetes reflectors, the statedb tables and
// the writer that matches backends to frontends, the reconciler that writes the BPF maps), fed by
// Cilium's own Kubernetes client from a kubeconfig (--k8s-kubeconfig-path), and prints what it
// programs as JSON lines on stdout: one snapshot after the initial sync and one after every change
// of the frontends table.
//
// The cell list is that of Cilium's own load-balancer REPL (pkg/loadbalancer/repl/main.go in
// v1.20.2); none of Cilium's logic is copied. With loadbalancer.TestConfig present, the BPF maps
// are real unpinned kernel maps when the real uid is 0 and in-memory fake maps otherwise
// (pkg/loadbalancer/maps/lbmaps.go); --fake-maps sets the real uid to nobody (keeping the
// effective uid, so the kubeconfig stays readable) to get the fake maps as root too.
//
// Each snapshot has every frontend of the namespace given by --namespace (all if empty), with its
// Service, port name, status and the backends the writer selected for it, and the service BPF
// map as the datapath reads it: per frontend address, the backend addresses in its slots. The
// HealthCheckNodePort server (pkg/loadbalancer/healthserver, part of the same cells) answers for
// eTP=Local Services on the snapshot's healthAddress, counting the local backends of the node
// named by K8S_NODE_NAME.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
	"github.com/spf13/pflag"

	daemonk8s "github.com/cilium/cilium/daemon/k8s"
	cmtypes "github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/datapath/tables"
	envoyCfg "github.com/cilium/cilium/pkg/envoy/config"
	"github.com/cilium/cilium/pkg/hive"
	"github.com/cilium/cilium/pkg/k8s/client"
	k8sTables "github.com/cilium/cilium/pkg/k8s/tables"
	"github.com/cilium/cilium/pkg/kpr"
	"github.com/cilium/cilium/pkg/lbipamconfig"
	"github.com/cilium/cilium/pkg/loadbalancer"
	lbcell "github.com/cilium/cilium/pkg/loadbalancer/cell"
	"github.com/cilium/cilium/pkg/loadbalancer/healthserver"
	"github.com/cilium/cilium/pkg/loadbalancer/maps"
	"github.com/cilium/cilium/pkg/loadbalancer/writer"
	"github.com/cilium/cilium/pkg/maglev"
	"github.com/cilium/cilium/pkg/metrics"
	"github.com/cilium/cilium/pkg/node"
	"github.com/cilium/cilium/pkg/nodeipamconfig"
	"github.com/cilium/cilium/pkg/option"
	"github.com/cilium/cilium/pkg/source"
)

// Backend is one backend the writer selected for a frontend.
type Backend struct {
	Address   string   `json:"address"`
	State     string   `json:"state"`
	PortNames []string `json:"portNames"`
	NodeName  string   `json:"nodeName,omitempty"`
}

// Frontend is one row of the frontends table.
type Frontend struct {
	Service  string    `json:"service"`
	PortName string    `json:"portName"`
	Address  string    `json:"address"`
	Type     string    `json:"type"`
	Status   string    `json:"status"`
	Error    string    `json:"error,omitempty"`
	Backends []Backend `json:"backends"`
}

// ServiceEntry is a frontend's entries in the service BPF map.
type ServiceEntry struct {
	// Count is the number of slots new connections are balanced over (slots 1..Count).
	Count int `json:"count"`
	// QCount is the number of slots after those, kept for existing connections only.
	QCount int `json:"qcount"`
	// Slots are the backends in slots 1..Count+QCount, in slot order.
	Slots []MapBackend `json:"slots"`
}

// MapBackend is a backend in a service map slot.
type MapBackend struct {
	Address string `json:"address"`
	State   string `json:"state"`
}

// Snapshot is one line of output.
type Snapshot struct {
	// Seq counts snapshots from 1.
	Seq int `json:"seq"`
	// Time is when the snapshot was taken (RFC 3339, nanoseconds).
	Time string `json:"time"`
	// Frontends of the selected namespace, sorted by address.
	Frontends []Frontend `json:"frontends"`
	// Maps is the service BPF map: frontend address → its entries.
	Maps map[string]ServiceEntry `json:"maps"`
	// HealthAddress is the loopback address Cilium's HealthCheckNodePort server listens on in
	// this test configuration (one per process), on each eTP=Local Service's
	// spec.healthCheckNodePort; cilium-agent listens on the node's addresses.
	HealthAddress string `json:"healthAddress"`
}

var (
	namespace = pflag.String("namespace", "", "only frontends of Services in this namespace (all if empty)")
	fakeMaps  = pflag.Bool("fake-maps", false, "use Cilium's in-memory fake BPF maps even as root (sets the real uid to 65534)")
	once      = pflag.Bool("once", false, "print one snapshot after the initial sync and exit")
)

func main() {
	h := newHive()
	h.RegisterFlags(pflag.CommandLine)
	pflag.Parse()
	if *fakeMaps && os.Getuid() == 0 {
		// lbmaps.go picks fake maps when os.Getuid() != 0: change the real uid only.
		if err := syscall.Setresuid(65534, 0, 0); err != nil {
			fmt.Fprintf(os.Stderr, "cilium-lb: setresuid: %v\n", err)
			os.Exit(1)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := h.Start(log, ctx); err != nil {
		fmt.Fprintf(os.Stderr, "cilium-lb: start: %v\n", err)
		os.Exit(1)
	}
	err := printLoop(ctx)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if stopErr := h.Stop(log, stopCtx); stopErr != nil && err == nil {
		err = stopErr
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "cilium-lb: %v\n", err)
		os.Exit(1)
	}
}

// Filled by the invoke function when the hive is populated.
var (
	lbWriter *writer.Writer
	lbMaps   maps.LBMaps
	initWait loadbalancer.InitWaitFunc
)

func newHive() *hive.Hive {
	return hive.New(
		// The cells of pkg/loadbalancer/repl/main.go (v1.20.2).
		client.Cell,
		daemonk8s.ResourcesCell,
		k8sTables.TablesCell,
		maglev.Cell,
		node.LocalNodeStoreTestCell,
		metrics.Cell,
		lbipamconfig.Cell,
		nodeipamconfig.Cell,
		cell.Config(loadbalancer.TestConfig{}),
		cell.Config(envoyCfg.SecretSyncConfig{}),
		cell.Provide(
			func() cmtypes.ClusterInfo { return cmtypes.ClusterInfo{} },
			source.NewSources,
			tables.NewNodeAddressTable,
			statedb.RWTable[tables.NodeAddress].ToTable,
			func() *option.DaemonConfig {
				return &option.DaemonConfig{
					EnableIPv4: true,
					EnableIPv6: true,
				}
			},
			func() kpr.KPRConfig {
				return kpr.KPRConfig{
					KubeProxyReplacement: true,
				}
			},
			func(cfg loadbalancer.TestConfig) *loadbalancer.TestConfig {
				return &cfg
			},
		),
		lbcell.Cell,
		cell.Invoke(func(w *writer.Writer, m maps.LBMaps, wait loadbalancer.InitWaitFunc) {
			lbWriter, lbMaps, initWait = w, m, wait
		}),
	)
}

func printLoop(ctx context.Context) error {
	if err := initWait(ctx); err != nil {
		return fmt.Errorf("waiting for the initial sync: %w", err)
	}
	out := json.NewEncoder(os.Stdout)
	seq := 0
	var last []byte
	for {
		fes, watch := lbWriter.Frontends().AllWatch(lbWriter.ReadTxn())
		snap := Snapshot{Frontends: []Frontend{}, Maps: map[string]ServiceEntry{}}
		addrs := map[string]bool{}
		for fe := range fes {
			if *namespace != "" && fe.ServiceName.Namespace() != *namespace {
				continue
			}
			f := Frontend{
				Service:  fe.ServiceName.String(),
				PortName: string(fe.PortName),
				Address:  fe.Address.StringWithProtocol(),
				Type:     string(fe.Type),
				Status:   fe.Status.Kind.String(),
				Error:    fe.Status.GetError(),
				Backends: []Backend{},
			}
			for be := range fe.Backends {
				state, _ := be.State.String()
				if be.Unhealthy {
					state += "+unhealthy"
				}
				f.Backends = append(f.Backends, Backend{
					Address:   be.Address.StringWithProtocol(),
					State:     state,
					PortNames: append([]string{}, be.PortNames...),
					NodeName:  be.NodeName,
				})
			}
			slices.SortFunc(f.Backends, func(a, b Backend) int { return strings.Compare(a.Address, b.Address) })
			snap.Frontends = append(snap.Frontends, f)
			addrs[f.Address] = true
		}
		slices.SortFunc(snap.Frontends, func(a, b Frontend) int { return strings.Compare(a.Address, b.Address) })
		for addr, bes := range dumpServiceMap(lbMaps) {
			if addrs[addr] {
				snap.Maps[addr] = bes
			}
		}
		// Print only when something we show changed (the table also changes for other namespaces).
		body, err := json.Marshal(struct {
			F []Frontend
			M map[string]ServiceEntry
		}{snap.Frontends, snap.Maps})
		if err != nil {
			return err
		}
		if string(body) != string(last) {
			last = body
			seq++
			snap.Seq = seq
			snap.HealthAddress = healthserver.ChooseHealthServerLoopbackAddressForTesting().String()
			snap.Time = time.Now().UTC().Format(time.RFC3339Nano)
			if err := out.Encode(snap); err != nil {
				return err
			}
			if *once {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-watch:
		}
	}
}

var (
	svcLine    = regexp.MustCompile(`^SVC: ID=\S+ ADDR=(\S+) SLOT=(\d+) BEID=(\d+) `)
	masterLine = regexp.MustCompile(`^SVC: ID=\S+ ADDR=(\S+) SLOT=0 .* COUNT=(\d+) QCOUNT=(\d+) `)
	beLine     = regexp.MustCompile(`^BE: ID=(\d+) ADDR=(\S+) STATE=(\S+)`)
)

// dumpServiceMap reads the service and backend BPF maps through Cilium's own dump
// (maps.DumpLBMaps, what `lb/maps-dump` prints) and joins them: per frontend address, the
// master entry's COUNT and QCOUNT and the backends in slots 1..n, in slot order. The datapath
// picks a new connection's backend among the first COUNT slots; the QCOUNT slots after them
// (terminating while an active backend remains, quarantined) are kept for existing
// connections. The "/i" scope suffix (internal scope of eTP=Local services) is kept, so such
// entries show apart from the external ones.
func dumpServiceMap(m maps.LBMaps) map[string]ServiceEntry {
	type slot struct {
		n    int
		beID string
	}
	slotsOf := map[string][]slot{}
	out := map[string]ServiceEntry{}
	bes := map[string]MapBackend{}
	for _, line := range maps.DumpLBMaps(m, false, nil) {
		if g := svcLine.FindStringSubmatch(line); g != nil {
			n, _ := strconv.Atoi(g[2])
			slotsOf[g[1]] = append(slotsOf[g[1]], slot{n, g[3]})
		} else if g := masterLine.FindStringSubmatch(line); g != nil {
			count, _ := strconv.Atoi(g[2])
			qcount, _ := strconv.Atoi(g[3])
			e := out[g[1]]
			e.Count, e.QCount = count, qcount
			out[g[1]] = e
		} else if g := beLine.FindStringSubmatch(line); g != nil {
			bes[g[1]] = MapBackend{Address: g[2], State: g[3]}
		}
	}
	for addr, slots := range slotsOf {
		slices.SortFunc(slots, func(a, b slot) int { return a.n - b.n })
		e := out[addr]
		e.Slots = []MapBackend{}
		for _, s := range slots {
			be, ok := bes[s.beID]
			if !ok {
				be = MapBackend{Address: "unknown backend ID " + s.beID, State: "missing"}
			}
			e.Slots = append(e.Slots, be)
		}
		out[addr] = e
	}
	for addr, e := range out {
		if e.Slots == nil {
			e.Slots = []MapBackend{}
			out[addr] = e
		}
	}
	return out
}
