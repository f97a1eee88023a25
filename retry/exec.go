package retry

// Decide is the exec layer's answer for delivery (1-based) of a record whose
// session ended with o:
//
//   - success: VerdictDone;
//   - canceled (the worker is shutting down): VerdictRedeliver at once, the
//     record was not failed, only interrupted;
//   - a permanent class: VerdictDeadLetter at once, with the reason of the
//     class (auth and invalid_request: ReasonPermanent);
//   - retry off: VerdictDeadLetter, ReasonExhausted (one call, one delivery);
//   - transient or unknown with deliveries left: VerdictRedeliver after
//     RedeliverDelay(delivery, the provider's last Retry-After);
//   - otherwise: VerdictDeadLetter, ReasonExhausted.
//
// A canceled delivery is handed back even on its last delivery; the
// consumer's MaxDeliver should leave room for that (the MAX_DELIVERIES
// advisory catches what is left).
func (p Policy) Decide(o Outcome, delivery int) Decision {
	if o.Err == nil {
		return Decision{Verdict: VerdictDone}
	}
	if o.Canceled {
		return Decision{Verdict: VerdictRedeliver}
	}
	switch classOf(o.Err) {
	case ClassAuth, ClassInvalidRequest:
		return deadLetter(ReasonPermanent)
	case ClassContextOverflow:
		return deadLetter(ReasonContextOverflow)
	case ClassSchemaViolation:
		return deadLetter(ReasonSchemaViolation)
	case ClassProgramming:
		return deadLetter(ReasonProgrammingError)
	case ClassTruncated:
		return deadLetter(ReasonTruncated)
	case ClassContentFilter:
		return deadLetter(ReasonContentFilter)
	case ClassBudget:
		return deadLetter(ReasonBudget)
	}
	if p.Enabled && delivery < p.Deliveries() {
		return Decision{Verdict: VerdictRedeliver, Delay: p.RedeliverDelay(delivery, o.Err.Wait())}
	}
	return deadLetter(ReasonExhausted)
}

func deadLetter(r Reason) Decision {
	return Decision{Verdict: VerdictDeadLetter, Reason: r}
}
