// bounded_write.h: writing all of a buffer to a descriptor whose reader may stop reading: a pipe, a
// FIFO, a terminal, a socket.
//
// Note [Bounded writes]
// A report goes to wherever its user points it, and at exit nobody is left to notice a write that
// never ends: a FIFO whose reader holds it open and never reads took a report of over 64 KiB and kept
// the exiting program forever, with Ctrl-C retried away as EINTR. So a write that must wait for its
// reader waits at most `stall_ms` for each step of progress (a slow reader gets everything; one that
// takes nothing for that long is given up on), and gives up at once when SIGINT arrives, so the host
// sees its Ctrl-C (a Python host raises KeyboardInterrupt once the write returns). Only while it waits
// is SIGINT caught, by a handler that notes it and calls the handler the host had (Note [SIGINT while
// waiting] in bounded_write.cpp). SIGPIPE is blocked meanwhile: a reader that goes away fails the
// write with EPIPE instead of killing the host. Regular files and block devices never wait this way:
// they are written straight through.
#pragma once

#include <cstddef>

namespace tracepool::core {

inline constexpr int default_write_stall_ms = 10000;

enum class write_outcome {
  written,      // every byte
  failed,       // errno says why
  stalled,      // the reader took nothing for stall_ms
  interrupted,  // SIGINT arrived while waiting for the reader
};

// Writes `size` bytes of `data` to `fd`, waiting on a descriptor the host made non-blocking too.
// *written: the bytes that went out, whatever the outcome.
write_outcome write_bounded(int fd, const void* data, size_t size, int stall_ms, size_t* written);

}  // namespace tracepool::core
