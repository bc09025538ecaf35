package reconcile

// SetOwnership replaces the reconciler's ownership test, so that a test
// can run a deliberately wrong one (a mutant) and show the suite fails.
// It exists only in tests: production code always uses Owns.
func SetOwnership(r *Reconciler, owns Ownership) { r.owns = owns }
