// Command protoschema writes the protobuf schema table that watchmux's
// JSON-to-protobuf encoder (src/encode/protobuf.rs) follows.
//
// It walks client-go's scheme (every built-in kind and list of the pinned
// k8s.io/api, plus the meta/v1 types registered beside them), meta.k8s.io/v1
// (PartialObjectMetadata and its list) and names Status and WatchEvent as
// the API server serves them, and reads every field's `json` and
// `protobuf` struct tags with reflection. The output is a line format, one
// field a line, sorted, so that a new k8s.io/api version shows up as a
// readable diff:
//
//	kind <apiVersion> <Kind> <type>
//	message <type> [wrapper] [typemeta]
//	  field <number> <jsonName> <shape> [ptr] [inline] [omitempty] [omitzero]
//
// Shapes: string, bool, int32, int64, bytes (a []byte, base64 in JSON),
// msg:<type>, special:<name> (a type with a protobuf form of its own, such as
// Time or Quantity), []<shape> (repeated), map:<shape> (string keys, sorted).
// A "wrapper" message is a named slice type ([]string) that protobuf carries
// as a message whose only field 1 holds the items, while JSON shows the bare
// array (authentication/v1.ExtraValue). A "typemeta" message embeds TypeMeta:
// its JSON may hold apiVersion and kind, which protobuf leaves to the
// runtime.Unknown envelope.
//
// Anything the walker does not understand (a field with a json tag and no
// protobuf tag, an unknown JSON or protobuf marshaller, a non-string map key,
// a wire type that does not match the Go type) stops it with an error: the
// encoder must never have to guess.
//
// Usage: go run ./cmd/protoschema -o ../src/encode/protobuf/schema.txt
// (integration/scripts/protobuf-schema.sh wraps it and checks for drift).
package main

import (
	"encoding"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// specials are the types whose protobuf form is written by hand in
// apimachinery rather than generated from struct tags; the encoder knows each
// by name.
var specials = map[reflect.Type]string{
	reflect.TypeFor[metav1.Time]():          "Time",
	reflect.TypeFor[metav1.MicroTime]():     "MicroTime",
	reflect.TypeFor[metav1.Duration]():      "Duration",
	reflect.TypeFor[metav1.FieldsV1]():      "FieldsV1",
	reflect.TypeFor[intstr.IntOrString]():   "IntOrString",
	reflect.TypeFor[resource.Quantity]():    "Quantity",
	reflect.TypeFor[runtime.RawExtension](): "RawExtension",
	reflect.TypeFor[runtime.Unknown]():      "Unknown",
}

// extraRoots are served by the API server (error bodies, watch frames) under
// names that client-go's scheme and meta.k8s.io/v1 do not give them.
var extraRoots = []struct {
	apiVersion, kind string
	t                reflect.Type
}{
	{"v1", "Status", reflect.TypeFor[metav1.Status]()},
	{"meta.k8s.io/v1", "WatchEvent", reflect.TypeFor[metav1.WatchEvent]()},
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	protoMessage    = reflect.TypeFor[interface{ MarshalToSizedBuffer([]byte) (int, error) }]()
	typeMetas       = map[reflect.Type]bool{
		reflect.TypeFor[metav1.TypeMeta]():  true,
		reflect.TypeFor[runtime.TypeMeta](): true,
	}
)

type walker struct {
	messages map[string][]string // type name -> lines (the first is the message line)
	types    map[string]reflect.Type
	queue    []reflect.Type
	tagNotes []string
	// Tags whose rep/opt disagrees with the Go type: counted, not listed
	// (there are hundreds, all harmless once the Go type decides).
	repeatedNotes int
}

// TypeName shortens a Go package path to the part that names the API group.
func typeName(t reflect.Type) string {
	p := t.PkgPath()
	for _, prefix := range []string{"k8s.io/api/", "k8s.io/apimachinery/pkg/apis/", "k8s.io/apimachinery/pkg/"} {
		if strings.HasPrefix(p, prefix) {
			p = strings.TrimPrefix(p, prefix)
			break
		}
	}
	return p + "." + t.Name()
}

func (w *walker) enqueue(t reflect.Type) string {
	name := typeName(t)
	if prev, ok := w.types[name]; ok {
		if prev != t {
			fail("two Go types share the name %s: %s and %s", name, prev.PkgPath(), t.PkgPath())
		}
		return name
	}
	w.types[name] = t
	w.queue = append(w.queue, t)
	return name
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "protoschema: "+format+"\n", args...)
	os.Exit(1)
}

// shape describes a Go type (pointers already removed) as the encoder sees it.
func (w *walker) shape(t reflect.Type, where string) string {
	if s, ok := specials[t]; ok {
		return "special:" + s
	}
	// Any other custom JSON or text form would make JSON and protobuf
	// disagree in a way the tags cannot say.
	for _, iface := range []reflect.Type{jsonMarshaler, jsonUnmarshaler, textMarshaler} {
		if t.Implements(iface) || reflect.PointerTo(t).Implements(iface) {
			fail("%s: type %s has a custom JSON form (%s) and is not a known special type", where, t, iface)
		}
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int32:
		return "int32"
	case reflect.Int64:
		return "int64"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		if t.Name() != "" && reflect.PointerTo(t).Implements(protoMessage) {
			// A named slice with a protobuf message of its own.
			return "msg:" + w.enqueue(t)
		}
		if t.Elem().Kind() == reflect.Pointer {
			fail("%s: slice of pointers %s", where, t)
		}
		inner := w.shape(t.Elem(), where+"[]")
		if strings.HasPrefix(inner, "[]") || strings.HasPrefix(inner, "map:") {
			fail("%s: nested repeated type %s", where, t)
		}
		return "[]" + inner
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			fail("%s: map key %s is not a string", where, t.Key())
		}
		if t.Elem().Kind() == reflect.Pointer {
			fail("%s: map of pointers %s", where, t)
		}
		inner := w.shape(t.Elem(), where+"{}")
		if strings.HasPrefix(inner, "[]") || strings.HasPrefix(inner, "map:") {
			fail("%s: map value %s is repeated", where, t.Elem())
		}
		return "map:" + inner
	case reflect.Struct:
		if !reflect.PointerTo(t).Implements(protoMessage) {
			fail("%s: struct %s has no protobuf form", where, t)
		}
		return "msg:" + w.enqueue(t)
	}
	fail("%s: unsupported Go type %s (%s)", where, t, t.Kind())
	return ""
}

func wireOf(shape string) string {
	switch shape {
	case "bool", "int32", "int64":
		return "varint"
	}
	return "bytes"
}

func (w *walker) message(t reflect.Type) {
	name := typeName(t)
	if t.Kind() == reflect.Slice {
		// Wrapper: `message X { repeated <elem> items = 1; }`.
		inner := w.shape(t.Elem(), name)
		w.messages[name] = []string{"message " + name + " wrapper", "  field 1 items []" + inner}
		return
	}
	lines := []string{"message " + name}
	for i := 0; i < t.NumField(); i++ {
		if typeMetas[t.Field(i).Type] {
			// Its JSON may carry apiVersion and kind, which protobuf
			// leaves to the envelope.
			lines[0] += " typemeta"
		}
	}
	type field struct {
		num  int
		line string
	}
	var fields []field
	seen := map[int]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		where := name + "." + f.Name
		jsonTag, hasJSON := f.Tag.Lookup("json")
		pbTag, hasPB := f.Tag.Lookup("protobuf")
		jsonParts := strings.Split(jsonTag, ",")
		jsonName := jsonParts[0]
		opts := map[string]bool{}
		for _, o := range jsonParts[1:] {
			opts[o] = true
		}
		if typeMetas[f.Type] {
			// TypeMeta is inline in JSON and absent from protobuf: the
			// runtime.Unknown envelope carries apiVersion and kind.
			if hasPB {
				fail("%s: TypeMeta with a protobuf tag", where)
			}
			continue
		}
		if jsonName == "-" {
			if hasPB {
				fail("%s: protobuf field hidden from JSON", where)
			}
			continue
		}
		if !hasPB {
			if hasJSON {
				fail("%s: json tag %q without a protobuf tag", where, jsonTag)
			}
			continue
		}
		for o := range opts {
			if o != "omitempty" && o != "omitzero" && o != "inline" {
				fail("%s: json option %q is not understood", where, o)
			}
		}
		pb := strings.Split(pbTag, ",")
		if len(pb) < 3 {
			fail("%s: short protobuf tag %q", where, pbTag)
		}
		num, err := strconv.Atoi(pb[1])
		if err != nil || num <= 0 {
			fail("%s: bad field number in %q", where, pbTag)
		}
		if other, dup := seen[num]; dup {
			fail("%s: field number %d also used by %s", where, num, other)
		}
		seen[num] = f.Name
		for _, p := range pb[3:] {
			// casttype, castkey and castvalue only rename Go types.
			if strings.HasPrefix(p, "customtype=") || strings.HasPrefix(p, "proto3=") {
				fail("%s: protobuf option %q is not understood", where, p)
			}
		}
		ft := f.Type
		ptr := false
		if ft.Kind() == reflect.Pointer {
			ptr = true
			ft = ft.Elem()
		}
		inline := opts["inline"] || (f.Anonymous && jsonName == "")
		if inline {
			if ptr || ft.Kind() != reflect.Struct {
				fail("%s: inline field is not a plain struct", where)
			}
			jsonName = "-"
		} else if jsonName == "" {
			fail("%s: no JSON name", where)
		}
		shape := w.shape(ft, where)
		repeated := pb[2] == "rep"
		isList := strings.HasPrefix(shape, "[]") || strings.HasPrefix(shape, "map:")
		if repeated != isList {
			// As for wire types below: the Go type decides
			// (EndpointSlice.addressType is tagged rep, written once).
			w.repeatedNotes++
		}
		elem := strings.TrimPrefix(strings.TrimPrefix(shape, "[]"), "map:")
		if strings.HasPrefix(shape, "map:") {
			elem = "map" // map entries are messages
		}
		if wireOf(elem) != pb[0] {
			// go-to-protobuf derives the wire type from the Go type, not
			// from the tag (DeleteOptions.propagationPolicy says varint
			// and is written as bytes): follow the Go type, and say so.
			w.tagNotes = append(w.tagNotes, fmt.Sprintf("%s tag says %s, Go type %s is %s", where, pb[0], f.Type, wireOf(elem)))
		}
		if ptr && isList {
			fail("%s: pointer to a repeated type", where)
		}
		line := fmt.Sprintf("  field %d %s %s", num, jsonName, shape)
		if ptr {
			line += " ptr"
		}
		if inline {
			line += " inline"
		}
		if opts["omitempty"] {
			line += " omitempty"
		}
		if opts["omitzero"] {
			line += " omitzero"
		}
		fields = append(fields, field{num, line})
	}
	sort.Slice(fields, func(i, j int) bool { return fields[i].num < fields[j].num })
	for _, f := range fields {
		lines = append(lines, f.line)
	}
	w.messages[name] = lines
}

func moduleVersions() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fail("no build information")
	}
	var out []string
	for _, d := range info.Deps {
		if d.Path != "k8s.io/api" && d.Path != "k8s.io/apimachinery" && d.Path != "k8s.io/client-go" {
			continue
		}
		v := d.Version
		if d.Replace != nil {
			v = d.Replace.Version
		}
		out = append(out, d.Path+" "+v)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func main() {
	outPath := flag.String("o", "", "output file (default: stdout)")
	flag.Parse()

	w := &walker{messages: map[string][]string{}, types: map[string]reflect.Type{}}
	var kinds []string
	var skipped []string
	// client-go's scheme and meta.k8s.io/v1 (PartialObjectMetadata[List],
	// Table, TableOptions), the same scheme integration/cmd/protocorpus fuzzes.
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		fail("%v", err)
	}
	if err := metav1.AddMetaToScheme(s); err != nil {
		fail("%v", err)
	}
	for gvk, t := range s.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue // never served
		}
		if !reflect.PointerTo(t).Implements(protoMessage) {
			skipped = append(skipped, gvk.GroupVersion().String()+" "+gvk.Kind)
			continue
		}
		name := w.enqueue(t)
		kinds = append(kinds, fmt.Sprintf("kind %s %s %s", gvk.GroupVersion().String(), gvk.Kind, name))
	}
	for _, r := range extraRoots {
		name := w.enqueue(r.t)
		kinds = append(kinds, fmt.Sprintf("kind %s %s %s", r.apiVersion, r.kind, name))
	}
	for len(w.queue) > 0 {
		t := w.queue[0]
		w.queue = w.queue[1:]
		w.message(t)
	}
	sort.Strings(kinds)
	kinds = dedup(kinds)
	sort.Strings(skipped)
	skipped = dedup(skipped)

	var b strings.Builder
	b.WriteString("# The protobuf form of the built-in Kubernetes types, for watchmux's JSON-to-protobuf encoder.\n")
	b.WriteString("# Generated; do not edit. Made by: cd integration && go run ./cmd/protoschema -o ../src/encode/protobuf/schema.txt\n")
	b.WriteString("# (integration/scripts/protobuf-schema.sh --write); checked for drift by make protobuf-check.\n")
	b.WriteString("# From: " + moduleVersions() + "\n")
	if len(skipped) > 0 {
		b.WriteString("# Registered types without a protobuf form (left out): " + strings.Join(skipped, "; ") + "\n")
	}
	sort.Strings(w.tagNotes)
	for _, n := range w.tagNotes {
		b.WriteString("# Wire type from the Go type, not the tag: " + n + "\n")
	}
	b.WriteString(fmt.Sprintf("# Repetition from the Go type, not the tag: %d tags say rep where the Go type is single or the reverse\n", w.repeatedNotes))
	b.WriteString("# Lines: kind <apiVersion> <Kind> <type> | message <type> [wrapper] [typemeta] | field <number> <jsonName|- if inline> <shape> [ptr] [inline] [omitempty] [omitzero]\n")
	for _, k := range kinds {
		b.WriteString(k + "\n")
	}
	names := make([]string, 0, len(w.messages))
	for n := range w.messages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, l := range w.messages[n] {
			b.WriteString(l + "\n")
		}
	}
	if *outPath == "" {
		fmt.Print(b.String())
		return
	}
	if err := os.WriteFile(*outPath, []byte(b.String()), 0o644); err != nil {
		fail("%v", err)
	}
}

func dedup(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
