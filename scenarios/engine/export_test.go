package engine

// Comparable is comparable, for the tests of package engine_test (which
// may import the explorer, itself built on this package).
var Comparable = comparable

// FirstDifference is firstDifference, for the same tests.
var FirstDifference = firstDifference
