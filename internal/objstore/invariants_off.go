//go:build !invariants

package objstore

// invariantsOn: built without -tags invariants, the checks of
// invariants.go are compiled out.
const invariantsOn = false
