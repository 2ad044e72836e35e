package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"
)

// applyCRDs server-side applies each --crd manifest and waits until every CRD is Established.
// kube-controller-manager's garbage collector learns a kind only at its discovery resync (30 s),
// so a CRD applied before it starts makes owner references to that kind work at once.
func (p *controlPlane) applyCRDs(ctx context.Context) error {
	for _, file := range p.cfg.crds {
		raw, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			name := crdName(doc)
			if name == "" {
				continue
			}
			if err := p.applyCRD(ctx, name, doc); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	return nil
}

var nameLine = regexp.MustCompile(`(?m)^metadata:\s*\n(?:\s+.*\n)*?\s+name:\s*(\S+)`)

func crdName(doc string) string {
	if !strings.Contains(doc, "kind: CustomResourceDefinition") {
		return ""
	}
	m := nameLine.FindStringSubmatch(doc)
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"'`)
}

func (p *controlPlane) applyCRD(ctx context.Context, name, doc string) error {
	url := p.serverURL() + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + name
	token := p.pki.tokens["admin"]
	client := p.httpClient()
	status, body, err := do(ctx, client, http.MethodPatch, url+"?fieldManager=realkube&force=true",
		token, "application/apply-patch+yaml", []byte(doc))
	if err != nil || status >= 300 {
		return fmt.Errorf("applying CRD %s: %d %s %v", name, status, body, err)
	}
	deadline := time.Now().Add(p.cfg.wait)
	for time.Now().Before(deadline) {
		if _, body, err := get(ctx, client, url, token); err == nil && established(body) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("CRD %s not Established after %s", name, p.cfg.wait)
}

func established(body string) bool {
	var crd struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal([]byte(body), &crd) != nil {
		return false
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == "Established" && c.Status == "True" {
			return true
		}
	}
	return false
}
