// PeerMatch (peer_match.h).
#include "collectives/peer_match.h"

#include <cstring>

namespace hora {
namespace {

std::string Describe(const PeerChannel::Meta& m) {
  return std::to_string(m.bytes) + " bytes (" + DataTypeName(m.dtype) + ")";
}

// Why a recv cannot take a message; OK when it can.
Status Mismatch(const std::string& what, const PeerChannel::Meta& sent,
                const PeerChannel::Meta& want) {
  if (sent.bytes == want.bytes && sent.dtype == want.dtype) return Status::Ok();
  return Status(Code::kMismatch, what + ": the " + (sent.bytes != want.bytes ? "size" : "dtype") +
                                     " differs: the sender sends " + Describe(sent) +
                                     ", the recv takes " + Describe(want));
}

Status Prefixed(const std::string& what, const Status& s) {
  return Status(s.code(), what + ": " + s.message());
}

std::string Seconds(std::chrono::milliseconds d) {
  const std::string s = std::to_string(static_cast<double>(d.count()) / 1000.0);
  return s.substr(0, s.find('.') + 2) + " s";
}

}  // namespace

Status PeerMatch::Gone(int peer) const {
  auto it = gone_.find(peer);
  return it == gone_.end() ? Status::Ok() : it->second;
}

void PeerMatch::Send(int peer, const Key& key, std::string what, Done done) {
  sends_[{peer, key}] = SendOp{std::move(what), std::move(done), Clock::now()};
}

Status PeerMatch::Match(const Arrival& a, const RecvOp& op, const Key& key, Effects* e) {
  if (!a.refusal.ok()) return op.done ? Prefixed(op.what, a.refusal) : a.refusal;
  Status s = op.done ? Mismatch(op.what, a.meta, op.meta) : op.refusal;
  e->answers.push_back({a.conn, key, s});
  return s;
}

bool PeerMatch::Recv(int peer, const Key& key, const Meta& meta, void* out, std::string what,
                     Done done, Effects* e, std::unique_ptr<char[]>* data, Take* take) {
  RecvOp op{meta,        static_cast<char*>(out), std::move(what), std::move(done), Status::Ok(),
            Clock::now()};
  auto it = arrivals_.find({peer, key});
  if (it != arrivals_.end() && it->second.parked) {
    Status s = Mismatch(op.what, it->second.meta, op.meta);
    if (s.ok()) {
      *take = Take{it->second.conn, std::move(op.what), std::move(op.done)};  // answered once read
    } else {
      e->answers.push_back({it->second.conn, key, s});
      e->done.emplace_back(std::move(op.done), std::move(s));
    }
    arrivals_.erase(it);
    return true;
  }
  if (it != arrivals_.end() && it->second.complete) {
    Status s = Match(it->second, op, key, e);
    if (s.ok()) *data = std::move(it->second.data);
    arrivals_.erase(it);
    e->done.emplace_back(std::move(op.done), std::move(s));
    return true;
  }
  if (Status gone = Gone(peer); !gone.ok()) {
    e->done.emplace_back(std::move(op.done), Prefixed(op.what, gone));
    return false;
  }
  if (it != arrivals_.end() && it->second.refusal.ok()) e->redirects.push_back(it->second.conn);
  recvs_[{peer, key}] = std::move(op);
  return false;
}

void PeerMatch::RefuseRecv(int peer, const Key& key, const Status& why, Effects* e) {
  RecvOp op{Meta(), nullptr, "", nullptr, why, Clock::now()};
  auto it = arrivals_.find({peer, key});
  if (it != arrivals_.end() && (it->second.complete || it->second.parked)) {
    (void)Match(it->second, op, key, e);
    arrivals_.erase(it);
  } else if (Gone(peer).ok()) {
    recvs_[{peer, key}] = std::move(op);
  }
}

char* PeerMatch::Arriving(int conn, int peer, const Key& key, const Meta& sent, Effects* e) {
  auto it = recvs_.find({peer, key});
  if (it == recvs_.end()) {
    Arrival& a = arrivals_[{peer, key}];
    a.conn = conn;
    a.meta = sent;
    a.data.reset(new char[static_cast<size_t>(sent.bytes)]);  // no zeroing: pages stay untouched
    a.since = Clock::now();
    return a.data.get();
  }
  Answer& r = reading_[conn];
  r.peer = peer;
  r.key = key;
  r.recv = std::move(it->second);
  recvs_.erase(it);
  r.status = r.recv.done ? Mismatch(r.recv.what, sent, r.recv.meta) : r.recv.refusal;
  if (r.status.ok()) return r.recv.out;
  if (r.recv.done) e->done.emplace_back(std::move(r.recv.done), r.status);
  r.recv.done = nullptr;
  return nullptr;
}

bool PeerMatch::Park(int conn, int peer, const Key& key, const Meta& sent) {
  if (recvs_.count({peer, key}) != 0) return false;
  Arrival& a = arrivals_[{peer, key}];
  a.conn = conn;
  a.meta = sent;
  a.parked = true;
  a.since = Clock::now();
  return true;
}

void PeerMatch::Arrived(int conn, int peer, const Key& key, Effects* e) {
  auto reading = reading_.find(conn);
  if (reading != reading_.end()) {  // into a recv, or dropped
    Answer& r = reading->second;
    e->answers.push_back({conn, key, r.status});
    if (r.recv.done) e->done.emplace_back(std::move(r.recv.done), Status::Ok());
    reading_.erase(reading);
    return;
  }
  auto it = arrivals_.find({peer, key});
  if (it == arrivals_.end()) return;
  it->second.complete = true;
  auto posted = recvs_.find({peer, key});  // a recv posted while it was arriving
  if (posted == recvs_.end()) return;
  RecvOp op = std::move(posted->second);
  recvs_.erase(posted);
  Status s = Match(it->second, op, key, e);
  if (s.ok() && it->second.meta.bytes > 0) {
    std::memcpy(op.out, it->second.data.get(), static_cast<size_t>(it->second.meta.bytes));
  }
  arrivals_.erase(it);
  if (op.done) e->done.emplace_back(std::move(op.done), std::move(s));
}

char* PeerMatch::Redirect(int conn, int peer, const Key& key, std::unique_ptr<char[]>* arrived) {
  auto a = arrivals_.find({peer, key});
  auto posted = recvs_.find({peer, key});
  if (a == arrivals_.end() || a->second.complete || a->second.conn != conn ||
      posted == recvs_.end() || !posted->second.done ||
      !Mismatch(posted->second.what, a->second.meta, posted->second.meta).ok()) {
    return nullptr;
  }
  Answer& r = reading_[conn];  // from here on as if the recv had come first
  r.peer = peer;
  r.key = key;
  r.status = Status::Ok();
  r.recv = std::move(posted->second);
  recvs_.erase(posted);
  *arrived = std::move(a->second.data);
  arrivals_.erase(a);
  return r.recv.out;
}

void PeerMatch::Refusal(int peer, const Key& key, const Status& why, Effects* e) {
  auto it = recvs_.find({peer, key});
  if (it == recvs_.end()) {
    Arrival& a = arrivals_[{peer, key}];
    a.complete = true;
    a.refusal = why;
    a.since = Clock::now();
    return;
  }
  if (it->second.done)
    e->done.emplace_back(std::move(it->second.done), Prefixed(it->second.what, why));
  recvs_.erase(it);
}

void PeerMatch::Answered(int peer, const Key& key, const Status& answer, Effects* e) {
  auto it = sends_.find({peer, key});
  if (it == sends_.end()) return;
  e->done.emplace_back(
      std::move(it->second.done),
      answer.ok() ? answer : Prefixed(it->second.what + ": the receiver refused it", answer));
  sends_.erase(it);
}

void PeerMatch::Unread(int peer, const Key& key, Take take, Effects* e) {
  if (Status gone = Gone(peer); !gone.ok()) {
    e->done.emplace_back(std::move(take.done), Prefixed(take.what, gone));
    return;
  }
  recvs_[{peer, key}] = RecvOp{
      Meta{}, nullptr, std::move(take.what), std::move(take.done), Status::Ok(), Clock::now()};
}

void PeerMatch::Lost(int peer, const Status& why, Effects* e) {
  if (gone_.count(peer) != 0) return;
  gone_[peer] = why;
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (it->first.first != peer) {
      ++it;
      continue;
    }
    e->done.emplace_back(std::move(it->second.done), Prefixed(it->second.what, why));
    it = sends_.erase(it);
  }
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if (it->first.first != peer) {
      ++it;
      continue;
    }
    if (it->second.done)
      e->done.emplace_back(std::move(it->second.done), Prefixed(it->second.what, why));
    it = recvs_.erase(it);
  }
}

void PeerMatch::Closed(int conn, const Status& why, Effects* e) {
  // Cut off while arriving, or parked (its sender's memory is not to be read any more).
  for (auto a = arrivals_.begin(); a != arrivals_.end();) {
    a = a->second.conn == conn && !a->second.complete ? arrivals_.erase(a) : std::next(a);
  }
  auto it = reading_.find(conn);
  if (it == reading_.end()) return;
  if (it->second.recv.done) {
    e->done.emplace_back(std::move(it->second.recv.done), Prefixed(it->second.recv.what, why));
  }
  reading_.erase(it);
}

void PeerMatch::Stalls(std::chrono::milliseconds stall, Effects* e) {
  const auto old = Clock::now() - stall;
  const std::string after = " in " + Seconds(stall);
  auto fail = [&](Done* done, Status s) {
    e->stalls.push_back(s);
    e->done.emplace_back(std::move(*done), std::move(s));
  };
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (it->second.since > old) {
      ++it;
      continue;
    }
    fail(&it->second.done,
         DeadlineExceeded(it->second.what + ": stalled: the receiver posted no matching recv" +
                          after));
    it = sends_.erase(it);
  }
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if (it->second.since > old) {
      ++it;
      continue;
    }
    if (it->second.done) {
      fail(&it->second.done,
           DeadlineExceeded(it->second.what + ": stalled: the sender sent nothing" + after));
    }
    it = recvs_.erase(it);
  }
  for (auto it = arrivals_.begin(); it != arrivals_.end();) {
    if (it->second.since > old || !(it->second.complete || it->second.parked)) {
      ++it;
      continue;
    }
    const Key& k = it->first.second;
    e->stalls.push_back(DeadlineExceeded(
        "stalled: a message from rank " + std::to_string(it->first.first) + " (process set " +
        std::to_string(k.set) + ", tag " + std::to_string(k.tag) + ", #" + std::to_string(k.seq) +
        ") waited" + after + " for its recv on rank " + std::to_string(rank_)));
    it = arrivals_.erase(it);
  }
}

void PeerMatch::FailAll(const Status& why, Effects* e) {
  for (auto& [k, op] : sends_) e->done.emplace_back(std::move(op.done), Prefixed(op.what, why));
  for (auto& [k, op] : recvs_) {
    if (op.done) e->done.emplace_back(std::move(op.done), Prefixed(op.what, why));
  }
  for (auto& [conn, r] : reading_) {
    if (r.recv.done) e->done.emplace_back(std::move(r.recv.done), Prefixed(r.recv.what, why));
  }
  sends_.clear();
  recvs_.clear();
  arrivals_.clear();
  reading_.clear();
}

}  // namespace hora
