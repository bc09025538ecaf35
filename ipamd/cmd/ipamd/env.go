package main

import (
	"log/slog"

	"github.com/vpccni/vpccni/internal/awsenv"
)

// reportEnvironment logs, once at start, each reference setting the
// environment gives that ipamd does not honour (awsenv.Audit: not
// supported, not supported yet, or unknown), and the reference's
// identity variables, which only label the logs.
func reportEnvironment(log *slog.Logger, environ []string, getenv func(string) string) {
	for _, f := range awsenv.Audit(environ) {
		log.Warn("setting not honoured", "variable", f.Name, "value", f.Value, "why", f.Problem)
	}
	var ids []any
	for _, name := range []string{"VPC_CNI_VERSION", "MY_NODE_NAME", "MY_POD_NAME"} {
		if v := awsenv.Str(getenv, name); v != "" {
			ids = append(ids, name, v)
		}
	}
	if len(ids) > 0 {
		log.Info("reference identity", ids...)
	}
}
