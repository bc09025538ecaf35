// Package realkernel runs the reconciler's foreign-rules case on Linux,
// in network namespaces of its own (internal/testsupport/testns), never in the
// machine's. It needs root; it is a package of its own so that `make unit`
// (no root) still runs the reconciler's model tests, and `make
// kernel-real` runs this one.
package realkernel
