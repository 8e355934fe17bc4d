//go:build tools

// Package tools pins promtool for checking the chart's alert rules. The module's
// go.mod also names it with a `tool` directive; this file keeps `go mod tidy`
// from dropping the requirement on toolchains that ignore that directive.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
