// Send and Recv of the shm communicator.
//
// Every ordered pair (src -> dst) has a ring of ring_bytes in the segment, a byte stream:
// src appends and advances `head`, dst consumes and advances `tail` (release / acquire, and
// each rings the other's doorbell if it sleeps). A message is a 16-byte header (tag, magic,
// payload bytes) and its payload; the sender writes it in pieces of at most half the ring so
// the receiver copies out while the sender copies in. Zero-byte messages move nothing (both
// sides know the size from the plan).
//
// Matching: messages from one peer arrive in the order they were sent. The receiver reads
// the stream only inside Recv and Send; a message whose tag the current Recv does not want,
// or that arrives while this member is blocked in a Send (its ring to the peer full), is
// copied to the heap (`unexpected`, per tag, in order) and handed to a later Recv of that
// tag. So the n-th Send with tag t matches the n-th Recv with tag t whatever the order of
// tags, and two members that send to each other before receiving do not deadlock: each
// drains the other's ring while it waits for room.
#include <cstring>

#include "collectives/shm/shm_impl.h"
#include "common/copy.h"

namespace hora {
namespace shm {
namespace {

constexpr uint32_t kFrameMagic = 0x68736d66;  // "fmsh"
constexpr size_t kHeaderBytes = 16;

}  // namespace

Status ShmCommunicator::CheckPeer(int peer, const char* what) {
  if (peer < 0 || peer >= n_ || peer == me_) {
    return InvalidArgument(std::string("shm ") + what + ": peer " + std::to_string(peer) +
                           " is out of range [0, " + std::to_string(n_) + ") or this rank");
  }
  return Healthy();
}

Status ShmCommunicator::Send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  HORA_RETURN_IF_ERROR(CheckPeer(peer, "send"));
  if (bytes == 0) return Status::Ok();
  ChannelControl* ch = segment_->channel(me_, peer);
  uint8_t* ring = segment_->ring(me_, peer);
  const size_t cap = tuning_.ring_bytes;
  uint64_t& head = out_head_[peer];
  uint8_t header[kHeaderBytes];
  const uint64_t b64 = bytes;
  std::memcpy(header, &tag, 4);
  std::memcpy(header + 4, &kFrameMagic, 4);
  std::memcpy(header + 8, &b64, 8);
  auto any_incoming = [&] {
    for (int r = 0; r < n_; ++r) {
      if (r != me_ &&
          segment_->channel(r, me_)->head.load(std::memory_order_acquire) != incoming_[r].tail) {
        return true;
      }
    }
    return false;
  };
  auto write = [&](const uint8_t* p, size_t len) -> Status {
    while (len > 0) {
      const uint64_t tail = ch->tail.load(std::memory_order_acquire);
      const size_t space = cap - static_cast<size_t>(head - tail);
      if (space == 0) {
        HORA_RETURN_IF_ERROR(WaitUntil(
            [&] { return ch->tail.load(std::memory_order_acquire) != tail || any_incoming(); },
            peer, "send",
            [&] {
              return "to receive a message with tag " + std::to_string(tag) + " (" +
                     std::to_string(bytes) + " bytes; its ring from this rank is full)";
            }));
        HORA_RETURN_IF_ERROR(DrainAll());  // keeps a peer that sends to us from blocking
        continue;
      }
      const size_t m = std::min({space, len, std::max(cap / 2, kHeaderBytes)});
      const size_t pos = static_cast<size_t>(head % cap);
      const size_t first = std::min(m, cap - pos);
      CopyBytes(ring + pos, p, first);
      CopyBytes(ring, p + first, m - first);
      head += m;
      ch->head.store(head, std::memory_order_seq_cst);
      Ring(peer);
      p += m;
      len -= m;
    }
    return Status::Ok();
  };
  HORA_RETURN_IF_ERROR(write(header, kHeaderBytes));
  return write(static_cast<const uint8_t*>(buf), bytes);
}

Status ShmCommunicator::Recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  HORA_RETURN_IF_ERROR(CheckPeer(peer, "recv"));
  if (bytes == 0) return Status::Ok();
  Incoming& in = incoming_[peer];
  const ChannelControl* ch = segment_->channel(peer, me_);
  auto wait_data = [&]() -> Status {
    return WaitUntil([&] { return ch->head.load(std::memory_order_acquire) != in.tail; }, peer,
                     "recv",
                     [&] {
                       return "to send a message with tag " + std::to_string(tag) + " (" +
                              std::to_string(bytes) + " bytes)";
                     });
  };
  auto queued = in.unexpected.find(tag);
  if (queued != in.unexpected.end() && !queued->second.empty()) {
    // An earlier message with this tag is (partly) on the heap: it is the one to match.
    while (!queued->second.front().complete) {
      HORA_RETURN_IF_ERROR(wait_data());
      HORA_RETURN_IF_ERROR(Drain(peer));
    }
    std::vector<uint8_t>& data = queued->second.front().data;
    if (data.size() != bytes) {
      return Fail(InvalidArgument("shm recv from rank " + std::to_string(peer) + " with tag " +
                                  std::to_string(tag) + ": the peer sent " +
                                  std::to_string(data.size()) + " bytes, this rank expects " +
                                  std::to_string(bytes)));
    }
    CopyBytes(buf, data.data(), bytes);
    queued->second.pop_front();
    if (queued->second.empty()) in.unexpected.erase(queued);
    return Status::Ok();
  }
  in.want = true;
  in.want_done = false;
  in.want_tag = tag;
  in.want_buf = static_cast<uint8_t*>(buf);
  in.want_bytes = bytes;
  Status s;
  for (;;) {
    s = Drain(peer);
    if (!s.ok() || in.want_done) break;
    s = wait_data();
    if (!s.ok()) break;
  }
  in.want = false;
  return s;
}

Status ShmCommunicator::DrainAll() {
  for (int r = 0; r < n_; ++r) {
    if (r != me_) HORA_RETURN_IF_ERROR(Drain(r));
  }
  return Status::Ok();
}

Status ShmCommunicator::StartMessage(int peer) {
  Incoming& in = incoming_[peer];
  uint32_t magic;
  std::memcpy(&in.tag, in.header, 4);
  std::memcpy(&magic, in.header + 4, 4);
  std::memcpy(&in.bytes, in.header + 8, 8);
  if (magic != kFrameMagic || in.bytes == 0) {
    return Fail(Internal("shm: corrupt message stream from rank " + std::to_string(peer)));
  }
  in.in_message = true;
  in.got = 0;
  auto q = in.unexpected.find(in.tag);
  const bool direct = in.want && !in.want_done && in.want_tag == in.tag &&
                      (q == in.unexpected.end() || q->second.empty());
  if (!direct) {
    std::deque<Pending>& queue = in.unexpected[in.tag];
    queue.emplace_back();
    queue.back().data.resize(in.bytes);
    in.pending = &queue.back();
    in.dst = in.pending->data.data();
    return Status::Ok();
  }
  if (in.bytes != in.want_bytes) {
    return Fail(InvalidArgument("shm recv from rank " + std::to_string(peer) + " with tag " +
                                std::to_string(in.tag) + ": the peer sent " +
                                std::to_string(in.bytes) + " bytes, this rank expects " +
                                std::to_string(in.want_bytes)));
  }
  in.pending = nullptr;
  in.dst = in.want_buf;
  return Status::Ok();
}

Status ShmCommunicator::Drain(int peer) {
  Incoming& in = incoming_[peer];
  ChannelControl* ch = segment_->channel(peer, me_);
  const uint8_t* ring = segment_->ring(peer, me_);
  const size_t cap = tuning_.ring_bytes;
  const uint64_t head = ch->head.load(std::memory_order_acquire);
  if (head == in.tail) return Status::Ok();
  while (in.tail < head) {
    const size_t pos = static_cast<size_t>(in.tail % cap);
    const size_t avail = std::min(static_cast<size_t>(head - in.tail), cap - pos);
    const uint8_t* p = ring + pos;
    if (!in.in_message) {
      const size_t m = std::min(avail, kHeaderBytes - in.header_got);
      std::memcpy(in.header + in.header_got, p, m);
      in.header_got += m;
      in.tail += m;
      if (in.header_got < kHeaderBytes) continue;
      in.header_got = 0;
      HORA_RETURN_IF_ERROR(StartMessage(peer));
      continue;
    }
    const size_t m = std::min<size_t>(avail, in.bytes - in.got);
    CopyBytes(in.dst + in.got, p, m);
    in.got += m;
    in.tail += m;
    if (in.got == in.bytes) {
      in.in_message = false;
      if (in.pending != nullptr) {
        in.pending->complete = true;
      } else {
        in.want_done = true;  // leave what follows in the ring: a later Recv takes it directly
        break;
      }
    }
  }
  ch->tail.store(in.tail, std::memory_order_seq_cst);
  Ring(peer);
  return Status::Ok();
}

}  // namespace shm
}  // namespace hora
