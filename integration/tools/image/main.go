// Command ocibuild builds watchmux's OCI image from the repository's Dockerfile
// without a container daemon, so that the Dockerfile is the one recipe: `make
// image` (integration/scripts/image.sh) stages a build context and runs this
// on it.
//
// It understands the subset of the Dockerfile syntax an image FROM scratch
// needs (ARG, COPY, ENV, LABEL, USER, WORKDIR, EXPOSE, STOPSIGNAL, ENTRYPOINT
// and CMD in exec form) and refuses everything else, so the Dockerfile cannot
// grow an instruction that this build would silently skip. Each COPY is one
// layer, as in a docker build. The output is reproducible: entries sorted,
// every timestamp (file mtimes, layer history, the image's creation time) set
// to -epoch, owners numeric, no user or host names.
//
//	ocibuild -f Dockerfile -context DIR [-build-arg K=V]... -epoch SECONDS \
//	  -platform linux/amd64 -ref-name watchmux:0.1.0 -layout DIR -archive FILE.tar
//
// -layout is an OCI image layout directory (what `crane push DIR REF` reads),
// -archive the same layout as one tar file (what `skopeo copy oci-archive:FILE
// docker://REF` reads).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type buildArgs []string

func (b *buildArgs) String() string     { return strings.Join(*b, ",") }
func (b *buildArgs) Set(v string) error { *b = append(*b, v); return nil }

func main() {
	var (
		dockerfile = flag.String("f", "Dockerfile", "the Dockerfile")
		context    = flag.String("context", "", "the build context directory")
		epoch      = flag.Int64("epoch", 0, "every timestamp in the image, in seconds since 1970 (SOURCE_DATE_EPOCH)")
		platform   = flag.String("platform", "linux/amd64", "os/architecture of the image")
		refName    = flag.String("ref-name", "", "org.opencontainers.image.ref.name annotation in the layout's index")
		layoutDir  = flag.String("layout", "", "write an OCI image layout here (replaced)")
		archive    = flag.String("archive", "", "write the layout as one tar file here")
		args       buildArgs
	)
	flag.Var(&args, "build-arg", "K=V, for an ARG of the Dockerfile (repeatable)")
	flag.Parse()
	if *context == "" || *layoutDir == "" {
		fail(errors.New("-context and -layout are required"))
	}
	if err := run(*dockerfile, *context, args, time.Unix(*epoch, 0).UTC(), *platform, *refName, *layoutDir, *archive); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "ocibuild: %v\n", err)
	os.Exit(1)
}

func run(dockerfile, context string, args []string, created time.Time, platform, refName, layoutDir, archive string) error {
	text, err := os.ReadFile(dockerfile)
	if err != nil {
		return err
	}
	given := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("-build-arg %q: want K=V", a)
		}
		given[k] = v
	}
	osName, arch, ok := strings.Cut(platform, "/")
	if !ok {
		return fmt.Errorf("-platform %q: want os/arch", platform)
	}
	r := recipe{args: map[string]string{}, given: given, context: context, created: created}
	r.config = v1.ConfigFile{
		Created:      v1.Time{Time: created},
		OS:           osName,
		Architecture: arch,
		RootFS:       v1.RootFS{Type: "layers"},
	}
	for _, in := range instructions(string(text)) {
		if err := r.apply(in); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", dockerfile, in.line, in.keyword, err)
		}
	}
	if !r.from {
		return fmt.Errorf("%s: no FROM", dockerfile)
	}
	for k := range given {
		if _, ok := r.args[k]; !ok {
			return fmt.Errorf("-build-arg %s: the Dockerfile declares no ARG %s", k, k)
		}
	}

	img, err := mutate.ConfigFile(empty.Image, &r.config)
	if err != nil {
		return err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, r.layers...)
	if err != nil {
		return err
	}
	// mutate.Append put the layers' history after the instructions'; restore
	// the Dockerfile's order.
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.History = r.history
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := os.RemoveAll(layoutDir); err != nil {
		return err
	}
	p, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return err
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
	}
	if err := p.AppendImage(img, opts...); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("ocibuild: %s %s, %d layer(s)\n", refName, digest, len(r.layers))
	if archive != "" {
		return tarDir(layoutDir, archive, created)
	}
	return nil
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line    int
	keyword string // upper case
	rest    string
}

// instructions splits a Dockerfile into instructions: comment lines (parser
// directives included) and blank lines dropped, lines ending in a backslash
// joined to the next.
func instructions(text string) []instruction {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(strings.TrimSpace(cont))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		full := strings.TrimSpace(cur.String())
		cur.Reset()
		if full == "" {
			continue
		}
		kw, rest, _ := strings.Cut(full, " ")
		out = append(out, instruction{line: start, keyword: strings.ToUpper(kw), rest: strings.TrimSpace(rest)})
	}
	return out
}

type recipe struct {
	from    bool
	args    map[string]string // declared ARGs, with their values
	given   map[string]string // -build-arg values
	context string
	created time.Time
	config  v1.ConfigFile
	layers  []mutate.Addendum
	history []v1.History // every instruction's, layers' included, in order
}

var (
	varRef         = regexp.MustCompile(`\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)`)
	unsupportedVar = regexp.MustCompile(`\$\{[^}]*[^A-Za-z0-9_}][^}]*\}`)
)

// expand substitutes $NAME and ${NAME} with declared ARG and ENV values, as
// a docker build does in the instructions that take variables. Other forms
// (${NAME:-default}) are refused.
func (r *recipe) expand(s string) (string, error) {
	if unsupportedVar.MatchString(s) {
		return "", fmt.Errorf("unsupported variable form in %q", s)
	}
	var bad error
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.Trim(m, "${}")
		if v, ok := r.args[name]; ok {
			return v
		}
		for _, e := range r.config.Config.Env {
			if k, v, _ := strings.Cut(e, "="); k == name {
				return v
			}
		}
		bad = fmt.Errorf("$%s is neither an ARG nor an ENV", name)
		return ""
	})
	return out, bad
}

func (r *recipe) apply(in instruction) error {
	if !r.from && in.keyword != "FROM" {
		return errors.New("only FROM scratch may come first (an ARG before FROM only parameterises FROM)")
	}
	words, err := shellWords(in.rest)
	if err != nil && in.keyword != "ENTRYPOINT" && in.keyword != "CMD" {
		return err
	}
	c := &r.config.Config
	switch in.keyword {
	case "FROM":
		if r.from || len(words) != 1 || !strings.EqualFold(words[0], "scratch") {
			return errors.New("only one stage, FROM scratch: the image holds exactly the staged context")
		}
		r.from = true
	case "ARG":
		for _, w := range words {
			k, def, _ := strings.Cut(w, "=")
			if v, ok := r.given[k]; ok {
				def = v
			}
			r.args[k] = def
		}
	case "ENV", "LABEL":
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				return fmt.Errorf("%q: only the key=value form", w)
			}
			if v, err = r.expand(v); err != nil {
				return err
			}
			if in.keyword == "ENV" {
				c.Env = append(c.Env, k+"="+v)
			} else {
				if c.Labels == nil {
					c.Labels = map[string]string{}
				}
				c.Labels[k] = v
			}
		}
	case "USER", "WORKDIR", "STOPSIGNAL":
		if len(words) != 1 {
			return errors.New("one argument")
		}
		v, err := r.expand(words[0])
		if err != nil {
			return err
		}
		switch in.keyword {
		case "USER":
			c.User = v
		case "WORKDIR":
			c.WorkingDir = v
		default:
			c.StopSignal = v
		}
	case "EXPOSE":
		if c.ExposedPorts == nil {
			c.ExposedPorts = map[string]struct{}{}
		}
		for _, w := range words {
			if !strings.Contains(w, "/") {
				w += "/tcp"
			}
			c.ExposedPorts[w] = struct{}{}
		}
	case "ENTRYPOINT", "CMD":
		var list []string
		if err := json.Unmarshal([]byte(in.rest), &list); err != nil {
			return errors.New("only the exec form, a JSON array (there is no shell in the image)")
		}
		if in.keyword == "ENTRYPOINT" {
			c.Entrypoint = list
			c.Cmd = nil // as docker: an ENTRYPOINT resets an earlier CMD
		} else {
			c.Cmd = list
		}
	case "COPY":
		return r.copy(in, words)
	default:
		return errors.New("not supported here (FROM scratch, ARG, COPY, ENV, LABEL, USER, WORKDIR, STOPSIGNAL, EXPOSE, ENTRYPOINT, CMD)")
	}
	if in.keyword != "COPY" {
		r.history = append(r.history, v1.History{
			Created: v1.Time{Time: r.created}, CreatedBy: in.keyword + " " + in.rest, EmptyLayer: true,
		})
	}
	return nil
}

// copy makes one layer: each source (a file, or a directory whose contents
// are copied) under the destination, with parent directories, owned by root
// or --chown's numeric ids.
func (r *recipe) copy(in instruction, words []string) error {
	uid, gid := 0, 0
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		opt, _ := r.expand(words[0])
		words = words[1:]
		v, ok := strings.CutPrefix(opt, "--chown=")
		if !ok {
			return fmt.Errorf("option %s: only --chown=UID:GID", opt)
		}
		u, g, _ := strings.Cut(v, ":")
		var err1, err2 error
		uid, err1 = strconv.Atoi(u)
		gid, err2 = strconv.Atoi(g)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("--chown=%s: numeric UID:GID only (the image has no user database at build time)", v)
		}
	}
	if len(words) < 2 {
		return errors.New("COPY SRC... DEST")
	}
	dest, err := r.expand(words[len(words)-1])
	if err != nil {
		return err
	}
	if !strings.HasPrefix(dest, "/") {
		dest = path.Join("/", r.config.Config.WorkingDir, dest)
	}
	entries := map[string]entry{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = entry{mode: fs.ModeDir | 0o755}
			}
		}
	}
	for _, w := range words[:len(words)-1] {
		src, err := r.expand(w)
		if err != nil {
			return err
		}
		abs := filepath.Join(r.context, filepath.FromSlash(src))
		rel, err := filepath.Rel(r.context, abs)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("%s is outside the context", src)
		}
		st, err := os.Lstat(abs)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			target := dest
			if strings.HasSuffix(dest, "/") || len(words) > 2 {
				target = path.Join(dest, path.Base(filepath.ToSlash(src)))
			}
			e, err := entryOf(abs, st, uid, gid)
			if err != nil {
				return err
			}
			entries[path.Clean(target)] = e
			addParents(path.Clean(target))
			continue
		}
		err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(abs, p)
			target := path.Join(dest, filepath.ToSlash(rel))
			if target == "/" {
				return nil
			}
			info, err := os.Lstat(p)
			if err != nil {
				return err
			}
			e, err := entryOf(p, info, uid, gid)
			if err != nil {
				return err
			}
			entries[target] = e
			addParents(target)
			return nil
		})
		if err != nil {
			return err
		}
	}
	layerTar, err := layerTar(entries, r.created)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return err
	}
	h := v1.History{Created: v1.Time{Time: r.created}, CreatedBy: in.keyword + " " + in.rest}
	r.layers = append(r.layers, mutate.Addendum{Layer: layer, History: h})
	r.history = append(r.history, h)
	return nil
}

type entry struct {
	mode     fs.FileMode
	uid, gid int
	source   string // regular files: the file to read
	link     string // symlinks: the target
}

func entryOf(p string, info fs.FileInfo, uid, gid int) (entry, error) {
	e := entry{mode: info.Mode(), uid: uid, gid: gid}
	switch {
	case info.Mode().IsRegular():
		e.source = p
	case info.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(p)
		if err != nil {
			return e, err
		}
		e.link = t
	case info.IsDir():
	default:
		return e, fmt.Errorf("%s: only files, directories and symlinks", p)
	}
	return e, nil
}

// layerTar writes the entries as an uncompressed tar, sorted by path, every
// timestamp at mtime.
func layerTar(entries map[string]entry, mtime time.Time) ([]byte, error) {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		h := &tar.Header{
			Name: strings.TrimPrefix(n, "/"), Mode: int64(e.mode.Perm()), Uid: e.uid, Gid: e.gid,
			ModTime: mtime, Format: tar.FormatPAX,
		}
		if e.mode&fs.ModeSetuid != 0 || e.mode&fs.ModeSetgid != 0 {
			return nil, fmt.Errorf("%s: setuid/setgid bits in an image for a non-root user", n)
		}
		var data []byte
		switch {
		case e.mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
			var err error
			if data, err = os.ReadFile(e.source); err != nil {
				return nil, err
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the layout directory as one tar (an "OCI archive"),
// reproducibly.
func tarDir(dir, out string, mtime time.Time) error {
	entries := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e, err := entryOf(p, info, 0, 0)
		if err != nil {
			return err
		}
		if e.mode.IsRegular() {
			e.mode = 0o644
		} else if e.mode.IsDir() {
			e.mode = fs.ModeDir | 0o755
		}
		rel, _ := filepath.Rel(dir, p)
		entries["/"+filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		return err
	}
	data, err := layerTar(entries, mtime)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// shellWords splits an instruction's arguments as a docker build does for
// ARG, ENV, LABEL and COPY: on blanks outside quotes; quotes removed;
// backslash escapes the next character (outside single quotes).
func shellWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, ch := range s {
		switch {
		case escaped:
			cur.WriteRune(ch)
			escaped = false
		case ch == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0:
			if ch == quote {
				quote = 0
			} else {
				cur.WriteRune(ch)
			}
		case ch == '"' || ch == '\'':
			quote, inWord = ch, true
		case ch == ' ' || ch == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(ch)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("unterminated quote or escape in %q", s)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
