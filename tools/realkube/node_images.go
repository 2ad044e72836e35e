package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// writeBusyboxImage writes a one-layer image archive in `docker save` form (what `ctr images
// import` reads): the static busybox at /bin/busybox and a link to it for every applet, so no
// registry is needed. The layer is the same bytes for every image built from one busybox, so
// containerd stores it once.
func writeBusyboxImage(path, ref, busybox string, entrypoint []string) error {
	layer, err := busyboxLayer(busybox)
	if err != nil {
		return err
	}
	diff := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(diff[:])
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/bin"},
			"WorkingDir": "/",
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]string{{"created_by": "realkube node: " + busybox}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(diff[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{ref}, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		body []byte
	}{{configName, config}, {layerName, layer}, {"manifest.json", manifest}} {
		if strings.Contains(f.name, "/") {
			dir := f.name[:strings.Index(f.name, "/")+1]
			if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
		}
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := w.Write(f.body); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// busyboxLayer is the layer tar: the root's directories, /bin/busybox and its applet links.
func busyboxLayer(busybox string) ([]byte, error) {
	binary, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	epoch := time.Unix(0, 0)
	for _, dir := range []struct {
		name string
		mode int64
	}{{"bin/", 0o755}, {"etc/", 0o755}, {"tmp/", 0o1777}, {"proc/", 0o555}, {"sys/", 0o555}, {"dev/", 0o755}} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir.name, Mode: dir.mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(binary)), ModTime: epoch}); err != nil {
		return nil, err
	}
	if _, err := w.Write(binary); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
