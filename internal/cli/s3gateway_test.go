package cli

import (
	"strings"
	"testing"
)

// The gateway's start-up line names an erasure-coded data pool's chunks,
// and advises larger ones where its GETs have to copy them.
func TestECDataPoolNote(t *testing.T) {
	small, large := ecDataPoolNote("2+2", 16<<10), ecDataPoolNote("4+2", 256<<10)
	if !strings.HasPrefix(small, "(erasure-coded 2+2, 16K chunks)") || !strings.Contains(small, "--stripe-unit 256K") {
		t.Errorf("16K chunks: %q", small)
	}
	if large != "(erasure-coded 4+2, 256K chunks)" {
		t.Errorf("256K chunks: %q", large)
	}
}
