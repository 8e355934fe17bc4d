//go:build tools

// Package tools pins crane, go-containerregistry's CLI, beside ocibuild: the
// image test pushes the built layout with it, as the chart's README tells
// operators to. The module's go.mod also names it with a `tool` directive;
// this file keeps `go mod tidy` from dropping it.
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
