package dispatcher

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// The files of a record's images and documents. An entry that renders to a
// file path names a file on the dispatching machine: the dispatcher reads
// it and carries it, base64, in the record's work message
// (broker.Envelope.Files), because workers run elsewhere and read no local
// files. Each file counts against the server's max_payload with the record
// (workMsgSize). The validation pass only looks at the files (their size
// and first bytes); the publishing pass reads them.

// attacher renders the images and documents of the actions that read only
// the record, for each record.
type attacher struct {
	wf      *workflow.Workflow
	dir     string // paths are relative to the input file's directory
	actions []int
	// read: the publishing pass, which carries the files; the validation
	// pass only checks them.
	read       bool
	maxPayload int64
}

// newAttacher is nil when no action has images or documents the
// dispatcher renders: most workflows, which then pay nothing.
func newAttacher(wf *workflow.Workflow, opts Options) *attacher {
	at := &attacher{wf: wf, dir: filepath.Dir(opts.Input), read: opts.readFiles, maxPayload: opts.MaxPayload}
	for i := range wf.Actions {
		if wf.RecordParts(i) {
			at.actions = append(at.actions, i)
		}
	}
	if len(at.actions) == 0 {
		return nil
	}
	return at
}

// sniffBytes is how much of a file is read to tell its type.
const sniffBytes = 512

// attach checks the parts of rec and sets rec.FilesSize (and, when
// reading, rec.Files), or returns the *LineError that refuses the record.
func (at *attacher) attach(file string, rec *Record) error {
	data := make(map[string]any, len(rec.Fields))
	for k, raw := range rec.Fields {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return &LineError{File: file, Line: rec.Line, Reason: fmt.Sprintf("field %s: %v", k, err)}
		}
		data[k] = v
	}
	bad := func(i int, field, format string, args ...any) error {
		return &LineError{File: file, Line: rec.Line, Reason: fmt.Sprintf("actions[%d].%s: ", i, field) + fmt.Sprintf(format, args...)}
	}
	for _, i := range at.actions {
		parts, err := at.wf.Actions[i].RenderParts(data)
		if err != nil {
			return &LineError{File: file, Line: rec.Line, Reason: err.Error()}
		}
		for _, p := range parts {
			src, err := workflow.PartSource(p.Value)
			if err != nil {
				return bad(i, p.Field, "%v", err)
			}
			switch src {
			case workflow.SourceData:
				mt, _, err := provider.ParseDataURL(p.Value)
				if err != nil {
					return bad(i, p.Field, "%v", err)
				}
				if want := provider.AcceptedTypes(p.Type); !slices.Contains(want, mt) {
					return bad(i, p.Field, "a data: URL of %s, want %s", mt, strings.Join(want, ", "))
				}
			case workflow.SourceFile:
				if f, seen := rec.Files[p.Value]; seen { // one file, two entries
					if want := provider.AcceptedTypes(p.Type); !slices.Contains(want, f.MediaType) {
						return bad(i, p.Field, "%s is %s, want %s", p.Value, f.MediaType, strings.Join(want, ", "))
					}
					continue
				}
				f, size, err := at.file(p)
				if err != nil {
					return bad(i, p.Field, "%v", err)
				}
				if rec.Files == nil {
					rec.Files = map[string]broker.File{}
				}
				rec.Files[p.Value] = f
				rec.FilesSize += fileSize(p.Value, f.MediaType, size)
			}
		}
	}
	if !at.read {
		rec.Files = nil // sizes counted; nothing kept
	}
	return nil
}

// file opens the file of a part, tells its type from its bytes, and reads
// it when the pass carries files (File.Data empty otherwise).
func (at *attacher) file(p workflow.RenderedPart) (broker.File, int64, error) {
	path := p.Value
	if !filepath.IsAbs(path) {
		path = filepath.Join(at.dir, path)
	}
	fh, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return broker.File{}, 0, fmt.Errorf("%s: no such file (a path is relative to the input file's directory)", path)
		}
		return broker.File{}, 0, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return broker.File{}, 0, err
	}
	if !st.Mode().IsRegular() {
		return broker.File{}, 0, fmt.Errorf("%s is not a file", path)
	}
	head := make([]byte, sniffBytes)
	n, err := io.ReadFull(fh, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return broker.File{}, 0, err
	}
	mt, _, _ := strings.Cut(http.DetectContentType(head[:n]), ";")
	if want := provider.AcceptedTypes(p.Type); !slices.Contains(want, mt) {
		return broker.File{}, 0, fmt.Errorf("%s is %s, want %s", p.Value, mt, strings.Join(want, ", "))
	}
	f := broker.File{MediaType: mt}
	if at.read && (at.maxPayload <= 0 || st.Size() <= at.maxPayload) {
		// (A file larger than a message can be is refused by the size
		// check without being read.)
		b, err := os.ReadFile(path)
		if err != nil {
			return broker.File{}, 0, err
		}
		f.Data = base64.StdEncoding.EncodeToString(b)
	}
	return f, st.Size(), nil
}

// fileSize is what a file of size bytes adds to an envelope: its key, its
// media type and its base64.
func fileSize(key, mediaType string, size int64) int64 {
	const overhead = len(`"files":{},`) + len(`"":{"media_type":"","data":""},`)
	return int64(overhead+6*len(key)+len(mediaType)) + base64Len(size)
}

func base64Len(n int64) int64 { return (n + 2) / 3 * 4 }
