package awsenv

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// The fixture is the environment the reference's DaemonSet
// (config/master/aws-k8s-cni.yaml of its module) gives its containers, one
// "container NAME=value" line each (a downward-API value as
// "<fieldRef PATH>"). Regenerate it from the module make tools unpacks:
//
//	make tools && go test ./internal/awsenv -run TestManifestFixture -update
const fixture = "testdata/aws-k8s-cni.env"

var update = flag.Bool("update", false, "rewrite "+fixture+" from the reference module ($VPCCNI_REFCNI_SRC)")

// manifestEnv reads the env of the DaemonSet's containers (init containers
// first) from a multi-document manifest, strictly: a field the Kubernetes
// API does not have is an error.
func manifestEnv(manifest []byte) ([]string, error) {
	var lines []string
	found := false
	for _, doc := range bytes.Split(manifest, []byte("\n---")) {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil || kind.Kind != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(doc, &ds); err != nil {
			return nil, fmt.Errorf("DaemonSet: %w", err)
		}
		found = true
		spec := ds.Spec.Template.Spec
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			for _, e := range c.Env {
				v := e.Value
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					v = "<fieldRef " + e.ValueFrom.FieldRef.FieldPath + ">"
				}
				lines = append(lines, c.Name+" "+e.Name+"="+v)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("no DaemonSet in the manifest")
	}
	return lines, nil
}

func readFixture(t *testing.T) [][3]string {
	t.Helper()
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	var out [][3]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		container, kv, ok := strings.Cut(line, " ")
		name, val, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 {
			t.Fatalf("%s: malformed line %q", fixture, line)
		}
		out = append(out, [3]string{container, name, val})
	}
	return out
}

// TestManifestFixture: the fixture is what the reference module's
// manifest says (with -update, it is rewritten from it). Without the
// module (a plain go test; make test always has it) there is nothing to
// compare with: it skips, but under CI that is a failure, never a pass.
func TestManifestFixture(t *testing.T) {
	src := os.Getenv("VPCCNI_REFCNI_SRC")
	if src == "" {
		const why = "VPCCNI_REFCNI_SRC is unset: run through make (make tools unpacks the reference module)"
		if os.Getenv("CI") != "" {
			t.Fatal(why + "; under CI this test must run")
		}
		t.Skip(why)
	}
	manifest, err := os.ReadFile(filepath.Join(src, "config", "master", "aws-k8s-cni.yaml"))
	if err != nil {
		t.Fatalf("the reference module (make tools unpacks it): %v", err)
	}
	lines, err := manifestEnv(manifest)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Generated from the reference's config/master/aws-k8s-cni.yaml; see manifest_test.go.\n" + strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.WriteFile(fixture, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not the reference module's manifest: regenerate it (-update)\nwant:\n%s", fixture, want)
	}
}

// TestManifestEnvAccountedFor: every variable the reference's DaemonSet
// sets is in the catalogue, for the container that reads it. The ones
// not supported yet are listed in the test's log.
func TestManifestEnvAccountedFor(t *testing.T) {
	entries := readFixture(t)
	if len(entries) < 20 {
		t.Fatalf("%s has %d variables: not the reference's manifest", fixture, len(entries))
	}
	var planned []string
	for _, e := range entries {
		container, name := e[0], e[1]
		v, ok := Lookup(name)
		if !ok {
			t.Errorf("%s sets %s, which the catalogue does not account for", container, name)
			continue
		}
		if container != "aws-eks-nodeagent" && v.Container != container && !(name == "ENABLE_IPv6" && container == Init) {
			t.Errorf("%s: catalogued for %s, set in the manifest for %s", name, v.Container, container)
		}
		if v.Note == "" {
			t.Errorf("%s: no note (what it does here, or why not)", name)
		}
		if v.Status == Planned {
			planned = append(planned, name)
		}
	}
	sort.Strings(planned)
	t.Logf("set by the reference's DaemonSet and not supported yet (%d): %s", len(planned), strings.Join(planned, ", "))
}
