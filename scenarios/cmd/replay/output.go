package main

import (
	"encoding/json"
	"io"
	"os"
)

// writeOut writes what write writes to path, or to stdout when path is
// "-" (which then carries only that).
func writeOut(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "-" {
		return write(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeReportJSON writes a report (an exploration's, a fleet's) as
// indented JSON to path ("-": stdout).
func writeReportJSON(path string, stdout io.Writer, v any) error {
	return writeOut(path, stdout, func(w io.Writer) error { return encodeIndented(w, v) })
}

func encodeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
