// Command podserver is the container the real-node tests point the operator's network checks
// at: an HTTP readiness endpoint, a TCP port and a gRPC health service (grpc-go's own
// grpc.health.v1 server), each switched healthy or not by a request to a control port, so a test
// can move a real container's health and watch the operator follow it.
//
// It lives in tools/realkube's module so grpc-go comes at the version, and from the build cache,
// of the control plane's build. `podserver image` writes an image of itself (one layer, no
// registry) for `realkube node --image`.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const usage = `usage:
  podserver serve [--http :8080] [--tcp :8081] [--grpc :9090] [--control :8082] [--http-status 200]
      /ready on --http answers 200 (or 503), --tcp accepts (or is closed), the gRPC health
      service on --grpc answers SERVING (or NOT_SERVING), each until switched on --control:
      GET /http/200, /http/503, /tcp/open, /tcp/closed, /grpc/SERVING, /grpc/NOT_SERVING
      (the overall status and every --service)
  podserver image --out FILE [--ref portmapper.test/podserver:1]
      an image archive ('docker save' form) of this binary, its entrypoint 'serve'
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "image":
		err = image(os.Args[2:])
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podserver:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	httpAddr := fs.String("http", ":8080", "the HTTP server (/ready switched, / always 200)")
	tcpAddr := fs.String("tcp", ":8081", "the TCP port opened and closed")
	grpcAddr := fs.String("grpc", ":9090", "the gRPC health service")
	controlAddr := fs.String("control", ":8082", "the control HTTP server")
	service := fs.String("service", "portmapper.test.Web", "a named service of the health server, switched with the overall status")
	httpStatus := fs.Int("http-status", http.StatusOK, "what /ready answers until switched: 200 or 503")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _ := os.Hostname()

	// As PID 1 the default SIGTERM action does nothing: exit at once, so a deleted pod goes.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		os.Exit(0)
	}()

	var mu sync.Mutex
	readyStatus := *httpStatus
	web := http.NewServeMux()
	web.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		status := readyStatus
		mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s %d\n", host, status)
	})
	web.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s\n", host)
	})
	errs := make(chan error, 3)
	go func() { errs <- http.ListenAndServe(*httpAddr, web) }()

	tcp := &tcpPort{addr: *tcpAddr}
	if err := tcp.open(); err != nil {
		return err
	}

	grpcListener, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	healthServer := health.NewServer()
	healthServer.SetServingStatus(*service, healthpb.HealthCheckResponse_SERVING)
	server := grpc.NewServer()
	healthpb.RegisterHealthServer(server, healthServer)
	go func() { errs <- server.Serve(grpcListener) }()

	control := http.NewServeMux()
	control.HandleFunc("/http/{status}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("status") {
		case "200":
			mu.Lock()
			readyStatus = http.StatusOK
			mu.Unlock()
		case "503":
			mu.Lock()
			readyStatus = http.StatusServiceUnavailable
			mu.Unlock()
		default:
			http.Error(w, "200 or 503", http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	control.HandleFunc("/tcp/{state}", func(w http.ResponseWriter, r *http.Request) {
		var err error
		switch r.PathValue("state") {
		case "open":
			err = tcp.open()
		case "closed":
			tcp.close()
		default:
			http.Error(w, "open or closed", http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	control.HandleFunc("/grpc/{status}", func(w http.ResponseWriter, r *http.Request) {
		status, ok := healthpb.HealthCheckResponse_ServingStatus_value[r.PathValue("status")]
		if !ok {
			http.Error(w, "a grpc.health.v1 serving status", http.StatusBadRequest)
			return
		}
		for _, name := range []string{"", *service} {
			healthServer.SetServingStatus(name, healthpb.HealthCheckResponse_ServingStatus(status))
		}
		fmt.Fprintln(w, "ok")
	})
	go func() { errs <- http.ListenAndServe(*controlAddr, control) }()
	fmt.Printf("podserver %s: http %s, tcp %s, grpc %s, control %s\n", host, *httpAddr, *tcpAddr, *grpcAddr, *controlAddr)
	return <-errs
}

// tcpPort is a listener that accepts and closes connections while open; closed, the port
// refuses them.
type tcpPort struct {
	addr string
	mu   sync.Mutex
	ln   net.Listener
}

func (t *tcpPort) open() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", t.addr)
	if err != nil {
		return err
	}
	t.ln = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	return nil
}

func (t *tcpPort) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ln != nil {
		t.ln.Close()
		t.ln = nil
	}
}

// image writes a one-layer image archive in `docker save` form (what `ctr images import`
// reads) holding this executable at /podserver: the binary is static, so it needs nothing else.
func image(args []string) error {
	fs := flag.NewFlagSet("image", flag.ExitOnError)
	out := fs.String("out", "", "the archive to write")
	ref := fs.String("ref", "portmapper.test/podserver:1", "the image's reference")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("image: --out is required")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	binary, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, dir := range []string{"proc/", "sys/", "dev/", "etc/", "tmp/"} {
		if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "podserver", Mode: 0o755, Size: int64(len(binary)), ModTime: epoch}); err != nil {
		return err
	}
	if _, err := lw.Write(binary); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}
	diff := sha256.Sum256(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/podserver", "serve"}, "WorkingDir": "/"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerDir := hex.EncodeToString(diff[:]) + "/"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{*ref}, "Layers": []string{layerDir + "layer.tar"}}})
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := tar.NewWriter(f)
	if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: layerDir, Mode: 0o755, ModTime: epoch}); err != nil {
		f.Close()
		return err
	}
	for _, file := range []struct {
		name string
		body []byte
	}{{configName, config}, {layerDir + "layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file.name, Mode: 0o644, Size: int64(len(file.body)), ModTime: epoch}); err != nil {
			f.Close()
			return err
		}
		if _, err := w.Write(file.body); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
