package podeni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Static is a Source backed by a map of "namespace/name" to branch ENI,
// for the in-memory cloud and the scenario harness. A pod it does not know
// is a regular pod. Fail makes a pod's lookup fail, to replay an API
// server that is down or a pod that is gone. The zero value is an empty
// Static; it is safe for concurrent use.
type Static struct {
	mu   sync.RWMutex
	pods map[string]staticEntry
}

type staticEntry struct {
	eni *BranchENI
	err error
}

var _ Source = (*Static)(nil)

// NewStatic returns an empty Static.
func NewStatic() *Static { return &Static{} }

// Set makes namespace/name a branch pod with eni (a copy is kept).
func (s *Static) Set(namespace, name string, eni BranchENI) {
	s.put(namespace, name, staticEntry{eni: eni.clone()})
}

// Fail makes lookups of namespace/name return err; wrap ErrPodNotFound to
// say the pod is gone.
func (s *Static) Fail(namespace, name string, err error) {
	s.put(namespace, name, staticEntry{err: err})
}

// Delete makes namespace/name a regular pod again.
func (s *Static) Delete(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, namespace+"/"+name)
}

func (s *Static) put(namespace, name string, e staticEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods == nil {
		s.pods = map[string]staticEntry{}
	}
	s.pods[namespace+"/"+name] = e
}

// Lookup implements Source.
func (s *Static) Lookup(ctx context.Context, namespace, name string) (*BranchENI, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	e, ok := s.pods[namespace+"/"+name]
	s.mu.RUnlock()
	switch {
	case !ok:
		return nil, nil
	case e.err != nil:
		return nil, e.err
	}
	return e.eni.clone(), nil
}

// LoadStatic reads a JSON object mapping "namespace/name" to an
// annotation-style object (one element of vpc.amazonaws.com/pod-eni, not
// an array), for ipamd --pod-eni-source static. Unknown fields are errors:
// the file is written by hand, and a misspelt field must not pass as an
// absent one.
func LoadStatic(r io.Reader) (*Static, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object of \"namespace/name\": branch ENI: %w", err)
	}
	s := NewStatic()
	for key, msg := range raw {
		ns, name, ok := strings.Cut(key, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("key %q: want \"namespace/name\"", key)
		}
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		var a Annotation
		if err := dec.Decode(&a); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		b, err := a.BranchENI()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		s.Set(ns, name, *b)
	}
	return s, nil
}

// ReadStaticFile is LoadStatic on a file.
func ReadStaticFile(path string) (*Static, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := LoadStatic(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
