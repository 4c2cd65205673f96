// The TCP backend on Boost.Asio, run by the engine Loop's io_context (no thread of its own).
//
// Wire format (little-endian): each side first sends a 48-byte hello
//   u32 magic "GVTD" | u16 version (2) | u16 reserved | u32 sender rank | u32 reserved | 32-byte
//   token
// then frames: u64 tag | u64 length | length bytes. The lower rank dials the higher rank's data
// listener; the higher rank accepts and identifies the dialer by its hello. Both sides check the
// hello, and its token against the DataBinding of Context::connectBound (with a key, derived from
// the edge's handshake): the listener closes a dialer's socket with another token unread and
// unanswered; the dialer sends nothing but its hello until the listener's hello carried the right
// token.
//
// Receive path: a 256 KiB pooled staging buffer takes small frames in one read; the body of a large
// frame is read straight into the posted receive buffer (or into a pooled buffer when no receive is
// posted yet). Unexpected messages are buffered up to Options::maxMessageBytes in total; past that
// the connection stops reading (TCP flow control pushes back on the sender) until a receive is
// posted. A frame longer than maxMessageBytes fails the connection before anything is allocated for
// it.
//
// Deadlines: connecting, the hello, a write that makes no progress, and a frame whose bytes stop
// arriving midway all fail the connection with kUnavailable after Options::ioTimeoutSeconds. An
// idle connection (between frames) has no deadline of its own: keepalive, TCP_USER_TIMEOUT and the
// control connection's heartbeats cover it.
#pragma once

#include <memory>

#include "runtime/transport/transport.h"

namespace grapevine::transport::tcp {

// Binds and listens on options.host:options.dataPort (0: ephemeral). Call on the loop thread.
// Errors: kInvalidArgument for a bad host, kUnavailable when the port cannot be bound.
Result<std::unique_ptr<Context>> makeTcpContext(Loop& loop, const Options& options);

// Always "usable" (plain sockets). Any thread.
BackendInfo tcpBackendInfo();

}  // namespace grapevine::transport::tcp
