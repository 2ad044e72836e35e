package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// waitHealthy polls url until it answers 200, the component exits, or the wait runs out.
func (p *controlPlane) waitHealthy(ctx context.Context, c *component, url, token string) error {
	client := p.httpClient()
	deadline := time.Now().Add(p.cfg.wait)
	var last string
	for time.Now().Before(deadline) {
		if c.exited() {
			return fmt.Errorf("%s exited (%v) before %s answered; its log:\n%s", c.name, c.err, url, logTail(p.cfg.dir, c.name))
		}
		status, body, err := get(ctx, client, url, token)
		if err == nil && status == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%d %s %v", status, strings.TrimSpace(body), err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not healthy after %s (last answer: %s); its log:\n%s", url, p.cfg.wait, last, logTail(p.cfg.dir, c.name))
}

// httpClient trusts our CA; a component's self-signed serving certificate (the controller
// manager's) is only ever asked for its health, so that check skips verification.
func (p *controlPlane) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.pki.caPEM)
	verify := &tls.Config{RootCAs: pool}
	loose := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // health of a loopback component
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &hostTLS{
			strict: &http.Transport{TLSClientConfig: verify},
			loose:  &http.Transport{TLSClientConfig: loose},
			server: p.serverURL(),
		},
	}
}

type hostTLS struct {
	strict, loose *http.Transport
	server        string
}

func (h *hostTLS) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.String(), h.server) {
		return h.strict.RoundTrip(r)
	}
	return h.loose.RoundTrip(r)
}

func get(ctx context.Context, client *http.Client, url, token string) (int, string, error) {
	return do(ctx, client, http.MethodGet, url, token, "", nil)
}

func do(ctx context.Context, client *http.Client, method, url, token, contentType string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(raw), err
}

func logTail(dir, name string) string {
	raw, err := os.ReadFile(filepath.Join(dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

func kubeconfig(server string, caPEM []byte, user, token string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: realkube
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: realkube
  context: {cluster: realkube, user: %s}
current-context: realkube
`, server, base64.StdEncoding.EncodeToString(caPEM), user, token, user)
}
