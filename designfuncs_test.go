package main

import (
	"go/ast"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines: a production function of the root module is shorter than this many lines (from
// `func` to its closing brace); a longer one is split by what it does, so it reads as the list of
// its steps.
const maxFuncLines = 60

// longFuncs are the functions allowed to be longer, by package directory and (receiver.)name,
// each with its reason. An entry that no longer names a long function fails the test: drop it.
var longFuncs = map[string]string{}

func TestFunctionsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "test" || name == "bench") {
			return filepath.SkipDir // test harnesses and benchmarks are modules of their own
		}
		for file, f := range sourceFiles(t, fset, p) {
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line
				if lines < maxFuncLines {
					continue
				}
				key := path.Dir(file) + " " + qualifiedName(fn)
				if _, ok := longFuncs[key]; ok {
					seen[key] = true
					continue
				}
				t.Errorf("%s: %s is %d lines: split it by what it does (under %d)", fset.Position(fn.Pos()), qualifiedName(fn), lines, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range longFuncs {
		if !seen[key] {
			t.Errorf("longFuncs names %q, which is no longer a function of %d lines or more: drop the entry", key, maxFuncLines)
		}
	}
}

// qualifiedName is a function's name, with its receiver's type for a method ("jsonList.Write").
func qualifiedName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	return receiverName(fn) + "." + fn.Name.Name
}
