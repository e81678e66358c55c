// The board over messages, what a member sends (runtime/steady_net_board.h): its own
// messages, and on two levels a leader's relays (runtime/steady_net_routes.h).
#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "runtime/steady_net_board.h"

namespace hora {
int64_t NetSteadyBoard::NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void NetSteadyBoard::QueueOwn(Kind kind, uint32_t e, uint32_t n, bool eager,
                              const std::vector<char>& data) {
  const std::vector<int>& to = routes_.own_targets();
  if (to.empty()) return;  // a leader: RelayInstance sends its messages with its host's
  Outgoing out{routes_.two_level() ? &to : nullptr, {}};
  steady_wire::Put(&out.message, kind, eager, member_, e, n, -1, data.data(), data.size());
  outbox_.push_back(std::move(out));
}

bool NetSteadyBoard::QueueHeld(const std::vector<int>* to, uint32_t e, uint32_t n,
                               const std::vector<int>* of) {
  if (to->empty()) return false;
  const std::vector<Slot>& slots = At(e).slots[n % 2];
  Outgoing out{to, {}};
  const size_t count = of != nullptr ? of->size() : static_cast<size_t>(members_);
  for (size_t i = 0; i < count; ++i) {
    const int m = of != nullptr ? (*of)[i] : static_cast<int>(i);
    const Slot& slot = slots[static_cast<size_t>(m)];
    if (slot.instance != n || slot.kind == Kind::kNone) continue;
    const size_t bytes = slot.eager ? slot.data.size() : 0;
    steady_wire::Put(&out.message, slot.kind, slot.eager, m, e, n, -1, slot.data.data(), bytes);
  }
  if (out.message.empty()) return false;
  outbox_.push_back(std::move(out));
  return true;
}

void NetSteadyBoard::QueueNews(Kind kind, int origin, int from) {
  std::vector<char> message;
  steady_wire::Put(&message, kind, false, origin, 0, 0, -1, nullptr, 0);
  if (!routes_.two_level() || !routes_.leader()) {
    // Flat, every member hears it from its origin; a member tells its leader.
    if (from < 0)
      outbox_.push_back(
          Outgoing{routes_.two_level() ? &routes_.own_targets() : nullptr, std::move(message)});
    return;
  }
  if ((from < 0 || routes_.local(from)) && !routes_.leaders().empty()) {
    outbox_.push_back(Outgoing{&routes_.leaders(), message});
  }
  if (!routes_.locals().empty()) outbox_.push_back(Outgoing{&routes_.locals(), message});
}

void NetSteadyBoard::Lost(int m) {
  if (!routes_.two_level()) {
    Gone(m);
    return;
  }
  for (int o = 0; o < members_; ++o) {
    if (o == member_ || gone_[static_cast<size_t>(o)]) continue;
    // A member's only peer is its leader: without it, it hears from nobody. A leader without
    // another leader hears from nobody of that host.
    const bool unheard =
        !routes_.leader() || o == m || (!routes_.local(m) && routes_.same_host(o, m));
    if (!unheard) continue;
    Gone(o);
    if (routes_.leader()) QueueNews(Kind::kGone, o, -1);
  }
}

void NetSteadyBoard::Flush() {
  MutexLock flush(&flush_mu_);
  std::vector<Outgoing> out;
  {
    MutexLock lock(&mu_);
    deferred_until_us_.store(0, std::memory_order_relaxed);
    if (outbox_.empty()) return;
    out.swap(outbox_);
  }
  // Consecutive messages to the same members go as one (their records follow each other). A
  // failed post (the job is aborting, or a member is gone) shows on the reading side: the
  // member's connection ends and what waits on it is decided slow.
  for (size_t i = 0; i < out.size();) {
    std::vector<char>& message = out[i].message;
    size_t j = i + 1;
    for (; j < out.size() && out[j].to == out[i].to &&
           message.size() + out[j].message.size() <= Mailbox::kMaxMessage;
         ++j) {
      message.insert(message.end(), out[j].message.begin(), out[j].message.end());
    }
    Status s = out[i].to != nullptr ? box_->PostTo(*out[i].to, message.data(), message.size())
                                    : box_->Post(message.data(), message.size());
    if (!s.ok()) HORA_LOG_DEBUG("steady path: {}", s.message());
    i = j;
  }
}

void NetSteadyBoard::RelayInstance(uint32_t e, uint32_t n) {
  if (!routes_.two_level() || !routes_.leader()) return;
  EntryState& s = At(e);
  Relay& r = s.relay[n % 2];
  if (r.first_us != 0 && static_cast<int32_t>(r.instance - n) > 0) return;  // passed (a partial)
  if (r.instance != n || r.first_us == 0) r = Relay{n, false, false, NowUs(), 0};
  if (!r.host_sent) {
    bool all = true;
    bool refused = false;
    for (int m : routes_.host_members()) {
      const Slot& slot = s.slots[n % 2][static_cast<size_t>(m)];
      if (slot.instance == n && slot.kind != Kind::kNone) {
        refused |= slot.kind == Kind::kRefuse;
      } else {
        all = false;
      }
    }
    if (all || refused) {
      r.host_sent = true;
      (void)QueueHeld(&routes_.leaders(), e, n, &routes_.host_members());
    }
  }
  const Decision& d = s.decided[n % 2];
  if (!r.forwarded && d.instance == n && d.outcome != Outcome::kPending) {
    r.forwarded = true;
    (void)QueueHeld(&routes_.locals(), e, n, nullptr);
  }
}

void NetSteadyBoard::Tick() {
  if (!routes_.two_level() || !routes_.leader()) return;
  const int64_t now = NowUs();
  if (now < next_tick_us_.load(std::memory_order_relaxed)) return;
  next_tick_us_.store(now + kPartialAfterUs / 4, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    for (uint32_t e = 0; e < kMaxEntries; ++e) {
      EntryState* s = entries_[e].get();
      if (s == nullptr) continue;
      for (Relay& r : s->relay) {
        const Decision& d = s->decided[r.instance % 2];
        if (r.first_us == 0 || now - r.first_us < kPartialAfterUs ||
            (d.instance == r.instance && d.outcome != Outcome::kPending)) {
          continue;
        }
        int heard = 0;
        for (const Slot& slot : s->slots[r.instance % 2]) {
          heard += slot.instance == r.instance && slot.kind != Kind::kNone ? 1 : 0;
        }
        if (heard == r.partial_heard) continue;
        r.partial_heard = heard;
        (void)QueueHeld(&routes_.leaders(), e, r.instance, nullptr);
        (void)QueueHeld(&routes_.locals(), e, r.instance, nullptr);
      }
    }
  }
  Flush();
}

}  // namespace hora
