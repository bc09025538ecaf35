// Package ociimage packs a static binary as a one-layer OCI image layout
// tarball that `ctr images import` reads: the containerd suites (e2e,
// bench) need a sandbox ("pause") image and this machine reaches no
// registry.
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

// WriteArchive packs binary as /pause in an OCI image layout tarball
// (oci-layout, index.json, blobs/sha256/…) that `ctr images import`
// reads: one uncompressed layer, a config whose entrypoint is /pause, a
// manifest, and an index naming the image by the annotation containerd
// takes the image's name from.
func WriteArchive(binary, name, out string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	layer, err := tarOf(map[string][]byte{"pause": bin}, 0o755)
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
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		// An uncompressed layer's diff ID is its own digest.
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
		"history": []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "vpccni e2e suite"}},
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
		"io.containerd.image.name":          name,
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
	archive, err := tarOf(files, 0o644)
	if err != nil {
		return err
	}
	return os.WriteFile(out, archive, 0o644)
}

// tarOf is a tar of regular files (with their parent directories) owned
// by root, in a fixed order.
func tarOf(files map[string][]byte, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for i := 0; i < len(name); i++ {
			if name[i] == '/' && !dirs[name[:i+1]] {
				dirs[name[:i+1]] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name[:i+1], Mode: 0o755, ModTime: epoch}); err != nil {
					return nil, err
				}
			}
		}
		b := files[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, fmt.Errorf("tar %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
