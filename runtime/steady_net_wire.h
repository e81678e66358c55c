// What the board over messages (runtime/steady_net_board.h) puts in a mailbox message: one or
// more records, each a fixed header and the data it carries. A member's own message is one
// record; a host leader's relay carries the records of several members (their `origin`).
#ifndef HORA_RUNTIME_STEADY_NET_WIRE_H_
#define HORA_RUNTIME_STEADY_NET_WIRE_H_

#include <cstdint>
#include <cstring>
#include <vector>

namespace hora {
namespace steady_wire {

// kGone: a leader passes on that it lost its connection to `origin` (two levels).
enum class Kind : uint8_t {
  kNone = 0,
  kOffer = 1,
  kRefuse = 2,
  kJoined = 3,
  kOrder = 4,
  kGone = 5
};

struct Header {
  uint8_t kind;
  uint8_t eager;  // an offer: its data follows; an ORDER: the next record is of its group
  uint16_t pad;
  uint32_t origin;  // the member whose offer, refusal or join this is
  uint32_t entry;
  uint32_t instance;
  int32_t last;    // an ORDER: the member whose offer completed the instance (-1: unknown)
  uint32_t bytes;  // of data after the header
};

// Appends one record to *message.
inline void Put(std::vector<char>* message, Kind kind, bool eager, int origin, uint32_t entry,
                uint32_t instance, int last, const void* data, size_t bytes) {
  const Header h{static_cast<uint8_t>(kind),
                 static_cast<uint8_t>(eager ? 1 : 0),
                 0,
                 static_cast<uint32_t>(origin),
                 entry,
                 instance,
                 last,
                 static_cast<uint32_t>(bytes)};
  const size_t at = message->size();
  message->resize(at + sizeof(h) + bytes);
  memcpy(message->data() + at, &h, sizeof(h));
  if (bytes > 0) memcpy(message->data() + at + sizeof(h), data, bytes);
}

// Calls fn(header, data) for each record of a message; false if it is cut short.
template <typename Fn>
bool ForEach(const char* message, size_t bytes, Fn&& fn) {
  while (bytes > 0) {
    Header h;
    if (bytes < sizeof(h)) return false;
    memcpy(&h, message, sizeof(h));
    if (bytes - sizeof(h) < h.bytes) return false;
    fn(h, message + sizeof(h));
    message += sizeof(h) + h.bytes;
    bytes -= sizeof(h) + h.bytes;
  }
  return true;
}

}  // namespace steady_wire
}  // namespace hora

#endif  // HORA_RUNTIME_STEADY_NET_WIRE_H_
