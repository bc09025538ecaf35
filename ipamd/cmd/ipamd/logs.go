package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"gopkg.in/natefinch/lumberjack.v2"
)

// The log file's rotation, the reference's: a file rotates at 100 MB,
// five rotated files are kept, none older than 30 days, gzipped.
const (
	logMaxSizeMB  = 100
	logMaxBackups = 5
	logMaxAgeDays = 30
)

// logSink is where the logs go: "stderr" or "stdout" (any case, as the
// reference takes them), or a file rotated as the reference rotates
// ipamd.log. The returned function closes the file.
func logSink(dest string, stdout, stderr io.Writer) (io.Writer, func() error, error) {
	switch strings.ToLower(dest) {
	case "stderr":
		return stderr, func() error { return nil }, nil
	case "stdout":
		return stdout, func() error { return nil }, nil
	}
	if !filepath.IsAbs(dest) {
		return nil, nil, fmt.Errorf("--log-file (%s) %q: want an absolute path, stderr or stdout", envLogFile, dest)
	}
	f := rotatingFile(dest, logMaxSizeMB)
	return f, f.Close, nil
}

// rotatingFile is dest rotated at maxMB megabytes.
func rotatingFile(dest string, maxMB int) *lumberjack.Logger {
	return &lumberjack.Logger{Filename: dest, MaxSize: maxMB, MaxBackups: logMaxBackups, MaxAge: logMaxAgeDays, Compress: true}
}

// levelFatal is the reference's "fatal": only what is logged above error.
const levelFatal = slog.LevelError + 4

// logger builds the slog logger the flags ask for. The level is one of
// the reference's names, in any case (it lower-cases them too); slog's
// "info+2" forms and anything else are refused, where the reference logs
// at debug.
func logger(w io.Writer, level, format string) (*slog.Logger, error) {
	levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn,
		"error": slog.LevelError, "fatal": levelFatal}
	lvl, ok := levels[strings.ToLower(level)]
	if !ok {
		return nil, fmt.Errorf("--log-level (%s) %q: want debug, info, warn, error or fatal", envLogLevel, level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
