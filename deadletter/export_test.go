package deadletter

// CrashAfterPublish makes Replay stop right after the first republish, as a
// process that crashed there would.
func (o *ReplayOptions) CrashAfterPublish() { o.crashAfterPublish = true }

// ErrCrash is the error of a simulated crash.
var ErrCrash = errCrash
