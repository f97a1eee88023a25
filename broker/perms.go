package broker

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"
)

// A user of a least-privilege deployment (deploy/nats/accounts.conf) may
// not publish everywhere, and the server refuses a publish only
// asynchronously: a JetStream write it refuses waits out its timeout. So
// a command that writes only by the way — `jetpool status` recording that
// a job it sees finished is completed — asks first, and a read-only user
// (the viewer) is not slowed by writes it may not make.

// userInfoSubject is the server's answer to "who am I and what may I do".
const userInfoSubject = "$SYS.REQ.USER.INFO"

// userInfoWait bounds the question: a server that does not answer it is
// taken to allow everything (the write is tried, the server decides).
const userInfoWait = 2 * time.Second

// perms is the publish permissions of a connection's user; nil lists
// mean no restriction.
type perms struct {
	once        sync.Once
	known       bool
	allowAll    bool
	allow, deny []string
}

// MayPublish reports whether the server lets this connection publish on
// subject, as it says on $SYS.REQ.USER.INFO (asked once per connection).
// When it does not say (no answer, a server without the system account,
// the question itself not allowed), MayPublish reports true.
func (b *Broker) MayPublish(ctx context.Context, subject string) bool {
	p := &b.perms
	p.once.Do(func() { p.load(ctx, b) })
	if !p.known || p.allowAll {
		return true
	}
	for _, d := range p.deny {
		if subjectMatches(d, subject) {
			return false
		}
	}
	if p.allow == nil {
		return true
	}
	for _, a := range p.allow {
		if subjectMatches(a, subject) {
			return true
		}
	}
	return false
}

func (p *perms) load(ctx context.Context, b *Broker) {
	ctx, cancel := context.WithTimeout(ctx, userInfoWait)
	defer cancel()
	m, err := b.NC.RequestWithContext(ctx, userInfoSubject, nil)
	if err != nil {
		return
	}
	var resp struct {
		Data *struct {
			Permissions *struct {
				Publish *struct {
					Allow []string `json:"allow"`
					Deny  []string `json:"deny"`
				} `json:"publish"`
			} `json:"permissions"`
		} `json:"data"`
	}
	if json.Unmarshal(m.Data, &resp) != nil || resp.Data == nil {
		return
	}
	p.known = true
	if resp.Data.Permissions == nil || resp.Data.Permissions.Publish == nil {
		p.allowAll = true
		return
	}
	p.allow, p.deny = resp.Data.Permissions.Publish.Allow, resp.Data.Permissions.Publish.Deny
}

// subjectMatches reports whether subject is matched by pattern, a NATS
// subject with "*" (one token) and ">" (the rest) wildcards.
func subjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case p != "*" && p != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}
