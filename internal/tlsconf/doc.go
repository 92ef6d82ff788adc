// Package tlsconf builds the TLS configurations of the daemon's TCP API and
// of its clients from PEM files: the server's certificate and key, and the
// certificate authorities that verify the other side.
//
// The server re-reads its certificate and key when either file changes, so
// that an operator (or cert-manager, or a cron job) can rotate them without
// restarting the daemon and dropping every task's stream: a TLS handshake
// checks the files' modification times, which costs two stat calls on a
// path that runs once per connection, not per request.
package tlsconf
