package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
)

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "", "info":
		return slog.LevelInfo, nil
	case "debug", "trace":
		return slog.LevelDebug, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("pluginLogLevel %q is not one of debug, info, warn, error", s)
}

// openLog opens the plugin's log file for appending: mode 0600, never
// through a symlink (the plugin runs as root and the path is config).
func openLog(path, level string) (*slog.Logger, io.Closer, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open pluginLogFile: %w", err)
	}
	return slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: lvl})), f, nil
}
