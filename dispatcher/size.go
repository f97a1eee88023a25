package dispatcher

import (
	"fmt"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// A NATS server refuses a message larger than its max_payload (1 MB on a
// stock nats-server, 8 MB on jetpool's embedded one), headers included. A
// record whose work message would be larger is refused in the validation
// pass, with its line, before anything is published: at publish time it
// would fail the dispatch halfway, with records already queued and the job
// left dispatching.

// bigRecordHelp says what to do about a record over max_payload.
const bigRecordHelp = "raise max_payload on the NATS server (deploy/README.md, \"Big records\")"

// workMsgSize bounds the size of rec's work message for action as the
// server counts it against max_payload (headers and body), for any job id
// and replay generation: broker.NewWorkMsg's envelope and headers, with the
// record id escaped at worst and the longest job id, and the files its
// images and documents carry (files.go).
func workMsgSize(action string, rec Record) int64 {
	const jobMax, digits = 64, 20
	idJSON := 6*len(rec.ID) + 2 // a JSON string escapes a byte to at most 6
	body := len(`{"id":,"record":,"line":}`) + idJSON + len(rec.Raw) + digits + int(rec.FilesSize)
	token := max(len(rec.ID), 2+24) // broker.RecordToken: the id, or h_ and a hash
	header := func(k string, v int) int { return len(k) + len(": \r\n") + v }
	hdr := len("NATS/1.0\r\n\r\n") +
		header(broker.HeaderMsgID, len("work.")+jobMax+1+len(action)+1+token+1+digits) +
		header(broker.HeaderRecord, len(rec.ID)) +
		header(broker.HeaderFirstRun, 1) +
		header(broker.HeaderReplays, digits)
	return int64(body + hdr)
}

// checkSize refuses rec when its work message would exceed opts.MaxPayload.
func checkSize(opts Options, rec Record, action string) error {
	if opts.MaxPayload <= 0 {
		return nil
	}
	if n := workMsgSize(action, rec); n > opts.MaxPayload {
		return &LineError{File: opts.Input, Line: rec.Line, tooLarge: true, Reason: fmt.Sprintf(
			"the record is %d bytes%s and its work message up to %d, more than the NATS server's max_payload of %d bytes (%s)",
			len(rec.Raw), withFiles(rec), n, opts.MaxPayload, bigRecordHelp)}
	}
	return nil
}

// jobEntryOverhead bounds what a job's JETPOOL_JOBS entry adds to its
// encoded workflow (ids, totals, dates, the input's path) and its headers.
const jobEntryOverhead = 4096

// checkWorkflowSize refuses a workflow whose job entry would exceed
// maxPayload: schemas are inlined into it.
func checkWorkflowSize(wf *workflow.Workflow, maxPayload int64) error {
	if maxPayload <= 0 {
		return nil
	}
	enc, err := wf.Encode()
	if err != nil {
		return err
	}
	if n := int64(len(enc) + jobEntryOverhead); n > maxPayload {
		return &LineError{File: wf.File, Reason: fmt.Sprintf(
			"encoded for the job (schemas inlined) the workflow is %d bytes, more than the NATS server's max_payload of %d bytes (%s)",
			len(enc), maxPayload, bigRecordHelp)}
	}
	return nil
}

// withFiles says what a record's files add, for a size error.
func withFiles(rec Record) string {
	if rec.FilesSize == 0 {
		return ""
	}
	return fmt.Sprintf(" with %d bytes of files (base64)", rec.FilesSize)
}
