package pg

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPure keeps the package a pure core: its non-test files import only
// clustermap and snapset of cairn, and no standard package that does IO,
// reads the clock, draws random numbers or starts concurrency.
func TestPure(t *testing.T) {
	allowedProject := []string{"internal/clustermap", "internal/snapset"}
	banned := []string{"os", "net", "syscall", "time", "sync", "math/rand", "crypto/rand", "io/fs", "os/exec", "runtime", "unsafe", "context"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const project = "github.com/cairn-storage/cairn/"
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if rel, ok := strings.CutPrefix(path, project); ok {
				if !slices.Contains(allowedProject, rel) {
					t.Errorf("%s imports %s: pg may import only %v of cairn", f, path, allowedProject)
				}
				continue
			}
			if strings.Contains(path, ".") {
				t.Errorf("%s imports %s: pg imports no third-party package", f, path)
			}
			for _, b := range banned {
				if path == b || strings.HasPrefix(path, b+"/") {
					t.Errorf("%s imports %s: pg does no IO, reads no clock, draws no random number and starts no goroutine", f, path)
				}
			}
		}
	}
}
