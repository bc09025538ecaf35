// Package awsenv is the aws-node environment: every variable the
// reference AWS VPC CNI reads (its DaemonSet's and its documentation's),
// what vpccni does with each, and how a value is read.
//
// A value is read as the reference reads it (strconv.ParseBool for a
// switch, so "1" and "True" are true; a decimal integer for a count) with
// one difference: where the reference falls back to the default on a
// value it cannot parse, vpccni refuses to start and names the variable
// and the value. A typo in a manifest is found at the first start, not
// after the pods it misconfigured.
//
// The catalogue also says what vpccni does not do: a variable it does not
// support, set to anything but the reference's default, is reported once
// at start (Audit), and so is a variable that looks like the reference's
// (AWS_VPC_*, WARM_*, ENABLE_*) but is none of them.
package awsenv

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Status is what vpccni does with a variable.
type Status int

const (
	// Supported: read, with the reference's meaning.
	Supported Status = iota
	// Exempt: deliberately not supported; Var.Note says why.
	Exempt
	// Planned: not supported yet; Var.Note says what is missing.
	Planned
	// Informational: read and reported, with no effect on the node (the
	// reference's is the same, or the value is vpccni's to know anyway).
	Informational
)

func (s Status) String() string {
	switch s {
	case Supported:
		return "supported"
	case Exempt:
		return "not supported"
	case Planned:
		return "not supported yet"
	case Informational:
		return "informational"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Kind is how a value is read.
type Kind int

const (
	KindString Kind = iota
	KindBool        // strconv.ParseBool
	KindInt         // a decimal integer
	KindJSON        // a JSON document (ADDITIONAL_ENI_TAGS)
)

// Var is one variable of the reference's.
type Var struct {
	Name string
	// Container is where the reference's DaemonSet reads it: "aws-node"
	// (ipamd and the entrypoint that writes the conflist) or
	// "aws-vpc-cni-init".
	Container string
	// Default is the reference's value when the variable is unset.
	Default string
	Kind    Kind
	Status  Status
	// Note says what the variable does in vpccni (Supported,
	// Informational) or why it does nothing (Exempt, Planned).
	Note string
	// DefaultGap, when set, is what the reference does at the default
	// value that vpccni does not: Audit reports it whatever the value.
	DefaultGap string
}

// Lookup finds a variable of the catalogue.
func Lookup(name string) (Var, bool) {
	v, ok := index[name]
	return v, ok
}

// All is the catalogue in name order.
func All() []Var {
	out := make([]Var, 0, len(index))
	for _, v := range index {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

var index = func() map[string]Var {
	m := make(map[string]Var, len(catalogue))
	for _, v := range catalogue {
		if _, dup := m[v.Name]; dup {
			panic("awsenv: " + v.Name + " catalogued twice")
		}
		m[v.Name] = v
	}
	return m
}()

// Getenv is os.Getenv's shape, so tests pass a map's lookup.
type Getenv func(string) string

// Error is a value that cannot be read; the daemon refuses to start.
type Error struct {
	Name, Value, Want string
}

func (e *Error) Error() string { return fmt.Sprintf("%s=%q: %s", e.Name, e.Value, e.Want) }

func mustVar(name string, k Kind) Var {
	v, ok := index[name]
	if !ok || v.Kind != k {
		// A programming error: every variable read is catalogued with
		// the kind it is read as (the first test to read it panics).
		panic(fmt.Sprintf("awsenv: %s is not catalogued as that kind", name))
	}
	return v
}

// value is the variable's value, the reference's default when unset or
// empty (the reference reads an empty value as unset).
func value(getenv Getenv, v Var) string {
	if s := getenv(v.Name); s != "" {
		return s
	}
	return v.Default
}

// Bool reads a switch with strconv.ParseBool, as the reference does.
func Bool(getenv Getenv, name string) (bool, error) {
	v := mustVar(name, KindBool)
	s := value(getenv, v)
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, &Error{name, s, "want true or false (or 1, 0, t, f, TRUE, FALSE, True, False)"}
	}
	return b, nil
}

// Int reads a count.
func Int(getenv Getenv, name string) (int, error) {
	v := mustVar(name, KindInt)
	s := value(getenv, v)
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, &Error{name, s, "want a whole number"}
	}
	return n, nil
}

// Str reads a string, the reference's default when unset.
func Str(getenv Getenv, name string) string {
	return value(getenv, mustVar(name, KindString))
}

// Finding is something Audit reports.
type Finding struct {
	Name, Value string
	// Problem is "set but not supported: <why>", "set but not supported
	// yet: <what is missing>" or "unknown".
	Problem string
}

// lookalike prefixes: a variable under one that the catalogue does not
// know is most likely a misspelt or newer reference setting.
var lookalike = []string{"AWS_VPC_", "WARM_", "ENABLE_"}

// Audit reports, from an environment in os.Environ's form, each catalogued
// variable vpccni does not support whose value differs from the
// reference's default, and each unknown variable that looks like one of
// the reference's.
func Audit(environ []string) []Finding {
	var out []Finding
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		v, known := index[name]
		switch {
		case !known:
			for _, p := range lookalike {
				if strings.HasPrefix(name, p) {
					out = append(out, Finding{name, val, "unknown: not a setting of the reference's or vpccni's"})
					break
				}
			}
		case (v.Status == Exempt || v.Status == Planned) && val != "" && !sameValue(v, val):
			out = append(out, Finding{name, val, "set but " + v.Status.String() + ": " + v.Note})
		}
	}
	for _, v := range catalogue {
		if v.DefaultGap != "" && !reported(out, v.Name) {
			val := lookup(environ, v.Name)
			if val == "" || sameValue(v, val) {
				out = append(out, Finding{v.Name, val, "at the reference's default, " + v.DefaultGap})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func reported(fs []Finding, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return true
		}
	}
	return false
}

func lookup(environ []string, name string) string {
	for _, kv := range environ {
		if n, v, _ := strings.Cut(kv, "="); n == name {
			return v
		}
	}
	return ""
}

// sameValue: val means the default (for a switch, any spelling of it).
func sameValue(v Var, val string) bool {
	if v.Kind == KindBool {
		a, err1 := strconv.ParseBool(val)
		b, err2 := strconv.ParseBool(v.Default)
		return err1 == nil && err2 == nil && a == b
	}
	return strings.TrimSpace(val) == v.Default
}

// reservedTagDomain is in the keys of the tags the reference's own
// tooling uses on ENIs; like the reference, no additional tag may carry
// it (the reference drops such a tag with a warning; vpccni refuses it).
const reservedTagDomain = "k8s.amazonaws.com"

// Tags reads a JSON object of tag keys to values (ADDITIONAL_ENI_TAGS).
func Tags(getenv Getenv, name string) (map[string]string, error) {
	v := mustVar(name, KindJSON)
	s := strings.TrimSpace(value(getenv, v))
	if s == "" {
		return nil, nil
	}
	var tags map[string]string
	if err := json.Unmarshal([]byte(s), &tags); err != nil {
		return nil, &Error{name, s, "want a JSON object of tag keys to string values: " + err.Error()}
	}
	for k, val := range tags {
		switch {
		case k == "" || len(k) > 128 || len(val) > 256:
			return nil, &Error{name, s, fmt.Sprintf("tag %q: EC2 takes keys of 1 to 128 characters and values of up to 256", k)}
		case strings.Contains(k, reservedTagDomain) || strings.HasPrefix(strings.ToLower(k), "aws:"):
			return nil, &Error{name, s, fmt.Sprintf("tag %q: keys with %q or the aws: prefix are reserved", k, reservedTagDomain)}
		}
	}
	return tags, nil
}

// The MTUs the reference accepts for a pod's veth and an ENI: at most the
// VPC's jumbo frame, at least the smallest datagram every IPv4 host must
// take (576) or IPv6's minimum link MTU (1280).
const (
	MinMTUv4 = 576
	MinMTUv6 = 1280
	MaxMTU   = 9001
)

// MTURange is the range of MTUs an IPv4 or an IPv6 node takes.
func MTURange(ipv6 bool) (lo, hi int) {
	if ipv6 {
		return MinMTUv6, MaxMTU
	}
	return MinMTUv4, MaxMTU
}

// MTU reads an MTU (AWS_VPC_ENI_MTU, POD_MTU), the reference's default
// when unset, and refuses a value outside the family's range: the
// reference's entrypoint refuses to start on it too.
func MTU(getenv Getenv, name string, ipv6 bool) (int, error) {
	n, err := Int(getenv, name)
	if err != nil {
		return 0, err
	}
	if err := CheckMTU(n, ipv6); err != nil {
		return 0, &Error{name, value(getenv, mustVar(name, KindInt)), err.Error()}
	}
	return n, nil
}

// CheckMTU says why an MTU is out of the family's range, or nil.
func CheckMTU(mtu int, ipv6 bool) error {
	lo, hi := MTURange(ipv6)
	if mtu < lo || mtu > hi {
		family := "IPv4"
		if ipv6 {
			family = "IPv6"
		}
		return fmt.Errorf("want an MTU from %d to %d on an %s node", lo, hi, family)
	}
	return nil
}
