package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Stream, bucket and consumer names (docs/design.md §4): part of the operator interface.
const (
	StreamWork       = "JETPOOL_WORK"
	StreamDLQ        = "JETPOOL_DLQ"
	StreamResults    = "JETPOOL_RESULTS"
	StreamAdvisories = "JETPOOL_ADVISORIES"
	BucketJobs       = "JETPOOL_JOBS"
	BucketAttempts   = "JETPOOL_ATTEMPTS"
	BucketLimits     = "JETPOOL_LIMITS"
	BucketBatches    = "JETPOOL_BATCHES"
	BucketClaims     = "JETPOOL_CLAIMS"

	// ConsumerMaxDeliveries is the durable consumer of the poison-pill catcher.
	ConsumerMaxDeliveries = "jetpool-maxdeliveries"

	// SubjectControl is where workers answer stats requests (request/reply).
	SubjectControl = "jetpool.ctl.stats"
)

// Header keys of work messages and dead letters. Nats- headers are the server's.
const (
	HeaderMsgID      = "Nats-Msg-Id"
	HeaderJob        = "Jetpool-Job"
	HeaderRecord     = "Jetpool-Record"
	HeaderAction     = "Jetpool-Action"
	HeaderReason     = "Jetpool-Reason"
	HeaderErrorClass = "Jetpool-Error-Class"
	HeaderError      = "Jetpool-Error"
	HeaderAttempts   = "Jetpool-Attempts"
	HeaderDeliveries = "Jetpool-Deliveries"
	HeaderProvider   = "Jetpool-Provider"
	HeaderModel      = "Jetpool-Model"
	HeaderFailedAt   = "Jetpool-Failed-At"
	HeaderReplays    = "Jetpool-Replays"
	HeaderWorker     = "Jetpool-Worker"
	// HeaderTraceparent is the W3C trace context of a work message or a
	// dead letter (package tracing): lower case, as the W3C spells it and
	// NATS headers match case-sensitively.
	HeaderTraceparent = "traceparent"
	HeaderMode        = "Jetpool-Mode" // "online" forces online mode on replay of a batch action
	// HeaderFirstRun "1" says the publisher knew that no result of this
	// action can exist for the record yet (a job's first dispatch, or the
	// hop from the one run of the previous action): the first delivery of
	// such a message skips the already-succeeded lookup. Any other message,
	// and every redelivery, looks the result up first.
	HeaderFirstRun = "Jetpool-First-Run"
	// HeaderNonce is the job's Nonce on every work message the dispatcher
	// publishes for the job's first action: a worker drops one whose nonce
	// is not the job's (a dispatch that lost the job to another, whose
	// last writes arrived late: dispatcher/checking.go).
	HeaderNonce = "Jetpool-Nonce"
	// HeaderRevision names the revision of the job's workflow a work
	// message runs under (Job.Revisions); absent: revision 1. A record
	// keeps its revision from action to action, so records in flight when
	// a revision is added are not switched mid-way.
	HeaderRevision = "Jetpool-Revision"
)

// ValidName reports whether s can be a job or action name: it becomes a
// subject token and part of a consumer name.
// (1-64 letters, digits, '-' or '_'.) A loop, not a regexp: it runs on
// every record id of every work message and result (RecordToken).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CheckJobID returns an error naming the job id when it is unusable.
func CheckJobID(id string) error {
	if !ValidName(id) {
		return fmt.Errorf("job id %q: use 1-64 letters, digits, '-' or '_'", id)
	}
	return nil
}

// RecordToken is the subject token of a record id: the id itself when it is
// a safe token, else a hash of it (the full id travels in headers and bodies).
func RecordToken(id string) string {
	if ValidName(id) && !strings.HasPrefix(id, "h_") {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h_" + hex.EncodeToString(sum[:12])
}

// WorkSubject is jetpool.work.<job>.<action>.
func WorkSubject(job, action string) string { return "jetpool.work." + job + "." + action }

// WorkFilter matches every action of a job.
func WorkFilter(job string) string { return "jetpool.work." + job + ".>" }

// DLQSubject is jetpool.dlq.<job>.<action>.
func DLQSubject(job, action string) string { return "jetpool.dlq." + job + "." + action }

// DLQFilter matches the dead letters of a job ("" for all) and action ("" for all).
func DLQFilter(job, action string) string {
	return "jetpool.dlq." + cmpTok(job) + "." + cmpTok(action)
}

// Outcome tokens of result subjects: "ok", or the dead-letter reason.
const OutcomeOK = "ok"

// ResultSubject is jetpool.results.<job>.<action>.<outcome>.<record-token>.
// One message per subject (MaxMsgsPerSubject 1), so counts are exact.
func ResultSubject(job, action, outcome, record string) string {
	return "jetpool.results." + job + "." + action + "." + outcome + "." + RecordToken(record)
}

// ResultFilter matches results; empty parts match anything.
func ResultFilter(job, action, outcome string) string {
	return "jetpool.results." + cmpTok(job) + "." + cmpTok(action) + "." + cmpTok(outcome) + ".*"
}

// ConsumerName is the durable work consumer of a job.
func ConsumerName(job string) string { return "jetpool-" + job }

// AdvisorySubject is where the server reports records that reached MaxDeliver.
const AdvisorySubject = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamWork + ".>"

func cmpTok(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

// SubjectParts splits a jetpool subject into its tokens after the prefix
// ("jetpool.work.", ...): job, action, and for results outcome and record.
func SubjectParts(subject string) []string {
	t := strings.Split(subject, ".")
	if len(t) < 2 {
		return nil
	}
	return t[2:]
}
