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
