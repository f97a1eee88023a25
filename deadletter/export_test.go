package deadletter

// CrashAfterPublish makes Replay stop right after the first republish, as a
// process that crashed there would.
func (o *ReplayOptions) CrashAfterPublish() { o.crashAfterPublish = true }

// ErrCrash is the error of a simulated crash.
var ErrCrash = errCrash

// AfterPublish makes Replay call fn after each republish, before it deletes
// the entry's failed result and dead letter.
func (o *ReplayOptions) AfterPublish(fn func(*Entry)) { o.afterPublish = fn }
