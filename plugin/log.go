package plugin

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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

// errLogSymlink says the log path's last component is a symbolic link.
var errLogSymlink = errors.New("is a symbolic link; refusing to follow it")

// openLog opens the plugin's log file for appending. The plugin runs as
// root and the path comes from a config file, and the directory it names
// may be writable by someone less trusted, so the file is opened with care:
//
//   - O_NOFOLLOW: a symlink planted at the path (to /etc/shadow, say) is
//     refused rather than appended to, and a dangling one does not make
//     O_CREAT create its target;
//   - O_NONBLOCK: a FIFO planted at the path makes the open fail at once
//     instead of blocking the plugin until something reads it;
//   - after the open, the file must be a regular file with one link, owned
//     by us: a hard link to a file elsewhere, or a file another user made
//     and can swap, is refused;
//   - a new file is created 0600 (pod names and addresses are root's).
//
// Only the final component is checked: the directories on the path are
// the administrator's, like the config file that names them. An existing
// file's mode is left alone (an operator may have widened it on purpose).
func openLog(path, level string) (*slog.Logger, io.Closer, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	f, err := openAppend("pluginLogFile", path)
	if err != nil {
		return nil, nil, err
	}
	return slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: lvl})), f, nil
}

// openAppend opens a file the plugin appends to (its log, its journal)
// with the care openLog describes; field names the netconf field in
// errors.
func openAppend(field, path string) (*os.File, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s %q is not an absolute path (it would depend on the runtime's working directory)", field, path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		// ELOOP is what O_NOFOLLOW gives for a final symlink; say so plainly.
		if errors.Is(err, syscall.ELOOP) {
			if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				return nil, fmt.Errorf("%s %s %w", field, path, errLogSymlink)
			}
		}
		return nil, fmt.Errorf("open %s: %w", field, err)
	}
	if err := checkLogFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: %w", field, path, err)
	}
	return f, nil
}

// checkLogFile checks what was opened (not the path, which may have
// changed since): a regular file, one link, ours.
func checkLogFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("is not a regular file (%s); refusing to write to it", fi.Mode().Type())
	case !ok:
		return errors.New("cannot read its owner")
	case st.Nlink != 1:
		return fmt.Errorf("has %d hard links; refusing to write to a file that is also elsewhere", st.Nlink)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("is owned by uid %d, not by this process (uid %d); refusing to write to it", st.Uid, os.Geteuid())
	}
	return nil
}
