// Command protocorpus makes the fuzz corpus that proves watchmux's
// JSON-to-protobuf encoder (src/encode/protobuf.rs) against Go's own
// serializers.
//
// For every built-in kind with a protobuf form (client-go's scheme, plus
// meta.k8s.io/v1 PartialObjectMetadata[List]; the meta/v1 option types that
// every group registers are made once, under their first group-version) it
// fills -n random objects with apimachinery's apitesting fuzzer and the
// fuzzer functions of Kubernetes' own round-trip tests
// (k8s.io/kubernetes/pkg/api/testing.FuzzerFuncs: the generic overrides and
// metafuzzer's ObjectMeta, Time, Quantity and friends apply to these external
// types; the group funcs are written for internal types and do not fire),
// from a fixed -seed, with up to -elements elements per slice and map
// (apitesting's own filler makes at most one, which never orders map keys). Each object is written as the API server would write
// it: JSON with k8s.io/apimachinery's json serializer, protobuf with its
// protobuf serializer (streaming collections on, as kube-apiserver has them),
// and the protobuf watch frame an ADDED event of it makes (RawSerializer and
// the length-delimited framer, as the API server's watch handler).
//
// The cache only ever sees the API server's JSON, so the protobuf written is
// that of the object decoded from its own JSON, and the JSON is taken once
// it is stable (decoding and encoding it again gives the same bytes).
// Objects whose protobuf changes on that trip through JSON are marked
// "lossy": there the API server's protobuf holds something its JSON does not
// say, which no encoder that reads the JSON can reproduce (docs/protobuf.md).
//
// Output: <dir>/corpus.jsonl, one object a line:
// {"apiVersion","kind","n","json","protobuf" (base64),"watch" (base64),"lossy",
// "original" (base64, the protobuf before JSON, when lossy), "partial" (base64,
// the bare PartialObjectMetadata message, for kinds with ObjectMeta)}
// and a summary on stderr.
//
// -golden: instead read JSON objects from stdin, one a line, and print the
// hex of the protobuf body Go writes for each (a line "WATCH <json>": the
// ADDED watch frame; "Duration <json>": a bare metav1.Duration message) (the expected bytes of the
// unit tests in src/encode/protobuf/tests.rs).
package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	kapitesting "k8s.io/kubernetes/pkg/api/testing"
)

type record struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	N          int    `json:"n"`
	JSON       string `json:"json"`
	Protobuf   []byte `json:"protobuf"`
	Watch      []byte `json:"watch"`
	Lossy      bool   `json:"lossy"`
	// The protobuf of the object before its trip through JSON, when it
	// differs (lossy).
	Original []byte `json:"original,omitempty"`
	// The bare PartialObjectMetadata message of the object (what
	// as=PartialObjectMetadata serves), for kinds with ObjectMeta.
	Partial []byte `json:"partial,omitempty"`
}

var marshaller = reflect.TypeFor[interface{ MarshalToSizedBuffer([]byte) (int, error) }]()

func main() {
	out := flag.String("out", "", "directory for corpus.jsonl")
	seed := flag.Int64("seed", 1, "fuzzer seed")
	n := flag.Int("n", 3, "objects per kind")
	only := flag.String("kinds", "", "only kinds whose \"apiVersion Kind\" contains this")
	maxElements := flag.Int("elements", 3, "at most this many elements per slice and map (apitesting's default is 1, which never orders map keys)")
	golden := flag.Bool("golden", false, "read JSON objects on stdin, print the hex of their protobuf bodies")
	flag.Parse()

	s := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(s))
	must(metav1.AddMetaToScheme(s))
	jsonSer := jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, s, s,
		jsonserializer.SerializerOptions{StreamingCollectionsEncoding: true})
	pbSer := protobuf.NewSerializerWithOptions(s, s, protobuf.SerializerOptions{StreamingCollectionsEncoding: true})
	rawSer := protobuf.NewRawSerializer(s, s)

	encode := func(e runtime.Encoder, obj runtime.Object) []byte {
		var b bytes.Buffer
		must(e.Encode(obj, &b))
		return b.Bytes()
	}
	decode := func(gvk schema.GroupVersionKind, data []byte) (runtime.Object, error) {
		into, err := s.New(gvk)
		if err != nil {
			return nil, err
		}
		obj, _, err := jsonSer.Decode(data, &gvk, into)
		return obj, err
	}
	// encoding/json's Encoder ends each value with a newline; the API
	// server's bodies and watch events carry the object without it.
	jsonOf := func(obj runtime.Object) []byte { return bytes.TrimSuffix(encode(jsonSer, obj), []byte("\n")) }

	if *golden {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			line := sc.Bytes()
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			// "Duration <json>": a bare metav1.Duration message (no kind
			// in k8s.io/api has one); "WATCH <json>": the ADDED watch frame
			// of the object; otherwise the object's protobuf body.
			if rest, ok := bytes.CutPrefix(line, []byte("Duration ")); ok {
				var d metav1.Duration
				must(json.Unmarshal(rest, &d))
				b, err := d.Marshal()
				must(err)
				fmt.Println(hex.EncodeToString(b))
				continue
			}
			rest, watch := bytes.CutPrefix(line, []byte("WATCH "))
			var tm metav1.TypeMeta
			must(json.Unmarshal(rest, &tm))
			obj, err := decode(tm.GroupVersionKind(), rest)
			must(err)
			body := encode(pbSer, obj)
			if watch {
				var frame bytes.Buffer
				event := &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: body}}
				must(streaming.NewEncoder(protobuf.LengthDelimitedFramer.NewFrameWriter(&frame), rawSer).Encode(event))
				body = frame.Bytes()
			}
			fmt.Println(hex.EncodeToString(body))
		}
		must(sc.Err())
		return
	}
	if *out == "" {
		fail("-out is required (or -golden)")
	}

	// The kinds: one GVK per Go type for the meta/v1 types every group
	// registers (options, WatchEvent), every GVK otherwise.
	metaPkg := reflect.TypeFor[metav1.ObjectMeta]().PkgPath()
	var gvks []schema.GroupVersionKind
	seenMeta := map[reflect.Type]bool{}
	all := s.AllKnownTypes()
	keys := make([]schema.GroupVersionKind, 0, len(all))
	for gvk := range all {
		keys = append(keys, gvk)
	}
	sort.Slice(keys, func(i, j int) bool { return gvkString(keys[i]) < gvkString(keys[j]) })
	for _, gvk := range keys {
		t := all[gvk]
		if gvk.Version == runtime.APIVersionInternal || !reflect.PointerTo(t).Implements(marshaller) {
			continue
		}
		if t.PkgPath() == metaPkg {
			if seenMeta[t] {
				continue
			}
			seenMeta[t] = true
		}
		if *only != "" && !strings.Contains(gvkString(gvk), *only) {
			continue
		}
		gvks = append(gvks, gvk)
	}

	// legacyscheme.Codecs: the RawExtension filler of FuzzerFuncs encodes
	// a random Pod, Deployment or Service with it.
	f := fuzzer.FuzzerFor(kapitesting.FuzzerFuncs, rand.NewSource(*seed), legacyscheme.Codecs).NumElements(0, *maxElements)

	must(os.MkdirAll(*out, 0o755))
	file, err := os.Create(filepath.Join(*out, "corpus.jsonl"))
	must(err)
	w := bufio.NewWriter(file)
	enc := json.NewEncoder(w)
	var written, lossy, unstable int
	var skipped []string
	lossyKinds := map[string]int{}
	for _, gvk := range gvks {
		if gvk.Kind == "WatchEvent" {
			// No TypeMeta, so no JSON body of its own; the corpus checks
			// watch frames of every other kind instead.
			skipped = append(skipped, gvkString(gvk)+" (no TypeMeta: checked as the frame of every event)")
			continue
		}
		for i := 0; i < *n; i++ {
			obj, err := s.New(gvk)
			must(err)
			f.Fill(obj)
			setTypeMeta(obj, gvk)
			original := encode(pbSer, obj)

			// Through JSON until the JSON is stable.
			js := jsonOf(obj)
			var decoded runtime.Object
			stable := false
			for round := 0; round < 4 && !stable; round++ {
				decoded, err = decode(gvk, js)
				if err != nil {
					fail("%s: the JSON Go wrote does not decode: %v", gvkString(gvk), err)
				}
				setTypeMeta(decoded, gvk)
				again := jsonOf(decoded)
				stable = bytes.Equal(again, js)
				js = again
			}
			if !stable {
				unstable++
				continue
			}
			pb := encode(pbSer, decoded)
			rec := record{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, N: i, JSON: string(js), Protobuf: pb,
				Lossy: !bytes.Equal(original, pb)}
			if rec.Lossy {
				rec.Original = original
				lossy++
				lossyKinds[gvkString(gvk)]++
			}
			if m, ok := decoded.(metav1.ObjectMetaAccessor); ok {
				partial := &metav1.PartialObjectMetadata{ObjectMeta: *m.GetObjectMeta().(*metav1.ObjectMeta)}
				rec.Partial = encode(rawSer, partial)
			}
			var frame bytes.Buffer
			event := &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: pb}}
			must(streaming.NewEncoder(protobuf.LengthDelimitedFramer.NewFrameWriter(&frame), rawSer).Encode(event))
			rec.Watch = frame.Bytes()
			must(enc.Encode(rec))
			written++
		}
	}
	must(w.Flush())
	must(file.Close())
	fmt.Fprintf(os.Stderr, "protocorpus: seed %d, %d kinds, %d objects written to %s; %d unstable through JSON (left out), %d lossy through JSON\n",
		*seed, len(gvks)-len(skipped), written, filepath.Join(*out, "corpus.jsonl"), unstable, lossy)
	for _, k := range skipped {
		fmt.Fprintf(os.Stderr, "protocorpus: skipped %s\n", k)
	}
	lk := make([]string, 0, len(lossyKinds))
	for k, c := range lossyKinds {
		lk = append(lk, fmt.Sprintf("%s: %d", k, c))
	}
	sort.Strings(lk)
	if len(lk) > 0 {
		fmt.Fprintf(os.Stderr, "protocorpus: lossy through JSON: %s\n", strings.Join(lk, "; "))
	}
}

func gvkString(gvk schema.GroupVersionKind) string {
	return gvk.GroupVersion().String() + " " + gvk.Kind
}

func setTypeMeta(obj runtime.Object, gvk schema.GroupVersionKind) {
	acc, err := apimeta.TypeAccessor(obj)
	must(err)
	acc.SetAPIVersion(gvk.GroupVersion().String())
	acc.SetKind(gvk.Kind)
}

func must(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "protocorpus: "+format+"\n", args...)
	os.Exit(1)
}
