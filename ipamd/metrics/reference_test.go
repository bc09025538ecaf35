package metrics_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vpccni/vpccni/ipamd/metrics"
)

// The fixture is every metric the reference defines, one "name type
// label,label" line each, read from its module's source by
// referenceMetrics. Regenerate it from the module make tools unpacks:
//
//	make tools && go test ./ipamd/metrics -run TestReferenceMetricsFixture -update
const metricsFixture = "testdata/reference-metrics.txt"

var update = flag.Bool("update", false, "rewrite "+metricsFixture+" from the reference module ($VPCCNI_REFCNI_SRC)")

// The reference's files that define metrics.
var referenceMetricFiles = []string{"utils/prometheusmetrics/prometheusmetrics.go", "pkg/version/info.go"}

// refMetric is one metric of the reference's.
type refMetric struct {
	name, typ string
	labels    []string
}

func (m refMetric) String() string { return m.name + " " + m.typ + " " + strings.Join(m.labels, ",") }

// constructors are the client_golang constructors the reference calls,
// and the metric type each makes.
var constructors = map[string]string{
	"NewCounter": "counter", "NewCounterVec": "counter", "NewGauge": "gauge", "NewGaugeVec": "gauge",
	"NewSummary": "summary", "NewSummaryVec": "summary", "NewHistogram": "histogram", "NewHistogramVec": "histogram",
}

// referenceMetrics finds every prometheus.NewX(prometheus.XOpts{Name:
// "..."}, []string{...}) call in the files: the metric's name, its type
// and its label names.
func referenceMetrics(src string) ([]refMetric, error) {
	var out []refMetric
	for _, rel := range referenceMetricFiles {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(src, rel), nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
				return true
			}
			typ, ok := constructors[sel.Sel.Name]
			if !ok {
				return true
			}
			opts, ok := call.Args[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			m := refMetric{typ: typ}
			for _, e := range opts.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
						if lit, ok := kv.Value.(*ast.BasicLit); ok {
							m.name, _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			if len(call.Args) > 1 {
				if labels, ok := call.Args[1].(*ast.CompositeLit); ok {
					for _, e := range labels.Elts {
						if lit, ok := e.(*ast.BasicLit); ok {
							l, _ := strconv.Unquote(lit.Value)
							m.labels = append(m.labels, l)
						}
					}
				}
			}
			if m.name != "" {
				out = append(out, m)
			}
			return true
		})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no metric found in %v", referenceMetricFiles)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func readMetricsFixture(t *testing.T) []refMetric {
	t.Helper()
	b, err := os.ReadFile(metricsFixture)
	if err != nil {
		t.Fatal(err)
	}
	var out []refMetric
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, " ")
		if len(fields) != 3 {
			t.Fatalf("%s: malformed line %q", metricsFixture, line)
		}
		m := refMetric{name: fields[0], typ: fields[1]}
		if fields[2] != "" {
			m.labels = strings.Split(fields[2], ",")
		}
		out = append(out, m)
	}
	return out
}

// TestReferenceMetricsFixture: the fixture is what the reference module's
// source defines (with -update, it is rewritten from it).
func TestReferenceMetricsFixture(t *testing.T) {
	src := os.Getenv("VPCCNI_REFCNI_SRC")
	if src == "" {
		t.Skip("VPCCNI_REFCNI_SRC is unset: run through make (make tools unpacks the reference module)")
	}
	ms, err := referenceMetrics(src)
	if err != nil {
		t.Fatalf("the reference module (make tools unpacks it): %v", err)
	}
	var b strings.Builder
	b.WriteString("# Generated from the reference's " + strings.Join(referenceMetricFiles, " and ") + "; see reference_test.go.\n")
	for _, m := range ms {
		b.WriteString(m.String() + "\n")
	}
	if *update {
		if err := os.WriteFile(metricsFixture, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(metricsFixture)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != b.String() {
		t.Fatalf("%s is not the reference module's metrics: regenerate it (-update)\nwant:\n%s", metricsFixture, b.String())
	}
}

// exercised is a registry with every series the reference's exposed
// metrics can have: the Vecs have one once they are used.
func exercised(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, func() metrics.PoolStats {
		return metrics.PoolStats{Usage: []metrics.ENIUsage{{ID: "eni-0a", Assigned: 1,
			Ranges: []metrics.RangeUsage{{CIDR: netip.MustParsePrefix("10.0.1.16/32"), Assigned: 1}}}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := metrics.BuildInfo(reg, "test"); err != nil {
		t.Fatal(err)
	}
	m.AddRequest("assigned")
	m.DelRequest("released", "PodDeleted")
	m.EC2Call("AssignPrivateIpAddresses", &smithy.GenericAPIError{Code: "RequestLimitExceeded"}, time.Millisecond)
	m.Startup(time.Second, false, "")
	m.NodeInit(time.Second, true)
	m.ConnmarkBackend(metrics.ConnmarkIPTables)
	return reg
}

// TestReferenceMetrics: every metric of the reference's is accounted for
// (exposed, or not and why), and each exposed one is gathered here with
// the reference's name, type and label names; none of the others is
// exposed under the reference's name with another meaning.
func TestReferenceMetrics(t *testing.T) {
	fixture := readMetricsFixture(t)
	if len(fixture) < 20 {
		t.Fatalf("%s has %d metrics: not the reference's", metricsFixture, len(fixture))
	}
	catalogued := map[string]metrics.RefMetric{}
	for _, r := range metrics.Reference {
		catalogued[r.Name] = r
		if r.Status != metrics.Exposed && r.Why == "" {
			t.Errorf("%s is %s without a why", r.Name, r.Status)
		}
	}
	families, err := exercised(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]*dto.MetricFamily{}
	for _, f := range families {
		gathered[f.GetName()] = f
	}
	for _, want := range fixture {
		r, ok := catalogued[want.name]
		if !ok {
			t.Errorf("%s (the reference's %s) is not accounted for in metrics.Reference", want.name, want.typ)
			continue
		}
		delete(catalogued, want.name)
		f, exposed := gathered[want.name]
		switch {
		case r.Status != metrics.Exposed && exposed:
			t.Errorf("%s is %s but gathered", want.name, r.Status)
		case r.Status == metrics.Exposed && !exposed:
			t.Errorf("%s is exposed but not gathered", want.name)
		case exposed:
			if got := strings.ToLower(f.GetType().String()); got != want.typ {
				t.Errorf("%s is a %s, the reference's a %s", want.name, got, want.typ)
			}
			var labels []string
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
			sort.Strings(labels)
			wantLabels := append([]string(nil), want.labels...)
			sort.Strings(wantLabels)
			if strings.Join(labels, ",") != strings.Join(wantLabels, ",") {
				t.Errorf("%s has labels %v, the reference's %v", want.name, labels, wantLabels)
			}
		}
	}
	for name := range catalogued {
		t.Errorf("metrics.Reference lists %s, which the reference does not define", name)
	}
	for name := range gathered {
		if strings.HasPrefix(name, "awscni_") {
			if _, ok := catalogued[name]; ok {
				continue
			}
			found := false
			for _, m := range fixture {
				found = found || m.name == name
			}
			if !found {
				t.Errorf("%s is exposed under the reference's prefix but is not the reference's", name)
			}
		}
	}
}
