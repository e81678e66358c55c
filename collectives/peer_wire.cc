// PeerConn (peer_wire.h).
#include "collectives/peer_wire.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hora {

std::string PeerConn::Read(Reader* reader, char* scratch, size_t scratch_bytes) {
  for (;;) {
    char* into;
    size_t want;
    if (in_ == In::kBody) {
      if (redirect_.exchange(false, std::memory_order_acq_rel) && header_.kind == kPeerData) {
        const size_t received = static_cast<size_t>(header_.bytes) - left_;
        if (char* to = reader->OnRedirect(this, received)) dest_ = to + received;
      }
      into = dest_ != nullptr ? dest_ : scratch;
      want = dest_ != nullptr ? left_ : std::min(left_, scratch_bytes);
    } else {
      const size_t need = in_ == In::kHello ? sizeof(TcpHello) : sizeof(PeerHeader);
      into = head_ + got_;
      want = need - got_;
    }
    const ssize_t r = recv(fd_, into, want, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return "";
    if (r < 0) return std::string("reading failed: ") + strerror(errno);
    if (r == 0) return "closed";
    if (in_ == In::kBody) {
      if (dest_ != nullptr) dest_ += r;
      left_ -= static_cast<size_t>(r);
      if (left_ == 0) {
        in_ = In::kHeader;
        reader->OnFrame(this);
      }
      continue;
    }
    got_ += static_cast<size_t>(r);
    if (in_ == In::kHello && got_ == sizeof(TcpHello)) {
      TcpHello hello;
      std::memcpy(&hello, head_, sizeof(hello));
      if (!reader->OnHello(this, hello)) return "not one of this job's";
      in_ = In::kHeader;
      got_ = 0;
    } else if (in_ == In::kHeader && got_ == sizeof(PeerHeader)) {
      std::memcpy(&header_, head_, sizeof(PeerHeader));
      got_ = 0;
      if (!StartBody(reader)) return "it sent a malformed frame";
    }
  }
}

bool PeerConn::StartBody(Reader* reader) {
  const PeerHeader& h = header_;
  if (h.bytes < 0 || h.kind < kPeerData || h.kind > kPeerLastKind ||
      (h.kind != kPeerData && h.bytes > kPeerMaxText)) {
    return false;
  }
  in_ = In::kBody;
  left_ = static_cast<size_t>(h.bytes);
  redirect_.store(false, std::memory_order_relaxed);  // a request for an earlier body
  if (h.kind == kPeerData) {
    dest_ = reader->OnData(this);
  } else {
    text_.resize(left_);
    dest_ = text_.data();
  }
  if (left_ == 0) {
    in_ = In::kHeader;
    reader->OnFrame(this);
  }
  return true;
}

std::string PeerConn::Flush() {
  while (!out.empty()) {
    PeerOut& o = out.front();
    const size_t total = sizeof(PeerHeader) + static_cast<size_t>(o.header.bytes);
    iovec v[2];
    int n = 0;
    if (o.sent < sizeof(PeerHeader)) {
      v[n++] = {reinterpret_cast<char*>(&o.header) + o.sent, sizeof(PeerHeader) - o.sent};
      v[n++] = {const_cast<char*>(o.body), static_cast<size_t>(o.header.bytes)};
    } else {
      v[n++] = {const_cast<char*>(o.body) + (o.sent - sizeof(PeerHeader)), total - o.sent};
    }
    msghdr m{};
    m.msg_iov = v;
    m.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return "";
    if (w < 0) return std::string("writing to it failed: ") + strerror(errno);
    o.sent += static_cast<size_t>(w);
    if (o.sent == total) out.pop_front();
  }
  return "";
}

std::string ReadPeerMemory(const PeerMemory& from, char* to) {
  int64_t done = 0;
  while (done < from.bytes) {
    const iovec local{to + done, static_cast<size_t>(from.bytes - done)};
    const iovec remote{reinterpret_cast<void*>(from.address + static_cast<uint64_t>(done)),
                       static_cast<size_t>(from.bytes - done)};
    const ssize_t n = process_vm_readv(static_cast<pid_t>(from.pid), &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::string("process_vm_readv: ") + (n < 0 ? strerror(errno) : "no bytes");
    done += n;
  }
  return "";
}

}  // namespace hora
