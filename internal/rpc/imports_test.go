package rpc

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// checkImports fails if a non-test file of the package in dir imports a
// project package other than those allowed: the layering in doc.go.
func checkImports(t *testing.T, dir string, allowed ...string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
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
			if !strings.Contains(path, ".") {
				continue // standard library
			}
			ok := false
			for _, a := range allowed {
				ok = ok || path == project+a
			}
			if !ok {
				t.Errorf("%s imports %s; allowed: standard library and %v", f, path, allowed)
			}
		}
	}
}

func TestImports(t *testing.T) {
	checkImports(t, ".", "internal/proto", "internal/bufpool")
	checkImports(t, "../proto", "internal/clustermap", "internal/bufpool")
}
