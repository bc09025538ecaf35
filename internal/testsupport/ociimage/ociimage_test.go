package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteArchive: the layout ctr reads (oci-layout, index.json naming
// the image, blobs), and the same binary gives the same bytes.
func TestWriteArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")
	os.WriteFile(bin, []byte("\x7fELF not really"), 0o755)
	write := func(out string) []byte {
		if err := WriteArchive(bin, "localhost/pause:test", out); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		return b
	}
	a, b := write(filepath.Join(dir, "a.tar")), write(filepath.Join(dir, "b.tar"))
	if !bytes.Equal(a, b) {
		t.Fatal("two archives of one binary differ")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	if _, ok := files["oci-layout"]; !ok {
		t.Fatalf("no oci-layout in %v", keys(files))
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 ||
		index.Manifests[0].Annotations["io.containerd.image.name"] != "localhost/pause:test" {
		t.Fatalf("index.json %s: %v", files["index.json"], err)
	}
	if _, ok := files["blobs/sha256/"+strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")]; !ok {
		t.Fatalf("the manifest blob is missing: %v", keys(files))
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestWriteLayer: an image's layer holds its files (mode 0755, with their
// parent directories), its symbolic links and its empty directories, and
// its config names its entrypoint.
func TestWriteLayer(t *testing.T) {
	out := filepath.Join(t.TempDir(), "img.tar")
	img := Image{Name: "docker.io/library/x:dev", Files: map[string][]byte{"app/bin/x": []byte("x")},
		Symlinks: map[string]string{"var/run": "/run"}, Dirs: []string{"tmp"}, Entrypoint: []string{"/app/bin/x", "run"}}
	if err := Write(img, out); err != nil {
		t.Fatal(err)
	}
	outer := untar(t, mustRead(t, out))
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	blob := func(d string) []byte { return outer["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")].body }
	if err := json.Unmarshal(outer["index.json"].body, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v", err)
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct{ Config struct{ Entrypoint []string } }
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil ||
		strings.Join(config.Config.Entrypoint, " ") != "/app/bin/x run" {
		t.Fatalf("config's entrypoint %v: %v", config.Config.Entrypoint, err)
	}
	layer := untar(t, blob(manifest.Layers[0].Digest))
	for name, want := range map[string]byte{"app/": tar.TypeDir, "app/bin/": tar.TypeDir, "app/bin/x": tar.TypeReg,
		"tmp/": tar.TypeDir, "var/": tar.TypeDir, "var/run": tar.TypeSymlink} {
		if e, ok := layer[name]; !ok || e.hdr.Typeflag != want {
			t.Errorf("layer entry %s: %+v, want type %c", name, e.hdr, want)
		}
	}
	if e := layer["app/bin/x"]; e.hdr.Mode != 0o755 || string(e.body) != "x" {
		t.Errorf("app/bin/x: mode %o, %q", e.hdr.Mode, e.body)
	}
	if e := layer["var/run"]; e.hdr.Linkname != "/run" {
		t.Errorf("var/run links to %q", e.hdr.Linkname)
	}
}

type entry struct {
	hdr  *tar.Header
	body []byte
}

func untar(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		out[h.Name] = entry{h, body}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
