package main

import (
	"go/ast"
	"go/token"
	"strings"
	"testing"
)

// The configuration contract (docs/ARCHITECTURE.md): every field of hub.Config (and of the
// PoolConfig it holds) whose zero gets a default says so in its comment, "(default ...)", and gets
// it in one place, Config.setDefaults (hub/config.go); setDefaults gives none to a field whose
// comment does not say it has one.
func TestEveryDefaultIsGivenInSetDefaults(t *testing.T) {
	documented := map[string]bool{} // "NodeName", "Pool.LeaseNamespace"
	var setDefaults *ast.FuncDecl
	for _, f := range typed(t).pkg(t, "hub").files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && receiverName(fn) == "Config" && fn.Name.Name == "setDefaults" {
				setDefaults = fn
			}
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				prefix := map[string]string{"Config": "", "PoolConfig": "Pool."}[ts.Name.Name]
				st, ok := ts.Type.(*ast.StructType)
				if !ok || prefix == "" && ts.Name.Name != "Config" {
					continue
				}
				for _, field := range st.Fields.List {
					if !strings.Contains(field.Doc.Text()+field.Comment.Text(), "(default") {
						continue
					}
					for _, name := range field.Names {
						documented[prefix+name.Name] = true
					}
				}
			}
		}
	}
	if setDefaults == nil || len(documented) == 0 {
		t.Fatalf("Config.setDefaults or Config's documented defaults not found (%v): the rule's walk is broken", documented)
	}
	assigned := map[string]bool{}
	ast.Inspect(setDefaults.Body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok {
			return true
		}
		for _, lhs := range as.Lhs {
			if name := fieldPath(lhs); name != "" {
				assigned[name] = true
			}
		}
		return true
	})
	for _, name := range onlyIn(documented, assigned) {
		t.Errorf("Config.%s's comment says it has a default, which setDefaults (hub/config.go) does not give it: a default is given in one place", name)
	}
	for _, name := range onlyIn(assigned, documented) {
		t.Errorf("setDefaults gives Config.%s a default its comment does not state (\"(default ...)\")", name)
	}
}

// fieldPath is "Name" of c.Name, "Pool.Name" of c.Pool.Name ("" for anything else).
func fieldPath(x ast.Expr) string {
	sel, ok := x.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if _, ok := sel.X.(*ast.Ident); ok {
		return sel.Sel.Name
	}
	if inner := fieldPath(sel.X); inner != "" {
		return inner + "." + sel.Sel.Name
	}
	return ""
}
