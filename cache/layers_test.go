package cache

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// The log engine (the disk, the log file and its records as bytes) knows nothing of what the
// cache means by them: no owner, object, list or key is named in its files. The Store's doc
// comment draws the two layers; this holds the line between them.
func TestTheLogEngineKnowsNothingOfTheCachesMeaning(t *testing.T) {
	engine := []string{"disk.go", "readonly.go", "quarantine.go", "frame.go", "logfile.go", "logscan.go", "resync.go", "crcshift.go", "logrewrite.go"}
	meaning := map[string]bool{
		"Store": true, "rlog": true, "ownerTable": true, "owners": true, "payload": true, "decodePayload": true,
		"listKey": true, "listState": true, "listScope": true, "rec": true, "hold": true, "slot": true,
		"Key": true, "Resource": true, "Header": true, "ListRecord": true, "lose": true, "apply": true,
		"objs": true, "lists": true, "live": true, "addLive": true, "liveBytes": true,
	}
	fset := token.NewFileSet()
	for _, name := range engine {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		fields := map[*ast.Ident]bool{} // x.Name: a field or method, looked at through its type's name
		ast.Inspect(f, func(n ast.Node) bool {
			if se, ok := n.(*ast.SelectorExpr); ok {
				fields[se.Sel] = true
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			// Obj is set for what the file declares itself (a parameter named payload is not the type).
			if id, ok := n.(*ast.Ident); ok && id.Obj == nil && !fields[id] && meaning[id.Name] {
				t.Errorf("%s: the log engine names %s, which is the cache's meaning", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
	}
}
