// Package droppedbuilder reports a call whose result, one of the client's
// value builders, is dropped. Every setter of those builders returns a
// changed copy and leaves its receiver as it was, so such a call does
// nothing: q.Partition("a") as a statement pins nothing.
//
// Neither vet nor staticcheck can say it: vet's unusedresult knows only
// package functions and String methods, and staticcheck's SA4017 only
// functions whose parameters (the receiver included) are basic values.
package droppedbuilder

import (
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// Analyzer is the check.
var Analyzer = &analysis.Analyzer{
	Name:     "droppedbuilder",
	Doc:      "report a dropped queen builder: its setters return a changed copy, so a setter called as a statement does nothing",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// queenPath is the client's package.
const queenPath = "github.com/queen-go/queen"

// valueBuilders are the client's builders that are values. The
// TransactionBuilder is not one: it accumulates, and tx.Ack(...) as a
// statement adds an ack.
var valueBuilders = map[string]bool{
	"QueueBuilder":    true,
	"PushBuilder":     true,
	"CreateBuilder":   true,
	"DeleteBuilder":   true,
	"ConsumeBuilder":  true,
	"TransactionPush": true,
}

func run(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	ins.Preorder([]ast.Node{(*ast.ExprStmt)(nil)}, func(n ast.Node) {
		call, ok := ast.Unparen(n.(*ast.ExprStmt).X).(*ast.CallExpr)
		if !ok {
			return
		}
		name, ok := builderType(pass.TypesInfo.TypeOf(call))
		if !ok {
			return
		}
		what := "call"
		if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
			what = sel.Sel.Name
		}
		pass.ReportRangef(call, "result of %s dropped: a *queen.%s is a value (its setters return a changed copy), so this call does nothing; use the builder it returns", what, name)
	})
	return nil, nil
}

// builderType reports whether t is a pointer to one of the value builders,
// and which.
func builderType(t types.Type) (string, bool) {
	ptr, ok := types.Unalias(t).(*types.Pointer)
	if !ok {
		return "", false
	}
	named, ok := types.Unalias(ptr.Elem()).(*types.Named)
	if !ok {
		return "", false
	}
	obj := named.Obj()
	if obj.Pkg() == nil || obj.Pkg().Path() != queenPath || !valueBuilders[obj.Name()] {
		return "", false
	}
	return obj.Name(), true
}
