#include "runtime/steady_net_board.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/logging.h"

namespace hora {

std::string NetSteadyBoard::Refusal(int members, const std::vector<std::string>& hostnames) {
  const SteadyRoutes routes(0, hostnames, members);
  if (!routes.two_level() && members > kMaxFlatMembers) {
    return std::to_string(members) + " members on " + std::to_string(routes.hosts()) +
           " host(s) agree flat, at most " + std::to_string(kMaxFlatMembers);
  }
  if (members > kMaxMembers) {
    return std::to_string(members) + " members, at most " + std::to_string(kMaxMembers);
  }
  if (routes.hosts() > kMaxHosts) {
    return std::to_string(routes.hosts()) + " hosts, at most " + std::to_string(kMaxHosts);
  }
  return "";
}

NetSteadyBoard::NetSteadyBoard(std::unique_ptr<Mailbox> box, bool ordered,
                               const std::vector<std::string>& hostnames)
    : box_(std::move(box)),
      member_(box_->rank()),
      members_(box_->size()),
      ordered_(ordered),
      routes_(member_, hostnames, members_),
      eager_bytes_(routes_.two_level()
                       ? std::min(kEagerBytes, kRelayBytes / static_cast<size_t>(members_))
                       : kEagerBytes),
      log_(new std::atomic<uint64_t>[kLogSlots]) {
  MutexLock lock(&mu_);
  entries_.resize(kMaxEntries);
  gone_.assign(static_cast<size_t>(members_), false);
}

NetSteadyBoard::~NetSteadyBoard() {
  MutexLock lock(&sleep_mu_);
  for (int fd : spare_fds_) close(fd);
}

NetSteadyBoard::EntryState& NetSteadyBoard::At(uint32_t e) {
  std::unique_ptr<EntryState>& s = entries_[e];
  if (!s) {
    s = std::make_unique<EntryState>();
    for (auto& slots : s->slots) slots.resize(static_cast<size_t>(members_));
  }
  return *s;
}

NetSteadyBoard::Outcome NetSteadyBoard::Record(int m, Kind kind, bool eager, uint32_t e, uint32_t n,
                                               const char* data, size_t bytes) {
  Slot& slot = At(e).slots[n % 2][static_cast<size_t>(m)];
  // A partial relay may carry an instance this member has passed (never overwrite a newer one).
  if (slot.kind != Kind::kNone && static_cast<int32_t>(slot.instance - n) > 0) {
    return Outcome::kPending;
  }
  slot.instance = n;
  slot.kind = kind;
  slot.eager = eager;
  slot.data.assign(data, data + bytes);
  return Decide(e, n, m);
}

void NetSteadyBoard::Settle(EntryState* s, uint32_t n, Outcome outcome, bool ordered) {
  Slot& own = s->slots[n % 2][static_cast<size_t>(member_)];
  const bool mine = own.instance == n && own.kind == Kind::kOffer;
  Decision& d = s->decided[n % 2];
  if (d.instance == n && d.outcome != Outcome::kPending) {
    if (ordered && mine && own.awaiting_order) {  // the ORDER it waited for
      own.awaiting_order = false;
      open_offers_.fetch_sub(1, std::memory_order_acq_rel);
    }
    return;
  }
  d = Decision{n, outcome};
  if (!mine) return;
  if (outcome == Outcome::kFast && !own.eager && member_ != 0 && !ordered) {
    own.awaiting_order = true;  // still open: the lazy driver reads the connections for it
    return;
  }
  open_offers_.fetch_sub(1, std::memory_order_acq_rel);
}

void NetSteadyBoard::Append(uint32_t e, int last, bool more) {
  const uint64_t index = written_++;
  log_[index % kLogSlots].store(
      uint64_t{e} | (more ? kMoreBit : 0) | (static_cast<uint64_t>(last + 1) << 32),
      std::memory_order_relaxed);
  if (!more) tail_.store(written_, std::memory_order_release);  // the group is readable
}

void NetSteadyBoard::OrderGroup(const std::vector<Ordered>& group) {
  Outgoing order{routes_.two_level() ? &routes_.leaders() : nullptr, {}};
  for (size_t i = 0; i < group.size(); ++i) {
    const bool more = i + 1 < group.size();
    Append(group[i].e, group[i].last, more);
    steady_wire::Put(&order.message, Kind::kOrder, more, 0, group[i].e, group[i].n, group[i].last,
                     nullptr, 0);
  }
  if (routes_.two_level() && !routes_.locals().empty()) {
    outbox_.push_back(Outgoing{&routes_.locals(), order.message});
  }
  outbox_.push_back(std::move(order));
  group_open_ = true;
  open_end_ = written_;
  pullable_.store(false, std::memory_order_release);
}

bool NetSteadyBoard::OrderHeld() {
  if (held_orders_.empty()) return false;
  std::vector<Ordered> group;
  group.swap(held_orders_);
  OrderGroup(group);
  return true;
}

bool NetSteadyBoard::Pull() {
  if (!Pullable()) return false;
  {
    MutexLock lock(&mu_);
    if (group_open_ || !OrderHeld()) return false;
  }
  Flush();
  return true;
}

void NetSteadyBoard::Ran(uint64_t next) {
  if (member_ != 0) return;
  {
    MutexLock lock(&mu_);
    if (!group_open_ || next < open_end_) return;
    group_open_ = false;
    if (!OrderHeld()) return;
  }
  Flush();
  // The caller runs the group; a helper waiting for one of its instances looks again (it
  // slept while the instance was held, with nothing in the log to run).
  Wake(false);
}

NetSteadyBoard::Outcome NetSteadyBoard::Decide(uint32_t e, uint32_t n, int last) {
  EntryState& s = At(e);
  Decision& d = s.decided[n % 2];
  if (d.instance == n && d.outcome != Outcome::kPending) return Outcome::kPending;
  bool all = true;
  bool slow = false;
  for (int m = 0; m < members_; ++m) {
    const Slot& slot = s.slots[n % 2][static_cast<size_t>(m)];
    if (slot.instance == n && slot.kind != Kind::kNone) {
      if (slot.kind == Kind::kRefuse) slow = true;
    } else {
      all = false;
      if (gone_[static_cast<size_t>(m)]) slow = true;
    }
  }
  if (slow) {
    Settle(&s, n, Outcome::kSlow);
    return Outcome::kSlow;
  }
  if (!all) return Outcome::kPending;
  Settle(&s, n, Outcome::kFast);
  // Every member's offer of n is here; they agree on its size, so on whether it is Eager.
  if (s.slots[n % 2][static_cast<size_t>(member_)].eager) {
    Append(e, last, false);
  } else if (member_ == 0) {  // the order of the instances that run on the communicator
    held_orders_.push_back(Ordered{e, n, last});  // until the runner asks (Pull, Ran)
    pullable_.store(!group_open_, std::memory_order_release);
  }  // else: appended when member 0's ORDER comes
  return Outcome::kFast;
}

void NetSteadyBoard::Gone(int m) {
  gone_[static_cast<size_t>(m)] = true;
  for (uint32_t e = 0; e < kMaxEntries; ++e) {
    if (!entries_[e]) continue;
    for (int p = 0; p < 2; ++p) {
      uint32_t n = 0;  // the latest instance some member sent of this parity
      for (const Slot& slot : entries_[e]->slots[p]) n = std::max(n, slot.instance);
      if (n != 0) (void)Decide(e, n, -1);
    }
  }
}

bool NetSteadyBoard::Drain() const {
  // Reading changes the board's state (messages recorded, instances decided): const only in
  // that Bell and State, which callers see as reads, may call it.
  auto* self = const_cast<NetSteadyBoard*>(this);
  if (!read_mu_.TryLock()) return false;
  bool decided = false;
  bool slow = false;  // refusals, joins and lost members wake every sleeper
  bool read = false;
  Status s = box_->Read([&](int sender, const char* data, size_t bytes) {
    read = true;
    MutexLock lock(&self->mu_);
    Outgoing orders{&routes_.locals(), {}};  // a leader's: member 0's group, for its host
    const bool whole =
        steady_wire::ForEach(data, bytes, [&](const steady_wire::Header& h, const char* body) {
          self->mu_.AssertHeld();  // called back synchronously, under the lock
          const Kind kind = static_cast<Kind>(h.kind);
          const int origin = static_cast<int>(h.origin);
          if (origin < 0 || origin >= members_ || h.entry >= kMaxEntries) return;
          if (origin == member_ && kind != Kind::kOrder) return;  // relayed back: known here
          if (kind == Kind::kJoined || kind == Kind::kGone) {
            if (kind == Kind::kJoined) self->joined_.store(true, std::memory_order_release);
            self->Gone(origin);
            self->QueueNews(kind, origin, sender);
            decided = slow = true;
            return;
          }
          if (kind == Kind::kOrder) {  // from member 0: fast, and its place in the common order
            const bool more = h.eager != 0;  // the group goes on in the next record
            self->Settle(&self->At(h.entry), h.instance, Outcome::kFast, true);
            self->Append(h.entry, h.last, more);
            if (routes_.two_level() && routes_.leader() && !routes_.locals().empty()) {
              steady_wire::Put(&orders.message, Kind::kOrder, more, 0, h.entry, h.instance, h.last,
                               nullptr, 0);
              if (!more) {  // the whole group, in one message
                self->outbox_.push_back(std::move(orders));
                orders = Outgoing{&routes_.locals(), {}};
              }
            }
            decided = true;
            return;
          }
          if (kind != Kind::kOffer && kind != Kind::kRefuse) return;
          const Outcome o =
              self->Record(origin, kind, h.eager != 0, h.entry, h.instance, body, h.bytes);
          decided |= o != Outcome::kPending;
          slow |= o == Outcome::kSlow;
          self->RelayInstance(h.entry, h.instance);
        });
    if (!whole) HORA_LOG_DEBUG("steady path: a message cut short ({} bytes)", bytes);
    if (!orders.message.empty()) self->outbox_.push_back(std::move(orders));  // never cut
  });
  if (!s.ok()) {
    MutexLock lock(&self->mu_);
    for (int m = 0; m < members_; ++m) {
      if (m != member_ && !self->gone_[static_cast<size_t>(m)] && box_->Ended(m)) {
        HORA_LOG_DEBUG("steady path: {}", s.message());
        self->Lost(m);
        decided = slow = true;
      }
    }
  }
  read_mu_.Unlock();
  // What reading queued (relays, ORDERs), with the offers deferred meanwhile; deferred ones
  // also once their time is up.
  const int64_t deferred = deferred_until_us_.load(std::memory_order_relaxed);
  if (read || !s.ok() || (deferred != 0 && NowUs() >= deferred)) self->Flush();
  if (decided) self->Wake(slow);
  return decided;
}

void NetSteadyBoard::PutEager(uint32_t e, uint32_t n, const void* data, size_t bytes) {
  MutexLock lock(&mu_);
  Slot& slot = At(e).slots[n % 2][static_cast<size_t>(member_)];
  slot.kind = Kind::kNone;  // not offered yet
  slot.instance = n;
  const char* p = static_cast<const char*>(data);
  slot.data.assign(p, p + bytes);
}

NetSteadyBoard::Outcome NetSteadyBoard::Offer(uint32_t e, uint32_t n, bool eager) {
  Outcome o;
  bool defer = false;
  bool started = false;  // this offer started a deferral
  {
    MutexLock lock(&mu_);
    Slot& slot = At(e).slots[n % 2][static_cast<size_t>(member_)];
    if (slot.instance != n || !eager) slot.data.clear();  // not Eager: no data rides along
    // While an earlier offer of this member is open, this one waits to go out with the next
    // messages (see kDeferUs).
    defer = open_offers_.load(std::memory_order_acquire) > 0 ||
            deferred_until_us_.load(std::memory_order_relaxed) != 0;
    if (slot.awaiting_order) {  // instance n - 2's ORDER never came (its member 0 is gone)
      slot.awaiting_order = false;
      open_offers_.fetch_sub(1, std::memory_order_acq_rel);
    }
    slot.instance = n;
    slot.kind = Kind::kOffer;
    slot.eager = eager;
    open_offers_.fetch_add(1, std::memory_order_acq_rel);  // until Settle
    QueueOwn(Kind::kOffer, e, n, eager, slot.data);
    o = Decide(e, n, member_);
    RelayInstance(e, n);
    defer = defer && o == Outcome::kPending;  // else the others may wait for it now
    if (defer && deferred_until_us_.load(std::memory_order_relaxed) == 0) {
      deferred_until_us_.store(NowUs() + kDeferUs, std::memory_order_relaxed);
      started = true;
    }
  }
  if (!defer) Flush();
  // A sleeper of this member chose its timeout (and, a lazy driver, whether to read the
  // connections) before: it looks again, to send them in time.
  if (started) Wake(false);
  if (o == Outcome::kSlow) Wake(true);
  if (o == Outcome::kPending) (void)Drain();
  MutexLock lock(&mu_);
  const Decision& d = At(e).decided[n % 2];
  return d.instance == n ? d.outcome : Outcome::kPending;
}

NetSteadyBoard::Outcome NetSteadyBoard::Refuse(uint32_t e, uint32_t n) {
  Outcome o;
  {
    MutexLock lock(&mu_);
    QueueOwn(Kind::kRefuse, e, n, false, {});
    (void)Record(member_, Kind::kRefuse, false, e, n, nullptr, 0);
    RelayInstance(e, n);
    const Decision& d = At(e).decided[n % 2];
    o = d.instance == n ? d.outcome : Outcome::kPending;
  }
  Flush();
  Wake(true);
  return o;
}

NetSteadyBoard::Outcome NetSteadyBoard::State(uint32_t e, uint32_t n, uint64_t) const {
  (void)Drain();
  MutexLock lock(&mu_);
  const std::unique_ptr<EntryState>& s = entries_[e];
  if (!s) return Outcome::kPending;
  const Decision& d = s->decided[n % 2];
  return d.instance == n ? d.outcome : Outcome::kPending;
}

NetSteadyBoard::Outcome NetSteadyBoard::Withdraw(uint32_t e, uint32_t n, uint64_t unread) {
  return State(e, n, unread);  // an offer stands (see the header)
}

std::vector<int> NetSteadyBoard::Missing(uint32_t e, uint32_t n) const {
  MutexLock lock(&mu_);
  std::vector<int> missing;
  const std::unique_ptr<EntryState>& s = entries_[e];
  for (int m = 0; m < members_; ++m) {
    const bool heard = s && s->slots[n % 2][static_cast<size_t>(m)].instance == n &&
                       s->slots[n % 2][static_cast<size_t>(m)].kind != Kind::kNone;
    if (!heard) missing.push_back(m);
  }
  return missing;
}

bool NetSteadyBoard::GetEager(uint32_t e, uint32_t n, int m, void* data, size_t bytes) const {
  MutexLock lock(&mu_);
  const std::unique_ptr<EntryState>& s = entries_[e];
  if (!s) return false;
  const Slot& slot = s->slots[n % 2][static_cast<size_t>(m)];
  if (slot.instance != n || slot.kind != Kind::kOffer || slot.data.size() != bytes) return false;
  if (bytes > 0) memcpy(data, slot.data.data(), bytes);
  return true;
}

bool NetSteadyBoard::LogAt(uint64_t index, uint32_t* e, int* last, bool* more) const {
  if (index >= tail_.load(std::memory_order_acquire)) return false;
  const uint64_t v = log_[index % kLogSlots].load(std::memory_order_relaxed);
  *e = static_cast<uint32_t>(v & (kMoreBit - 1));
  if (last != nullptr) *last = static_cast<int>(v >> 32) - 1;
  if (more != nullptr) *more = (v & kMoreBit) != 0;
  return true;
}

uint32_t NetSteadyBoard::Bell() const {
  (void)Drain();
  return bell_.load(std::memory_order_acquire);
}

bool NetSteadyBoard::Sleep(uint32_t seen, int64_t timeout_us, Role role, bool lazy) {
  if (Bell() != seen) return true;
  const int64_t deferred = deferred_until_us_.load(std::memory_order_relaxed);
  if (deferred != 0) {  // wake to send them in time
    timeout_us = std::max<int64_t>(1, std::min(timeout_us, deferred - NowUs()));
  }
  int fd = -1;
  {
    MutexLock lock(&sleep_mu_);
    if (!spare_fds_.empty()) {
      fd = spare_fds_.back();
      spare_fds_.pop_back();
    } else {
      fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
    sleeping_fds_[static_cast<int>(role)].push_back(fd);
  }
  bool woken = true;
  // Registered first, then the bell: a ring after this read writes to fd.
  if (bell_.load(std::memory_order_acquire) == seen) {
    // A lazy driver reads the connections only while no helper does and an offer of this
    // member waits or it relays for its host: otherwise a message can decide nothing it must
    // act on (its helpers read them; the others' offers are read when this member offers),
    // and each one would wake it. (A leader's relays wait at most one sleep when its last
    // helper left: what it must relay at once, it relays while it still waits itself.)
    const bool relays = routes_.two_level() && routes_.leader();
    if (lazy && (helpers() > 0 || (!relays && open_offers_.load(std::memory_order_acquire) == 0))) {
      pollfd p{fd, POLLIN, 0};
      woken = poll(&p, 1, static_cast<int>(std::max<int64_t>(1, timeout_us / 1000))) != 0;
    } else {
      woken = box_->Await(timeout_us, fd);
    }
  }
  MutexLock lock(&sleep_mu_);
  std::vector<int>& fds = sleeping_fds_[static_cast<int>(role)];
  fds.erase(std::find(fds.begin(), fds.end(), fd));
  uint64_t count = 0;
  (void)!read(fd, &count, sizeof(count));  // reset (non-blocking)
  spare_fds_.push_back(fd);
  return woken;
}

void NetSteadyBoard::Wake(bool everyone) {
  bell_.fetch_add(1, std::memory_order_acq_rel);
  MutexLock lock(&sleep_mu_);
  const uint64_t one = 1;
  const std::vector<int>& helpers = sleeping_fds_[static_cast<int>(Role::kHelper)];
  for (int fd : helpers) (void)!write(fd, &one, sizeof(one));
  if (everyone || helpers_.load(std::memory_order_seq_cst) == 0) {
    for (int fd : sleeping_fds_[static_cast<int>(Role::kDriver)]) {
      (void)!write(fd, &one, sizeof(one));
    }
  }
}

void NetSteadyBoard::LeaveHelp() {
  helpers_.fetch_sub(1, std::memory_order_seq_cst);
  // A lazy driver left the connections to the helpers (Sleep): it reads them again.
  if (helpers() == 0 && open_offers_.load(std::memory_order_acquire) > 0) Wake(true);
}

int NetSteadyBoard::sleeping(Role role) const {
  MutexLock lock(&sleep_mu_);
  return static_cast<int>(sleeping_fds_[static_cast<int>(role)].size());
}

void NetSteadyBoard::SetJoined() {
  joined_.store(true, std::memory_order_release);
  {
    MutexLock lock(&mu_);
    QueueNews(Kind::kJoined, member_, -1);
    Gone(member_);
  }
  Flush();
  Wake(true);
}

void NetSteadyBoard::Abort(const Status& reason) {
  box_->Abort(reason);
  WakeOwn();
}

}  // namespace hora
