/**
 * The Java thin client of stated, written from {@code api/stated.proto} and {@code
 * docs/protocol.md}.
 *
 * <p>{@link io.stated.client.StatedClient} is one connection to a daemon (Unix socket, or TCP with
 * TLS and the token) and makes the unary calls; {@link io.stated.client.Instance} is an open
 * backend instance with its one long-lived batch stream, on which operations are pipelined (many
 * requests in flight, answered in order) and snapshots are barriers. Every call returns a {@link
 * java.util.concurrent.CompletableFuture}; failures are {@link io.stated.client.StatedException}s
 * that keep the daemon's status code and text. {@link io.stated.client.KeyGroups} computes key
 * groups as the proto specifies.
 */
package io.stated.client;
