// Package ociimage packs files as a one-layer OCI image layout tarball
// that `ctr images import` reads: the containerd suites (e2e, bench) need
// a sandbox ("pause") image, and the kubelet specs vpccni's own images,
// and this machine reaches no registry.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// OCI media types of the one-layer image (image-spec v1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

// epoch is every timestamp of the image: the same binary gives the same
// digests on every run.
var epoch = time.Unix(0, 0).UTC()

// Image is what an image holds: its files (path in the image, without a
// leading slash -> content; every file is mode 0755), symbolic links
// (path -> target), empty directories, and the entrypoint its config
// names.
type Image struct {
	Name       string // the name containerd stores it under
	Files      map[string][]byte
	Symlinks   map[string]string
	Dirs       []string
	Entrypoint []string
}

// WriteArchive packs binary as /pause in an image named name: the
// sandbox image.
func WriteArchive(binary, name, out string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	return Write(Image{Name: name, Files: map[string][]byte{"pause": bin}, Entrypoint: []string{"/pause"}}, out)
}

// Write packs img in an OCI image layout tarball (oci-layout,
// index.json, blobs/sha256/…) at out: one uncompressed layer, a config
// with its entrypoint, a manifest, and an index naming the image by the
// annotation containerd takes the image's name from.
func Write(img Image, out string) error {
	layer, err := tarOf(img.Files, 0o755, img.Symlinks, img.Dirs)
	if err != nil {
		return err
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) descriptor {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[hex.EncodeToString(sum[:])] = b
		return descriptor{MediaType: mediaType, Digest: d, Size: len(b)}
	}
	layerDesc := add(mediaLayer, layer)
	config, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.Entrypoint},
		// An uncompressed layer's diff ID is its own digest.
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
		"history": []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "vpccni test suite"}},
	})
	if err != nil {
		return err
	}
	configDesc := add(mediaConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaManifest, "config": configDesc, "layers": []descriptor{layerDesc}})
	if err != nil {
		return err
	}
	manifestDesc := add(mediaManifest, manifest)
	manifestDesc.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          img.Name,
		"org.opencontainers.image.ref.name": "e2e",
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaIndex, "manifests": []descriptor{manifestDesc}})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": index,
	}
	for hexDigest, b := range blobs {
		files["blobs/sha256/"+hexDigest] = b
	}
	archive, err := tarOf(files, 0o644, nil, nil)
	if err != nil {
		return err
	}
	return os.WriteFile(out, archive, 0o644)
}

// tarOf is a tar of regular files, symbolic links and directories (with
// their parent directories) owned by root, in a fixed order.
func tarOf(files map[string][]byte, mode int64, links map[string]string, emptyDirs []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	parents := func(name string) error {
		for i := 0; i < len(name); i++ {
			if name[i] == '/' && !dirs[name[:i+1]] {
				dirs[name[:i+1]] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name[:i+1], Mode: 0o755, ModTime: epoch}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, d := range slices.Sorted(slices.Values(emptyDirs)) {
		if err := parents(strings.TrimSuffix(d, "/") + "/"); err != nil {
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := parents(name); err != nil {
			return nil, err
		}
		b := files[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, fmt.Errorf("tar %s: %w", name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(links)) {
		if err := parents(name); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: links[name], Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
