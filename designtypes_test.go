package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The module's packages, type-checked from source (the standard library's go/types; the
// dependencies' export data from `go list -export`), so that a design rule is checked on what a
// name refers to (this package's type, that method) rather than on how it is spelt.

// typedPkg is one package of the module, checked.
type typedPkg struct {
	rel   string               // "hub/local"; the root package is "main"
	files map[string]*ast.File // by slash path from the module's root ("hub/keep.go")
	types *types.Package
	info  *types.Info
	// inBinary: the binary links it (a package only tests import is not).
	inBinary bool
}

// typedModule is the module's packages, by their relative path.
type typedModule struct {
	root string
	fset *token.FileSet
	pkgs map[string]*typedPkg
}

var loadTyped = sync.OnceValues(func() (*typedModule, error) { return checkModule() })

// typed returns the module's packages, checked once per test binary.
func typed(t *testing.T) *typedModule {
	t.Helper()
	m, err := loadTyped()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// listedPkg is what `go list -json` says of one package.
type listedPkg struct {
	ImportPath, Dir, Export string
	GoFiles, CgoFiles       []string
	Standard                bool
	Module                  *struct{ Path string }
}

func checkModule() (*typedModule, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Dir,Export,GoFiles,CgoFiles,Standard,Module", "./...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list: %w", err)
	}
	exports := map[string]string{}
	var ours []listedPkg // in dependency order, as go list -deps gives them
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Module != nil && p.Module.Path == "nodehub" {
			ours = append(ours, p)
			continue
		}
		exports[p.ImportPath] = p.Export
	}
	m := &typedModule{root: root, fset: token.NewFileSet(), pkgs: map[string]*typedPkg{}}
	imp := &moduleImporter{checked: map[string]*types.Package{}, deps: importer.ForCompiler(m.fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})}
	for _, p := range ours {
		tp, err := checkPackage(m.fset, imp, root, p)
		if err != nil {
			return nil, err
		}
		imp.checked[p.ImportPath] = tp.types
		m.pkgs[tp.rel] = tp
	}
	if m.pkgs["main"] == nil {
		return nil, errors.New("the root package was not found")
	}
	m.markBinary(m.pkgs["main"].types)
	return m, nil
}

// markBinary marks the module's packages p imports, directly or not, as the binary's.
func (m *typedModule) markBinary(p *types.Package) {
	for _, tp := range m.pkgs {
		if tp.types == p {
			if tp.inBinary {
				return
			}
			tp.inBinary = true
		}
	}
	for _, imp := range p.Imports() {
		if strings.HasPrefix(imp.Path(), "nodehub/") {
			m.markBinary(imp)
		}
	}
}

func checkPackage(fset *token.FileSet, imp types.Importer, root string, p listedPkg) (*typedPkg, error) {
	if len(p.CgoFiles) > 0 {
		return nil, fmt.Errorf("%s: cgo files (the binary is static, pure Go)", p.ImportPath)
	}
	rel, err := filepath.Rel(root, p.Dir)
	if err != nil {
		return nil, err
	}
	rel = filepath.ToSlash(rel)
	tp := &typedPkg{rel: rel, files: map[string]*ast.File{}}
	if rel == "." {
		tp.rel = "main"
	}
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		tp.files[filepath.ToSlash(filepath.Join(rel, name))] = f
		files = append(files, f)
	}
	tp.info = &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp}
	tp.types, err = conf.Check(p.ImportPath, fset, files, tp.info)
	if err != nil {
		return nil, fmt.Errorf("type-check %s: %w", p.ImportPath, err)
	}
	return tp, nil
}

// moduleImporter gives the module's own packages as checked here (so an object is the same
// whoever uses it) and the others from their export data.
type moduleImporter struct {
	checked map[string]*types.Package
	deps    types.Importer
}

func (i *moduleImporter) Import(path string) (*types.Package, error) {
	if p, ok := i.checked[path]; ok {
		return p, nil
	}
	return i.deps.Import(path)
}

// pkg returns the checked package rel ("hub/remote").
func (m *typedModule) pkg(t *testing.T, rel string) *typedPkg {
	t.Helper()
	p, ok := m.pkgs[rel]
	if !ok {
		t.Fatalf("package %s not found among the module's (the walk is broken)", rel)
	}
	return p
}

// method returns the method (or field) name of type typeName of package rel, failing the test
// when it does not exist: a rule that names a method must name one that is there.
func (m *typedModule) method(t *testing.T, rel, typeName, name string) types.Object {
	t.Helper()
	tn, ok := m.pkg(t, rel).types.Scope().Lookup(typeName).(*types.TypeName)
	if !ok {
		t.Fatalf("%s has no type %s", rel, typeName)
	}
	obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(tn.Type()), true, tn.Pkg(), name)
	if obj == nil {
		t.Fatalf("%s.%s has no method or field %s", rel, typeName, name)
	}
	return obj
}

// use is one place an object is referred to.
type use struct {
	pkg  *typedPkg
	file string        // slash path
	fn   *ast.FuncDecl // the function it is in (nil: outside any)
	id   *ast.Ident
	obj  types.Object
}

// uses calls fn with every reference, in every package of the binary, to an object for which
// want says true.
func (m *typedModule) uses(want func(types.Object) bool, fn func(u use)) {
	m.decls(func(p *typedPkg, file string, d ast.Decl) {
		decl, _ := d.(*ast.FuncDecl)
		ast.Inspect(d, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			if obj := p.info.Uses[id]; obj != nil && want(obj) {
				fn(use{pkg: p, file: file, fn: decl, id: id, obj: obj})
			}
			return true
		})
	})
}

// decls calls fn with every top-level declaration of every package of the binary.
func (m *typedModule) decls(fn func(p *typedPkg, file string, d ast.Decl)) {
	for _, p := range m.pkgs {
		if !p.inBinary {
			continue
		}
		for file, f := range p.files {
			for _, d := range f.Decls {
				fn(p, file, d)
			}
		}
	}
}

// onlyIn is the names a holds and b does not, sorted.
func onlyIn(a, b map[string]bool) []string {
	var out []string
	for name := range a {
		if !b[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// funcName is "Recv.Name" of a method, "Name" of a function.
func funcName(fn *ast.FuncDecl) string {
	if fn == nil {
		return ""
	}
	if fn.Recv != nil {
		return receiverName(fn) + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// pos is where n is, from the module's root ("hub/keep.go:12:3").
func (m *typedModule) pos(n ast.Node) string {
	p := m.fset.Position(n.Pos())
	if rel, err := filepath.Rel(m.root, p.Filename); err == nil {
		p.Filename = filepath.ToSlash(rel)
	}
	return p.String()
}
