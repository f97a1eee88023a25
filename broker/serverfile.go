package broker

import (
	"net"
	"net/url"
)

// serverFileDialer dials the server the data dir's ServerFile names now,
// whatever address the connection asks for: a process using the store of
// another (`jetpool ui` beside a `jetpool run` that hosts it) follows it
// when that process is restarted on another port, instead of reconnecting
// for ever to the port of the one that went. While no file names a server,
// the address asked for is dialed (and fails: the connection keeps trying).
type serverFileDialer struct {
	dir string
	d   net.Dialer
}

func (s *serverFileDialer) Dial(network, address string) (net.Conn, error) {
	if u, err := url.Parse(readServerFile(s.dir)); err == nil && u.Host != "" {
		address = u.Host
	}
	return s.d.Dial(network, address)
}
