package introspect

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
)

// Endpoint paths. /v1/enis and /v1/ipamd-env-settings are the reference's
// names, so tooling that reads them keeps working; /v1/allocations and
// /v1/pool are this implementation's.
const (
	PathIndex       = "/"
	PathENIs        = "/v1/enis"
	PathAllocations = "/v1/allocations"
	PathPool        = "/v1/pool"
	PathSettings    = "/v1/ipamd-env-settings"
)

// Endpoint describes one path in the index served at "/".
type Endpoint struct {
	Path        string `json:"path"`
	Description string `json:"description"`
}

// Index is the document served at "/".
type Index struct {
	Endpoints []Endpoint `json:"endpoints"`
}

// route is one endpoint and what it serves.
type route struct {
	Endpoint
	body func() any
}

// handler serves the introspection endpoints. It is a plain lookup rather
// than an http.ServeMux because the mux also answers HEAD on GET routes
// and redirects unclean paths; here the answer is exactly a listed path
// with GET, 405 for another method, or 404.
type handler struct {
	routes map[string]route
	log    *slog.Logger
}

func newHandler(src Source, log *slog.Logger) *handler {
	data := []route{
		{Endpoint{PathENIs, "ENIs by network card in the reference's shape, with the addresses pods hold or lately held"}, func() any { return src.ENIs() }},
		{Endpoint{PathAllocations, "addresses assigned to pods: key, pod, IP, device, route table, since"}, func() any { return src.Allocations() }},
		{Endpoint{PathPool, "warm-pool targets and address counts"}, func() any { return src.Pool() }},
		{Endpoint{PathSettings, "ipamd environment settings in effect"}, func() any { return src.Settings() }},
	}
	index := Index{Endpoints: []Endpoint{{PathIndex, "this list"}}}
	for _, r := range data {
		index.Endpoints = append(index.Endpoints, r.Endpoint)
	}
	h := &handler{routes: make(map[string]route, len(data)+1), log: log}
	h.routes[PathIndex] = route{index.Endpoints[0], func() any { return index }}
	for _, r := range data {
		h.routes[r.Path] = r
	}
	return h
}

// errorBody is the JSON body of a 404, 405 or 500.
type errorBody struct {
	Error string `json:"error"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := h.routes[r.URL.Path]
	if !ok {
		h.write(w, http.StatusNotFound, errorBody{fmt.Sprintf("no endpoint %s; GET %s lists them", r.URL.Path, PathIndex)})
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		h.write(w, http.StatusMethodNotAllowed, errorBody{fmt.Sprintf("%s is read-only: use GET", r.URL.Path)})
		return
	}
	h.write(w, http.StatusOK, rt.body())
}

// write sends v as indented JSON. It encodes before writing the header so
// that a value that does not encode becomes a 500, not a 200 with half a
// body.
func (h *handler) write(w http.ResponseWriter, status int, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		h.log.Error("introspection response does not encode", "error", err)
		status = http.StatusInternalServerError
		body, _ = json.MarshalIndent(errorBody{"response does not encode as JSON: " + err.Error()}, "", "  ")
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("X-Content-Type-Options", "nosniff")
	// The state changes with every pod; a cached answer is a wrong one.
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if _, err := w.Write(append(body, '\n')); err != nil {
		h.log.Debug("introspection response not delivered", "error", err)
	}
}
