// Package tools pins the project's development tools (go.mod's tool directives);
// hack/lint.sh builds them from here.
package tools
