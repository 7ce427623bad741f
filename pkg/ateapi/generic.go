package ateapi

import "google.golang.org/grpc"

// Conn is the authenticated connection the Client calls through, for callers
// that speak the API generically from its reflection (kubectl ate api). The
// Client keeps ownership: Close closes it.
func (c *Client) Conn() grpc.ClientConnInterface { return c.conn }

// Scrub replaces in s every bearer token this Client has sent, in case a
// server echoed one into a message that is about to be printed.
func (c *Client) Scrub(s string) string { return c.creds.scrub(s) }
