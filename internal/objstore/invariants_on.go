//go:build invariants

package objstore

// invariantsOn: built with -tags invariants (make test), the store checks
// the invariants of invariants.go as it runs.
const invariantsOn = true
